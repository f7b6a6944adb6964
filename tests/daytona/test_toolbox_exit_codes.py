"""Exit codes after a signal, as the daemon reports them (its v0.190 source: ``process/execute.go``,
``process/coderun/handler.go``). ``/process/execute`` reports its shell's Go ``ExitCode()``: -1 for a shell killed by
a signal. ``/process/code-run`` runs ``printf '%s' '<b64>' | base64 -d | python3 -u - <argv>`` through the shell,
which outlives a python killed by signal N and exits 128 + N. A timeout stays 408 for both (checked with the
endless writers of test_toolbox_output.py).

Why it matters to a trainer: a reward that reads ``exitCode`` (137 for an OOM-killed or self-killed python) gets the
number the real service gives, not the executor's -9.
"""

from __future__ import annotations

import httpx
import pytest
from daytona import Daytona, DaytonaConfig


def test_the_sdk_reads_the_daemons_exit_codes_after_a_signal(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        killed = sandbox.process.exec("echo before; kill -9 $$")
        assert (killed.exit_code, killed.result) == (-1, "before\n")
        code = "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)"
        ran = sandbox.process.code_run(code)
        assert (ran.exit_code, ran.result) == (137, "x\n")
    finally:
        sandbox.delete()


@pytest.mark.parametrize(
    ("command", "code", "result"),
    [
        ("echo before; kill -9 $$", -1, "before\n"),
        ("echo before; kill -TERM $$", -1, "before\n"),
        ("kill -INT $$", -1, ""),
        ("{ bash -c 'kill -9 $$'; } 2>/dev/null", 137, ""),  # a child killed: the shell lives on and reports 128 + 9
        ("exit 3", 3, ""),
    ],
)
def test_execute_reports_a_shell_killed_by_a_signal_as_minus_one(
    tb: tuple[httpx.Client, str], command: str, code: int, result: str
) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": command})
    assert answer.status_code == 200 and answer.json() == {"exitCode": code, "result": result}


@pytest.mark.parametrize("argv", [[], ["a"]])  # the fast path, and a real ``python -``
@pytest.mark.parametrize(
    ("code", "exit_code"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 137),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", 143),
        ("import os\nos.abort()", 134),
        ("raise SystemExit(5)", 5),
    ],
)
def test_code_run_reports_a_python_killed_by_signal_n_as_its_shell_does(
    tb: tuple[httpx.Client, str], argv: list[str], code: str, exit_code: int
) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/code-run", json={"code": code, "language": "python", "argv": argv})
    assert answer.status_code == 200 and answer.json()["exitCode"] == exit_code


def test_an_uncaught_keyboard_interrupt_is_130(tb: tuple[httpx.Client, str]) -> None:
    """Python ends by SIGINT after its traceback; the daemon's shell reports 128 + 2."""
    client, prefix = tb
    answer = client.post(prefix + "/process/code-run", json={"code": "raise KeyboardInterrupt", "language": "python"})
    assert answer.json()["exitCode"] == 130
    assert answer.json()["result"].endswith("KeyboardInterrupt\n")
