"""verl 0.9.1's own Sandbox Fusion client, unmodified, against the emulator: answers, 504 retries, no 429 retry."""

from __future__ import annotations

import itertools

import pytest

from emulator.journal import Journal
from emulator.server import EmulatorServer

verl_sf = pytest.importorskip("verl.utils.reward_score.sandbox_fusion.utils", reason="needs the [verl] extra")

RUN_CODE = "sandbox_fusion.run_code"


def test_call_sandbox_api_success(sandbox_fusion_url: str) -> None:
    result, error = verl_sf.call_sandbox_api(sandbox_fusion_url, "print(1+1)", None, 10, 10, 1024, "python")
    assert error is None
    assert result is not None
    assert result["status"] == "Success"
    assert result["run_result"]["stdout"] == "2\n"


def test_process_single_case_with_stdin_and_expected_output(sandbox_fusion_url: str) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b)"
    status, meta = verl_sf._process_single_case(0, "3 4\n", "7", sandbox_fusion_url, code, 10, 1024, "python")
    assert status is True
    assert meta["status"] == "success"
    assert meta["stdout"] == "7\n"


def test_process_single_case_outcomes(sandbox_fusion_url: str) -> None:
    cases = {
        "raise ValueError('boom')": (-2, "runtime_error"),
        "while True: pass": (-3, "timeout"),
    }
    for code, (want_status, want_label) in cases.items():
        status, meta = verl_sf._process_single_case(0, None, None, sandbox_fusion_url, code, 1, 1024, "python")
        assert (status, meta["status"]) == (want_status, want_label), code
    status, meta = verl_sf._process_single_case(0, None, None, sandbox_fusion_url, "a=b", 10, 1024, "cpp")
    assert (status, meta["status"]) == (-4, "compile_error")


@pytest.mark.faults({"rules": [{"id": "gw", "route": RUN_CODE, "attempts": "1-2", "fault": {"status": 504}}]})
def test_verl_retries_504_with_linear_backoff(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    result, error = verl_sf.call_sandbox_api(sandbox_fusion_url, "print('ok')", None, 10, 10, 1024, "python")
    assert error is None and result is not None
    assert result["run_result"]["stdout"] == "ok\n"
    entries = emulator_journal.entries(RUN_CODE)
    assert [(e.attempt, e.status) for e in entries] == [(1, 504), (2, 504), (3, 200)]
    gaps = [later.started - earlier.finished for earlier, later in itertools.pairwise(entries) if earlier.finished]
    # verl sleeps INITIAL_RETRY_DELAY * (attempt + 1): 1 s, then 2 s.
    assert 0.95 <= gaps[0] < 1.9
    assert 1.95 <= gaps[1] < 2.9


@pytest.mark.faults({"rules": [{"id": "gw", "route": RUN_CODE, "fault": {"status": 504}}]})
def test_verl_gives_up_after_three_504s(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    result, error = verl_sf.call_sandbox_api(sandbox_fusion_url, "print('ok')", None, 10, 10, 1024, "python")
    assert result is None
    assert error is not None and "504" in error
    assert len(emulator_journal.entries(RUN_CODE)) == 3


@pytest.mark.faults({"rules": [{"id": "throttle", "route": RUN_CODE, "fault": {"status": 429, "retry_after": 1}}]})
def test_verl_does_not_retry_429(sandbox_emulator: EmulatorServer, emulator_journal: Journal) -> None:
    status, meta = verl_sf._process_single_case(
        0, None, None, sandbox_emulator.run_code_url, "print(1)", 10, 1024, "python"
    )
    assert status == -1
    assert meta["status"] == "api_error"
    assert "429" in (meta["api_request_error"] or "")
    entries = emulator_journal.entries(RUN_CODE)
    assert [(e.status, e.fault) for e in entries] == [(429, "status")]
