"""The emulator's own time of a level's calls, read from its journal over HTTP from a mark on."""

from __future__ import annotations

import pytest
import requests

from emulator.server import EmulatorServer
from harness.bench.emulator_time import ROUTES, EmulatorJournal

PRINT = {"code": "print(1)", "language": "python"}


@pytest.mark.faults({"rules": [{"id": "slow", "route": ROUTES["sandbox-fusion"], "latency": {"fixed": 0.05}}]})
def test_spans_are_the_calls_since_the_mark_from_arrival_to_answer(sandbox_emulator: EmulatorServer) -> None:
    journal = EmulatorJournal(sandbox_emulator.url, ROUTES["sandbox-fusion"])
    for _ in range(2):  # before the mark: not counted
        assert requests.post(sandbox_emulator.run_code_url, json=PRINT, timeout=10).status_code == 200
    journal.mark()
    assert journal.spans() == ()
    for _ in range(3):
        assert requests.post(sandbox_emulator.run_code_url, json=PRINT, timeout=10).status_code == 200
    requests.get(sandbox_emulator.url + "/_emulator/health", timeout=10)  # another route: not counted
    spans = journal.spans()
    assert len(spans) == 3 and all(0.05 <= span < 5 for span in spans)
    assert journal.spans() == ()  # the mark moved on


def test_an_unreachable_journal_is_an_error_not_a_silent_zero() -> None:
    journal = EmulatorJournal("http://127.0.0.1:9", ROUTES["daytona"], timeout_s=5)
    with pytest.raises(OSError):
        journal.mark()
