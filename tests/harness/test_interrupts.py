"""Ctrl-C or SIGTERM during a benchmark: one line, status 130, and the emulator process it started is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "harness.cli"]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as children:
            found += [int(x) for x in children.read().split()]
    return found


@pytest.mark.parametrize(
    ("argv", "started", "how"),
    [
        (["bench-throughput", "--concurrency", "1", "--requests", "1000000", "--modes", "fast"], "concurrency", "TERM"),
        (["bench-throughput", "--concurrency", "1", "--requests", "1000000", "--modes", "fast"], "concurrency", "INT"),
        (["bench-daytona", "--sandboxes", "2", "--rounds", "1000000"], "measured round", "TERM"),
    ],
)
def test_a_stopped_benchmark_stops_its_emulator(argv: list[str], started: str, how: str) -> None:
    bench = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert bench.stderr is not None
    said: list[str] = []
    for line in bench.stderr:  # the emulator process runs once this line is out
        said.append(line)
        if started in line:
            break
    else:
        pytest.fail("".join(said))
    servers = _children(bench.pid)
    assert servers, "the benchmark's emulator process"
    bench.send_signal(getattr(signal, "SIG" + how))
    _, rest = bench.communicate(timeout=120)
    assert bench.returncode == 130, rest
    assert "interrupted" in rest and "Traceback" not in rest
    for server in servers:  # the server and its warm interpreter: their process group is empty
        with pytest.raises(ProcessLookupError):
            os.killpg(server, 0)
