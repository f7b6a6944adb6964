"""The output of ``/process/execute`` and ``/process/code-run`` as the daemon returns it (its v0.190 source:
``process/execute.go``, ``process/coderun/``): the whole of it, collected in a buffer with no bound while the command
runs, so a big writer is never blocked (Sandbox Fusion's capture, which truncates and blocks, is not the daemon's).
The emulator keeps the first 64 MiB of each stream and drops the rest, still reading it.

Why it matters to a trainer: a tool whose command prints a megabyte gets it all, at once, from the real service; an
emulator that cut it at 219,264 characters, or held it until the timeout, would teach the wrong thing.
"""

from __future__ import annotations

import time

import httpx
from daytona import Daytona, DaytonaConfig

from emulator.daytona.config import OUTPUT_LIMIT


def test_the_sdk_gets_a_megabyte_whole_and_at_once(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        for size in (219_265, 600_000, 1_000_000):
            start = time.monotonic()
            ran = sandbox.process.exec(f"head -c {size} /dev/zero | tr '\\0' a", timeout=30)
            assert (ran.exit_code, ran.result) == (0, "a" * size)
            assert time.monotonic() - start < 15  # not held until the timeout
        ran = sandbox.process.code_run("import sys\nprint('a' * 1_000_000)\nprint('b' * 1_000_000, file=sys.stderr)")
        assert (ran.exit_code, ran.result) == (0, "a" * 1_000_000 + "\n" + "b" * 1_000_000 + "\n")
    finally:
        sandbox.delete()


def test_output_past_the_bound_is_read_and_dropped(tb: tuple[httpx.Client, str]) -> None:
    """The command is not blocked past the bound: it runs on to its end (the ``tail`` it prints after is dropped)."""
    client, prefix = tb
    command = f"head -c {OUTPUT_LIMIT + 2_000_000} /dev/zero | tr '\\0' a; echo; echo tail"
    answer = client.post(prefix + "/process/execute", json={"command": command, "timeout": 60}, timeout=120)
    assert answer.status_code == 200
    assert answer.json()["exitCode"] == 0
    assert answer.json()["result"] == "a" * OUTPUT_LIMIT
    assert OUTPUT_LIMIT == 64 * 1024 * 1024


def test_an_endless_writer_times_out_as_any_command(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": "yes", "timeout": 2})
    assert answer.status_code == 408 and answer.json()["code"] == "REQUEST_TIMEOUT"
    body = {"code": "while True: print('x' * 1000)", "language": "python", "timeout": 2}
    answer = client.post(prefix + "/process/code-run", json=body)
    assert answer.status_code == 408 and answer.json()["code"] == "REQUEST_TIMEOUT"
