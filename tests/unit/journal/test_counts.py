"""``Journal.counts``: entries counted by a field, for one route or all; a name that is no field says so."""

from __future__ import annotations

import pytest

from emulator.journal import Journal


def _journal() -> Journal:
    journal = Journal()
    for route, status, outcome in [("a", 200, "ok"), ("a", 504, "fault"), ("b", 200, "ok")]:
        journal.end(journal.begin(route, "POST", "/x"), status, outcome)
    return journal


def test_counts_by_a_field_for_one_route_or_all() -> None:
    journal = _journal()
    assert journal.counts() == {"ok": 2, "fault": 1}
    assert journal.counts("status", route="a") == {"200": 1, "504": 1}
    assert journal.counts("route") == {"a": 2, "b": 1}
    assert sum(journal.counts("duration").values()) == 3


def test_a_name_that_is_no_field_is_a_value_error_naming_the_fields() -> None:
    """It was an ``AttributeError`` from deep inside (``getattr``), and a typo like ``outcomes`` read as a bug."""
    with pytest.raises(ValueError, match=r"cannot count journal entries by 'outcomes': one of .*outcome"):
        _journal().counts("outcomes")
