"""``Journal.wait_for``: a test can block until the traffic reaches a point, woken by requests beginning and ending."""

from __future__ import annotations

import threading

from emulator.journal import Journal


def test_wait_for_wakes_when_a_request_begins_and_when_it_ends() -> None:
    journal = Journal()
    began, ended = threading.Event(), threading.Event()
    results: list[bool] = []

    def waiter() -> None:
        results.append(journal.wait_for(lambda j: j.in_flight("r") == 1, timeout=10))
        began.set()
        results.append(journal.wait_for(lambda j: j.in_flight("r") == 0 and len(j.entries("r")) == 1, timeout=10))
        ended.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    entry = journal.begin("r", "POST", "/x")
    assert began.wait(10) and not ended.is_set()
    journal.end(entry, 200, "ok")
    assert ended.wait(10)
    thread.join(10)
    assert results == [True, True]


def test_wait_for_returns_at_once_when_already_true_and_false_after_its_timeout() -> None:
    journal = Journal()
    assert journal.wait_for(lambda j: j.in_flight() == 0, timeout=0) is True
    assert journal.wait_for(lambda j: j.in_flight() == 1, timeout=0.05) is False
