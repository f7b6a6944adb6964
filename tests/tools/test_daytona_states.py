"""harness.daytona_states: a listed sandbox that a delete has reached, as the real API lists it for a moment."""

from __future__ import annotations

from enum import Enum
from types import SimpleNamespace

import pytest

from harness.daytona_states import errored, on_its_way_out


class State(Enum):
    STARTED = "started"
    DESTROYING = "destroying"
    DESTROYED = "destroyed"


@pytest.mark.parametrize(
    ("state", "desired", "out"),
    [
        (State.STARTED, State.STARTED, False),
        (State.STARTED, State.DESTROYED, True),  # soft-deleted: the state it had, desiredState destroyed
        (State.DESTROYING, State.DESTROYED, True),
        ("destroyed", None, True),
        ("started", "stopped", False),
        (None, None, False),
    ],
)
def test_a_soft_deleted_sandbox_is_on_its_way_out(state: object, desired: object, out: bool) -> None:
    assert on_its_way_out(SimpleNamespace(state=state, desired_state=desired)) is out
    assert on_its_way_out(SimpleNamespace()) is False


@pytest.mark.parametrize(
    ("state", "out"), [("error", True), ("build_failed", True), ("started", False), ("stopped", False), (None, False)]
)
def test_an_errored_sandbox_is_one_that_will_not_start(state: object, out: bool) -> None:
    assert errored(SimpleNamespace(state=state)) is out
    assert errored(SimpleNamespace(state=SimpleNamespace(value=state))) is out
