"""The benchmarks' emulator process: it serves, it stops with its programs, and one that cannot start says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests

from harness.bench.emulator_process import DAYTONA_KEY, EmulatorProcess, EmulatorStartError

AUTH = {"Authorization": f"Bearer {DAYTONA_KEY}"}


def test_it_serves_both_services_and_stops_with_its_process_group() -> None:
    with EmulatorProcess() as emulator:
        assert emulator.pid is not None
        pid = emulator.pid
        answer = requests.post(emulator.base_url + "/run_code", json={"code": "print(2 + 2)", "language": "python"})
        assert answer.json()["run_result"]["stdout"] == "4\n"
        listed = requests.get(emulator.base_url + "/api/sandbox", headers={"Authorization": f"Bearer {DAYTONA_KEY}"})
        assert listed.status_code == 200
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the server and its warm interpreter are gone


def test_a_process_that_cannot_serve_is_an_error_with_its_reason() -> None:
    emulator = EmulatorProcess(serve_args=["--python", "/no/such/python"])
    with pytest.raises(EmulatorStartError, match=r"exited with status 2 before serving: .*not an executable"):
        emulator.start()
    assert emulator.pid is None  # stopped and forgotten


def test_bench_throughput_says_why_its_emulator_did_not_start() -> None:
    command = [sys.executable, "-m", "harness.cli", "bench-throughput", "--python", "/no/such/python"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "fast: the emulator process exited with status 2 before serving" in result.stderr


@pytest.mark.parametrize(("tier", "create_limit"), [("none", None), ("1", "300"), ("4", "600")])
def test_its_daytona_has_the_rate_limits_of_the_tier_it_is_given(tier: str, create_limit: str | None) -> None:
    """None by default (a pool above Tier 1's 300 creations a minute is created), or a tier's, with its headers."""
    process = EmulatorProcess(daytona_tier=tier) if tier != "none" else EmulatorProcess()
    with process as emulator:
        answers = [requests.post(emulator.base_url + "/api/sandbox", json={}, headers=AUTH) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].headers.get("X-RateLimit-Limit-sandbox-create") == create_limit
