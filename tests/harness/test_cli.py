"""``sandbox-emulator serve`` as its own process, and its answers to bad options."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

CLI = [sys.executable, "-m", "harness.cli"]


def _serve(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "serve", "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _base(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    first = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/run_code", first)
    assert match, first
    return match.group(1)


def test_serve_prints_where_it_listens_and_serves() -> None:
    proc = _serve("--faults", "calm")
    try:
        base = _base(proc)
        answer = requests.post(base + "/run_code", json={"code": "print('served')", "language": "python"}, timeout=60)
        assert answer.json()["run_result"]["stdout"] == "served\n"
        assert requests.get(base + "/_emulator/health", timeout=10).json()["status"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_temp_root_holds_the_work_dirs(tmp_path: Path) -> None:
    proc = _serve("--temp-root", str(tmp_path))
    try:
        base = _base(proc)
        code = "import os\nprint(os.getcwd())\nprint(os.path.dirname(os.path.abspath(__file__)))"
        answer = requests.post(base + "/run_code", json={"code": code, "language": "python"}, timeout=60).json()
        cwd, script_dir = answer["run_result"]["stdout"].split()
        assert os.path.dirname(cwd) == os.path.realpath(tmp_path) and script_dir == cwd
        assert not os.path.exists(cwd)  # removed once the run ended
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env)


def test_unknown_profile_is_a_clear_error() -> None:
    result = _run("serve", "--port", "0", "--faults", "no-such-profile")
    assert result.returncode == 2
    assert "unknown fault profile 'no-such-profile'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_plan_file_names_the_bad_key(tmp_path: object) -> None:
    from pathlib import Path

    plan = Path(str(tmp_path)) / "plan.yaml"
    plan.write_text("rules:\n  - id: x\n    fault: {status: sometimes}\n")
    result = _run("serve", "--port", "0", "--faults", str(plan))
    assert result.returncode == 2
    assert "rules[0].fault.status" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_python_port_and_temp_root() -> None:
    result = _run("serve", "--python", "/no/such/python")
    assert result.returncode == 2 and "not an executable" in result.stderr
    result = _run("serve", "--python", "no-such-python3")  # a bare name is looked up on $PATH
    assert result.returncode == 2 and "--python 'no-such-python3' is not found on $PATH" in result.stderr
    result = _run("serve", "--python", "/bin/true")  # executable, but no Python: every request would fail
    assert result.returncode == 2 and "'/bin/true' is not a working Python interpreter" in result.stderr
    result = _run("serve", "--temp-root", "/no/such/dir")
    assert result.returncode == 2 and "not a writable directory" in result.stderr
    result = _run("serve", "--port", "70000")
    assert result.returncode == 2 and "between 0 and 65535" in result.stderr
    for count in ("0", "two", "65", "100000"):  # thousands would start processes until the machine gave out
        for command in ("serve", "bench-throughput"):
            result = _run(command, "--warm-interpreters", count)
            assert result.returncode == 2 and "--warm-interpreters: must be a whole number" in result.stderr


def test_serve_forks_from_as_many_warm_interpreters_as_asked() -> None:
    proc = _serve("--warm-interpreters", "2")
    try:
        base = _base(proc)
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(3)]
        assert banner[2].startswith("Python runtime") and banner[2].endswith("(fast path, 2 warm interpreters)\n")
        code = "import os, time\nprint(os.getppid())\ntime.sleep(0.5)"
        request = {"code": code, "language": "python"}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: requests.post(base + "/run_code", json=request, timeout=60), range(4)))
        parents = {answer.json()["run_result"]["stdout"].strip() for answer in answers}
        assert len(parents) == 2  # four at once, two on each
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_refuses_what_it_would_ignore_or_hang_on(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for extra, message in [
        (("--faults", ""), "an empty name names no profile and no plan file"),
        (("--faults", str(fifo)), "is not a regular file"),
        (("--daytona-api-key", ""), "--daytona-api-key must not be empty"),
        (("--host", ""), "--host must not be empty (0.0.0.0 binds every interface)"),
    ]:
        result = _run("serve", "--port", "0", *extra)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_serve_probes_the_python_named_by_the_environment() -> None:
    for python, message in [
        ("/no/such/python", "$SANDBOX_EMULATOR_PYTHON '/no/such/python' is not an executable file"),
        ("/bin/true", "$SANDBOX_EMULATOR_PYTHON '/bin/true' is not a working Python interpreter"),
    ]:
        result = _run("serve", "--port", "0", env={**os.environ, "SANDBOX_EMULATOR_PYTHON": python})
        assert result.returncode == 2 and result.stderr == f"sandbox-emulator: {message}\n"


def test_check_reference_and_grpo_probe_the_python_named_by_the_environment() -> None:
    """Both run the emulator in process: a bad runtime is one line and status 2, not a traceback or a failed check."""
    for command, prefix in [
        (("check-reference", "--service", "sandbox-fusion", "--cases", "01_*"), "sandbox-emulator check-reference: "),
        (("grpo", "--steps", "1"), "error: "),
    ]:
        for python, message in [
            ("/no/such/python", "$SANDBOX_EMULATOR_PYTHON '/no/such/python' is not an executable file"),
            ("/bin/true", "$SANDBOX_EMULATOR_PYTHON '/bin/true' is not a working Python interpreter"),
        ]:
            result = _run(*command, env={**os.environ, "SANDBOX_EMULATOR_PYTHON": python})
            assert (result.returncode, result.stderr) == (2, f"{prefix}{message}\n"), result.stderr


def test_bench_rejects_bad_levels() -> None:
    result = _run("bench-throughput", "--concurrency", "x")
    assert result.returncode == 2 and "--concurrency" in result.stderr


def test_bench_throughput_runs_end_to_end_with_either_client(tmp_path: Path) -> None:
    """A tiny run of each load generator: every answer checked, figures in the table and the JSON."""
    import json

    for client in ("lean", "aiohttp"):
        out = tmp_path / f"{client}.json"
        repeated = ["--modes", "fast,fast", "--concurrency", "3,3", "3"]  # said thrice (both spellings), measured once
        result = _run(
            "bench-throughput", *repeated, "--requests", "9", "--client", client, "--json", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert re.search(r"^fast\s+3\s+9\s+0\s+\d+\.\d$", result.stdout, re.MULTILINE), result.stdout
        figures = json.loads(out.read_text())
        (level,) = figures["levels"]
        assert (level["ok"], level["errors"]) == (9, 0)
        assert figures["machine_speed"]["python_loop_ns"] > 0 and "machine speed:" in result.stderr
    assert _run("bench-throughput", "--client", "httpx").returncode == 2
    negative = _run("bench-throughput", "--requests", "-5")
    assert negative.returncode == 2 and "--requests" in negative.stderr and "Traceback" not in negative.stderr


def test_serve_stops_on_sigterm_with_a_request_held_by_a_latency(tmp_path: Path) -> None:
    """A request held by an injected hour of latency no longer holds SIGTERM off for that hour: the server waits a
    few seconds for the requests in flight, then cancels them and exits."""
    plan = tmp_path / "slow.yaml"
    plan.write_text("rules:\n  - route: sandbox_fusion.run_code\n    latency: 3600\n")
    proc = _serve("--faults", str(plan))
    try:
        base = _base(proc)
        held = subprocess.Popen(
            [sys.executable, "-c", f"import requests; requests.post({base + '/run_code'!r}, json={{'code': '1'}})"],
            stderr=subprocess.DEVNULL,
        )
        while requests.get(base + "/_emulator/stats", timeout=10).json()["in_flight"] < 1:
            time.sleep(0.05)  # another process: poll until the held request has arrived
        proc.terminate()
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has stopped
        assert held.wait(timeout=60) != 0  # its connection was closed without an answer
    finally:
        proc.kill()
        proc.wait()


def test_serve_refuses_a_bad_daytona_latency_or_failed_auth() -> None:
    for extra, message in [
        (("--daytona-latency", "create=-1"), "--daytona-latency: create must be a number of seconds from 0 to 86400"),
        (("--daytona-latency", "create=soon"), "--daytona-latency: create must be a number of seconds from 0"),
        (("--daytona-latency", "create=100000000"), "from 0 to 86400, got '100000000'"),
        (("--daytona-latency", "create=1,create=2"), "--daytona-latency: create is given twice"),
        (("--daytona-latency", "build=2"), "--daytona-latency: 'build=2' is not one of create=SECONDS"),
        (("--daytona-latency", "create=inf"), "--daytona-latency: create must be a number of seconds from 0"),
        (("--daytona-failed-auth", "5"), "--daytona-failed-auth: '5' is not LIMIT/TTL"),
        (("--daytona-failed-auth", "0/60"), "--daytona-failed-auth: '0/60' is not LIMIT/TTL"),
        (("--daytona-failed-auth", "5/nan"), "is not LIMIT/TTL"),
        (("--daytona-latency", ""), "--daytona-latency: '' is not one of create=SECONDS"),
        (("--daytona-failed-auth", ""), "--daytona-failed-auth: '' is not LIMIT/TTL"),
        (("--daytona-listing-seed", "1.5"), "--daytona-listing-seed: '1.5' is not a whole number or none"),
        (("--daytona-listing-seed", ""), "--daytona-listing-seed: '' is not a whole number or none"),
    ]:
        result = _run("serve", "--port", "0", *extra)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def _daytona(proc: subprocess.Popen[str]) -> tuple[str, dict[str, str]]:
    """A served emulator's base URL and the Daytona key it printed, as a bearer header."""
    base = _base(proc)
    assert proc.stdout is not None
    key = re.search(r"DAYTONA_API_KEY=(\S+)", proc.stdout.readline())
    assert key
    return base, {"Authorization": f"Bearer {key.group(1)}"}


def test_daytona_options_reach_the_emulated_api() -> None:
    """The options as the served API applies them: a creation that stays ``creating``, a deleted sandbox still found,
    the failed-auth throttler's 429 on the second refused key."""
    proc = _serve("--daytona-latency", "create=30,destroy=30", "--daytona-failed-auth", "2/60")
    try:
        base, headers = _daytona(proc)
        made = requests.post(base + "/api/sandbox", json={}, headers=headers, timeout=30).json()
        assert made["state"] == "creating"
        refused = requests.delete(f"{base}/api/sandbox/{made['id']}", headers=headers, timeout=30)
        assert refused.status_code == 409  # between states
        wrong = {"Authorization": "Bearer wrong"}
        assert requests.get(base + "/api/sandbox", headers=wrong, timeout=30).status_code == 401
        assert requests.get(base + "/api/sandbox", headers=wrong, timeout=30).status_code == 429
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_daytona_listing_seed_none_lists_sessions_in_creation_order() -> None:
    proc = _serve("--daytona-listing-seed", "none")
    try:
        base, headers = _daytona(proc)
        made = requests.post(base + "/api/sandbox", json={}, headers=headers, timeout=30).json()
        names = [f"s{n}" for n in range(6)]
        for name in names:
            created = requests.post(
                f"{base}/toolbox/{made['id']}/process/session", json={"sessionId": name}, headers=headers, timeout=30
            )
            assert created.status_code == 201, created.text
        for _ in range(3):
            listed = requests.get(f"{base}/toolbox/{made['id']}/process/session", headers=headers, timeout=30)
            assert [s["sessionId"] for s in listed.json()] == names
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_jupyter_engine_python_runs_cells_as_plain_python() -> None:
    proc = _serve("--jupyter-engine", "python")
    try:
        base = _base(proc)
        answer = requests.post(base + "/run_jupyter", json={"cells": ["list(range(40))"]}, timeout=60).json()
        assert answer["cells"][0]["display"] == [{"text/plain": repr(list(range(40)))}]  # no pretty-printer
        assert answer["driver"]["stderr"] == ""  # no kernel to warn
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_says_how_jupyter_cells_run_and_notes_a_runtime_without_ipython(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    for extra, line, note in [
        ((), "Jupyter cells   in IPython's shell, as the real kernel (--jupyter-engine auto)", False),
        (("--python", bare), "as plain Python (no IPython in the runtime) (--jupyter-engine auto)", False),
        (("--jupyter-engine", "ipython", "--python", bare), "Jupyter cells   as plain Python (no IPython", True),
    ]:
        proc = _serve(*extra)
        assert proc.stdout is not None
        try:
            _base(proc)
            banner = [proc.stdout.readline() for _ in range(4)]  # the lines after the first, the Jupyter one last
        finally:
            proc.terminate()
            _, stderr = proc.communicate(timeout=30)
        assert any(line in shown for shown in banner), banner
        assert ("the runtime Python has no IPython, so /run_jupyter will fail" in stderr) == note, stderr
