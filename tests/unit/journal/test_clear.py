"""``Journal.clear``: what follows it counts only requests begun after it, even while earlier ones are in flight."""

from __future__ import annotations

from emulator.journal import Journal


def test_requests_in_flight_across_a_clear_belong_to_the_journal_before_it() -> None:
    """A previous test's requests, abandoned by their client during a hang, end after the next test's clear: they
    must not count in its in-flight numbers, before or after they end, and stats must agree with themselves."""
    journal = Journal()
    abandoned = [journal.begin("sandbox_fusion.run_code", "POST", "/run_code", f"k{n}") for n in range(3)]
    journal.clear()
    assert journal.in_flight() == 0
    mine = journal.begin("sandbox_fusion.run_code", "POST", "/run_code", "mine")
    assert mine.in_flight == 1
    assert journal.in_flight("sandbox_fusion.run_code") == 1
    journal.end(abandoned[0], 504, "fault")  # ends now: neither counted down from this journal's count
    assert journal.in_flight() == 1
    journal.end(mine, 200, "ok")
    for entry in abandoned[1:]:
        journal.end(entry, None, "cancelled")
    assert journal.in_flight() == 0
    assert journal.max_in_flight("sandbox_fusion.run_code") == 1
    stats = journal.stats()
    assert stats["requests"] == 1 and stats["in_flight"] == 0 and stats["max_in_flight"] == 1
    assert stats["by_route"]["sandbox_fusion.run_code"]["max_in_flight"] == 1
    assert [e.key for e in journal.entries()] == ["mine"]


def test_a_request_still_in_flight_at_a_clear_is_not_counted_by_the_next_one() -> None:
    journal = Journal()
    journal.begin("a", "GET", "/a")
    journal.clear()
    second = journal.begin("a", "GET", "/a")
    journal.end(second, 200, "ok")
    assert journal.in_flight("a") == 0
    assert journal.max_in_flight("a") == 1
    assert journal.stats()["by_route"]["a"]["max_in_flight"] == journal.stats()["max_in_flight"] == 1
