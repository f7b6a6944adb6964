"""Isolation and containment: our additions to the real server, on both paths."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig

from .conftest import Runner, wait_until_reaped

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid drop and capabilities need root")


def _session_members(sid: int) -> list[int]:
    """Pids of live (non-zombie) processes in session ``sid``."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(name))
    return members


def _wait_gone(pids: list[int], within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and not _is_zombie(pid)]
        if not alive:
            return True
        time.sleep(0.02)
    return False


def _children_of(zygote_pid: int | None) -> set[int]:
    """The zygote's live children (zombies left out)."""
    return {
        int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == zygote_pid and not _is_zombie(int(p))
    }


async def _until_child_of(zygote_pid: int | None, within: float = 10.0, besides: frozenset[int] = frozenset()) -> None:
    """Wait (polling /proc, no fixed delay) until the zygote has a live child not in ``besides``: the program has
    started (an earlier run's child may still be exiting after its result came: it reports its end first)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _children_of(zygote_pid) - besides:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no program started under zygote {zygote_pid} within {within} s")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> None:
    monkeypatch.setenv("SANDBOX_EMULATOR_TEST_SECRET", "hunter2")
    code = "import os\nprint(sorted(os.environ.items()))\nprint(os.environ['HOME'] == os.getcwd())"
    for mode in ("fast", "faithful"):
        executor = Executor(ExecutorConfig(python_mode=mode, warm_interpreters=1))
        runner = Runner(loop, executor, mode)
        try:
            got = runner.run(code, extra_env={"EXTRA": "1"})
            assert got.return_code == 0, got.stderr
            assert "hunter2" not in (got.stdout or "")
            lines = (got.stdout or "").splitlines()
            keys = [item.split("'")[1] for item in lines[0].strip("[]").split("), (")]
            assert keys == ["EXTRA", "HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"]
            assert lines[1] == "True"
            pid = executor.zygote_pid
            assert pid is not None
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert b"hunter2" not in f.read()
        finally:
            runner.call(executor.aclose())


@needs_root
def test_runs_unprivileged_with_only_dac_read_search(runner: Runner) -> None:
    code = (
        "import os, subprocess\n"
        "print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())\n"
        "def caps(text):\n"
        "    return [l for l in text.splitlines() if l.startswith(('Cap', 'NoNewPrivs'))]\n"
        "print(caps(open('/proc/self/status').read()))\n"
        "print(caps(subprocess.run(['cat', '/proc/self/status'], capture_output=True, text=True).stdout))\n"
        "open('mine.txt', 'w').write('ok')\n"
        "try:\n    open('/etc/passwd', 'a')\nexcept PermissionError as e:\n    print('no write:', e.errno)\n"
    )
    got = runner.run(code)
    assert got.return_code == 0, got.stderr
    lines = (got.stdout or "").splitlines()
    uid, euid, gid, groups = lines[0].split(" ", 3)
    assert uid == euid and int(uid) in (runner.executor.sandbox_uids or ())
    assert (gid, groups) == ("65534", "[]")
    expected = [
        "CapInh:\t0000000000000004",
        "CapPrm:\t0000000000000004",
        "CapEff:\t0000000000000004",
        "CapBnd:\t0000000000000004",
        "CapAmb:\t0000000000000004",
        "NoNewPrivs:\t1",
    ]
    assert lines[1] == lines[2] == repr(expected)
    assert lines[3] == "no write: 13"


def test_program_dies_with_the_warm_interpreter(runner: Runner) -> None:
    """Every program has SIGKILL as its parent-death signal, on both paths (read back with PR_GET_PDEATHSIG)."""
    code = (
        "import ctypes\n"
        "sig = ctypes.c_int(-1)\n"
        "print(ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0), sig.value)"
    )
    got = runner.run(code)
    assert (got.return_code, got.stdout) == (0, f"0 {int(signal.SIGKILL)}\n"), got.stderr


def test_a_program_is_dumpable_as_an_execed_one_is(runner: Runner) -> None:
    """PR_GET_DUMPABLE reads 1 on both paths (a uid change clears it; an exec, as on the real server, sets it), so
    the program's own /proc files are its uid's and a debugger of that uid may attach."""
    code = (
        "import ctypes, os\n"
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), os.stat('/proc/self/environ').st_uid == os.getuid())"
    )
    got = runner.run(code)
    assert (got.return_code, got.stdout) == (0, "1 True\n"), got.stderr


def test_rlimits(runner: Runner) -> None:
    code = (
        "import resource as r\n"
        "for name in ('RLIMIT_AS', 'RLIMIT_DATA', 'RLIMIT_STACK', 'RLIMIT_FSIZE', 'RLIMIT_NPROC', 'RLIMIT_CORE'):\n"
        "    print(name, r.getrlimit(getattr(r, name)))\n"
    )
    mib = 1024 * 1024
    plain = runner.run(code).stdout or ""
    assert f"RLIMIT_AS ({4096 * mib}, {4096 * mib})" in plain
    assert f"RLIMIT_FSIZE ({64 * mib}, {64 * mib})" in plain
    assert "RLIMIT_CORE (0, 0)" in plain
    assert "RLIMIT_STACK (8388608," in plain  # untouched without a memory limit, as on the real server
    if ROOT:
        assert "RLIMIT_NPROC (512, 512)" in plain
    limited = runner.run(code, memory_limit_mb=256).stdout or ""
    for name in ("RLIMIT_DATA", "RLIMIT_STACK"):  # the soft limit alone, as the real server's preexec
        assert f"{name} ({256 * mib}, {resource.getrlimit(getattr(resource, name))[1]})" in limited
    assert f"RLIMIT_AS ({256 * mib}, {4096 * mib})" in limited  # the hard one at the safety cap


def test_file_size_limit(runner: Runner) -> None:
    got = runner.run("open('big', 'wb').write(b'x' * (65 * 1024 * 1024))")
    assert got.return_code == 1
    assert (got.stderr or "").rstrip().endswith("OSError: [Errno 27] File too large")


def test_fork_bomb_is_contained(runner: Runner) -> None:
    code = "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    os.fork()\n"
    got = runner.run(code, timeout=1.5)
    assert got.status in ("TimeLimitExceeded", "Finished")
    sid = int((got.stdout or "0").split()[0])
    assert sid > 0
    assert _wait_gone(_session_members(sid)), "fork bomb processes survived"
    assert runner.run("print('alive')").stdout == "alive\n"


def test_memory_bomb_is_contained(runner: Runner) -> None:
    """Stopped by the safety RLIMIT_AS (MemoryError) or, if the VM zeroes pages slowly, by the timeout."""
    got = runner.run("x = []\nwhile True:\n    x.append(bytearray(10**8))\n", timeout=1.5)
    if got.status == "Finished":
        assert got.return_code == 1
        assert (got.stderr or "").endswith("MemoryError\n")
    else:
        assert (got.status, got.return_code) == ("TimeLimitExceeded", None)
    assert runner.run("print('alive')").stdout == "alive\n"


def test_address_space_cap_gives_memory_error(loop: asyncio.AbstractEventLoop) -> None:
    executor = Executor(ExecutorConfig(max_address_space_mb=300, warm_interpreters=1))
    runner = Runner(loop, executor, "fast")
    try:
        got = runner.run("x = []\nwhile True:\n    x.append(bytearray(10**8))\n", timeout=5)
    finally:
        runner.call(executor.aclose())
    assert (got.status, got.return_code) == ("Finished", 1)
    assert (got.stderr or "").endswith("MemoryError\n")


@needs_root
def test_cannot_kill_the_parent(runner: Runner) -> None:
    zygote = runner.executor.zygote_pid
    got = runner.run("import os\nos.kill(os.getppid(), 9)")
    assert got.return_code == 1
    assert (got.stderr or "").endswith("PermissionError: [Errno 1] Operation not permitted\n")
    assert runner.executor.zygote_pid == zygote
    assert runner.run("print('still here')").stdout == "still here\n"


def test_background_grandchild_does_not_hold_the_run(runner: Runner) -> None:
    code = 'import subprocess\np = subprocess.Popen(["sleep", "100"])\nprint(p.pid)\nprint("x")'
    started = time.monotonic()
    got = runner.run(code, timeout=5)
    assert time.monotonic() - started < 1.0
    assert (got.status, got.return_code) == ("Finished", 0)
    pid_line, x_line = (got.stdout or "").splitlines()
    assert x_line == "x"
    assert _wait_gone([int(pid_line)])


def test_escaped_grandchild_is_killed_by_uid(runner: Runner) -> None:
    """A setsid'd daemon escapes the group kill, but not the sweep of its execution's uid."""
    code = 'import subprocess\np = subprocess.Popen(["sleep", "30"], start_new_session=True)\nprint(p.pid)'
    started = time.monotonic()
    got = runner.run(code, timeout=5)
    pids = [int(line) for line in (got.stdout or "").split()]
    try:
        assert (got.status, got.return_code) == ("Finished", 0)
        if ROOT:
            assert time.monotonic() - started < 1.0
            assert _wait_gone(pids)
        else:  # no uid of its own: bounded by the EOF grace only
            assert time.monotonic() - started < 1.5
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@needs_root
def test_fork_bomb_does_not_starve_concurrent_runs(runner: Runner) -> None:
    """Each execution has its own uid, so RLIMIT_NPROC binds per execution."""

    async def scenario() -> list[ExecutionResult]:
        earlier = frozenset(_children_of(runner.executor.zygote_pid))
        bomb = asyncio.ensure_future(runner.arun("import os\nwhile True:\n    os.fork()\n", timeout=2))
        await _until_child_of(runner.executor.zygote_pid, besides=earlier)
        code = "import subprocess, threading\nt = threading.Thread(target=print)\nt.start(); t.join()\n"
        code += "print(subprocess.run(['echo', 'ok'], capture_output=True, text=True).stdout, end='')"
        neighbours = [result for result, _ in await asyncio.gather(*(runner.arun(code) for _ in range(4)))]
        await bomb
        return neighbours

    for result in runner.call(scenario()):
        assert (result.return_code, result.stdout) == (0, "\nok\n"), result.stderr


def test_many_concurrent_executions(runner: Runner) -> None:
    async def many() -> list[tuple[ExecutionResult, bytes | None]]:
        return await asyncio.gather(*(runner.arun(f"import sys\nprint({i})\nsys.exit({i % 3})") for i in range(64)))

    results = runner.call(many())
    for i, (result, _) in enumerate(results):
        assert (result.status, result.return_code, result.stdout) == ("Finished", i % 3, f"{i}\n")


def test_zygote_death_is_survived(loop: asyncio.AbstractEventLoop) -> None:
    executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1))
    runner = Runner(loop, executor, "fast")

    async def scenario() -> tuple[ExecutionResult, ExecutionResult, ExecutionResult]:
        await executor.start()
        first = await runner.arun("print(1)")
        pid = executor.zygote_pid
        assert pid is not None
        earlier = frozenset(_children_of(pid))
        in_flight = asyncio.ensure_future(runner.arun("import time\nprint('sleeping', flush=True)\ntime.sleep(30)"))
        await _until_child_of(pid, besides=earlier)
        os.kill(pid, signal.SIGKILL)
        lost, _ = await asyncio.wait_for(in_flight, 30)
        after, _ = await runner.arun("print(2)")
        assert executor.zygote_pid not in (None, pid)
        return first[0], lost, after

    try:
        first, lost, after = runner.call(scenario())
    finally:
        runner.call(executor.aclose())
    assert first.stdout == "1\n"
    assert lost.status == "Error" and lost.return_code is None
    assert (after.status, after.stdout) == ("Finished", "2\n")


async def _until_written(executor: Executor, at_least: int, whole: bool, within: float = 10.0) -> None:
    """Wait (polling, no fixed delay) until the executor has queued ``at_least`` bytes for its zygote and, with
    ``whole``, written every one of them to the zygote's socket."""
    zygote = executor._zygotes[0]
    assert zygote is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if zygote._queued >= at_least and (zygote._written == zygote._queued or not whole):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"queued {zygote._queued}, written {zygote._written} of at least {at_least}")


def test_a_request_the_zygote_had_whole_is_never_run_again(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    """At most once: a zygote that dies with a request in hand may have forked it (its ``started`` not yet read), so
    the run ends as an error instead of running again on the next zygote."""
    executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1))
    runner = Runner(loop, executor, "fast")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    marker = shared / "runs"

    async def scenario() -> ExecutionResult:
        await executor.start()
        await runner.arun("print(1)")
        pid = executor.zygote_pid
        assert pid is not None and executor._zygotes[0] is not None
        before = executor._zygotes[0]._queued
        os.kill(pid, signal.SIGSTOP)  # it reads nothing more, forks nothing more
        task = asyncio.ensure_future(runner.arun(f"open({str(marker)!r}, 'a').write('ran\\n')"))
        await _until_written(executor, before + 1, whole=True)
        os.kill(pid, signal.SIGKILL)
        lost, _ = await asyncio.wait_for(task, 30)
        after, _ = await runner.arun("print(2)")
        assert (after.status, after.stdout) == ("Finished", "2\n")
        return lost

    try:
        lost = runner.call(scenario())
    finally:
        runner.call(executor.aclose())
    assert lost.status == "Error" and "or was about to" in lost.stderr, lost
    assert not marker.exists()  # not run again on the next zygote


def test_a_request_the_zygote_never_had_whole_runs_on_the_next(loop: asyncio.AbstractEventLoop) -> None:
    """A spawn request still partly in our buffer when the zygote dies was never seen by it: it is run again."""
    executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1))
    runner = Runner(loop, executor, "fast")
    stdin = b"x" * (16 << 20)  # more than the socket's buffer takes from a writer whose reader is stopped

    async def scenario() -> ExecutionResult:
        await executor.start()
        await runner.arun("print(1)")
        pid = executor.zygote_pid
        assert pid is not None and executor._zygotes[0] is not None
        before = executor._zygotes[0]._queued
        os.kill(pid, signal.SIGSTOP)
        task = asyncio.ensure_future(runner.arun("import sys\nprint(len(sys.stdin.buffer.read()))", stdin=stdin))
        await _until_written(executor, before + len(stdin), whole=False)
        assert executor._zygotes[0]._written < executor._zygotes[0]._queued
        os.kill(pid, signal.SIGKILL)
        result, _ = await asyncio.wait_for(task, 60)
        return result

    try:
        result = runner.call(scenario())
    finally:
        runner.call(executor.aclose())
    assert (result.status, result.stdout) == ("Finished", f"{len(stdin)}\n"), result


def test_aclose_kills_running_programs(loop: asyncio.AbstractEventLoop) -> None:
    executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1))
    runner = Runner(loop, executor, "fast")

    async def scenario() -> int:
        await executor.start()
        task = asyncio.ensure_future(runner.arun("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(30)"))
        await _until_child_of(executor.zygote_pid)
        pids = [p for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == executor.zygote_pid]
        await executor.aclose()
        result, _ = await asyncio.wait_for(task, 5)
        assert result.status == "Error"
        await executor.aclose()  # idempotent
        return int(pids[0])

    child = runner.call(scenario())
    assert _wait_gone([child])


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return -1
    return int(stat[stat.rindex(")") + 2 :].split()[1])


_PREEXEC_SCRIPT = """
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, 64 << 20))  # the zygote inherits this hard limit
from emulator.executor import ExecutionRequest, Executor, ExecutorConfig

async def main() -> None:
    for mode in ("fast", "faithful"):
        async with Executor(ExecutorConfig(python_mode=mode, warm_interpreters=1)) as ex:
            for limit in (128, 64, -1):
                with ex.workdir() as wd:
                    script = wd.new_script()
                    wd.write_file(script.rsplit("/", 1)[1], b"print(1)")
                    r = await ex.run(ExecutionRequest([ex.config.python, script], wd.path, 5,
                                                      memory_limit_mb=limit, python_script=script))
                    t = r.execution_time is None
                    print(mode, limit, r.status, t, r.return_code, repr(r.stdout), repr(r.stderr))

asyncio.run(main())
"""


def test_memory_limit_above_hard_limit_is_preexec_error() -> None:
    """Like the real server (no CAP_SYS_RESOURCE): setrlimit above the hard limit fails in preexec_fn."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _PREEXEC_SCRIPT], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "fast 128 Error True None None 'Exception occurred in preexec_fn.'",
        "fast 64 Finished False 0 '1\\n' ''",
        "fast -1 Finished False 0 '1\\n' ''",
        "faithful 128 Error True None None 'Exception occurred in preexec_fn.'",
        "faithful 64 Finished False 0 '1\\n' ''",
        "faithful -1 Finished False 0 '1\\n' ''",
    ]


def test_workdir_paths_and_cleanup(runner: Runner) -> None:
    executor = runner.executor
    with executor.workdir() as wd:
        assert os.path.dirname(wd.path).startswith("/tmp") or executor.config.temp_root
        script = wd.new_script(".py")
        assert os.path.dirname(script) == wd.path
        assert os.path.basename(script).startswith("tmp") and len(os.path.basename(script)) == 14
        for bad in ("../x", "/etc/passwd", "a/../../x", ""):
            with pytest.raises(ValueError):
                wd.write_file(bad, b"x")
        code = (
            "import os\nos.symlink('/etc/shadow', 'leak')\nos.makedirs('locked/deep')\n"
            "open('locked/deep/f', 'w').write('x')\nos.chmod('locked/deep', 0)\nos.chmod('locked', 0)\n"
        )
        wd.write_file(os.path.basename(script), code.encode())
        result = runner.call(
            executor.run(
                ExecutionRequest(argv=[executor.config.python, script], cwd=wd.path, timeout=5, python_script=script)
            )
        )
        assert result.return_code == 0, result.stderr
        assert wd.read_file("leak") is None
        assert wd.read_file("missing") is None
        assert wd.read_file("../../etc/passwd") is None
        path = wd.path
    assert not os.path.exists(path)


def test_cancelled_run_kills_the_program(runner: Runner) -> None:
    async def scenario() -> int:
        earlier = frozenset(_children_of(runner.executor.zygote_pid))
        task = asyncio.ensure_future(runner.arun("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(30)"))
        await _until_child_of(runner.executor.zygote_pid, besides=earlier)
        sleepers = [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and _parent(int(p)) == runner.executor.zygote_pid and not _is_zombie(int(p))
        ]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(sleepers) == 1
        return sleepers[0]

    pid = runner.call(scenario())
    assert _wait_gone([pid])
    assert runner.run("print('ok')").stdout == "ok\n"


_NO_BYTECODE = shutil.ignore_patterns("__pycache__")
_NON_ROOT_SCRIPT = """
import asyncio, os, sys
from emulator.executor import ExecutionRequest, Executor, ExecutorConfig

async def run(ex, code, timeout=5.0):
    with ex.workdir() as wd:
        script = wd.new_script()
        wd.write_file(os.path.basename(script), code.encode())
        return await ex.run(ExecutionRequest([ex.config.python, script], wd.path, timeout, python_script=script))

async def main() -> None:
    for mode in ("fast", "faithful"):
        async with Executor(ExecutorConfig(python=sys.executable, python_mode=mode)) as ex:
            r = await run(ex, "import os, resource\\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])")
            uid, nproc = r.stdout.split()
            print(mode, "uid", uid == str(os.getuid()), "nproc", 512 < int(nproc) < 512 + 4096)
            r = await run(ex, "import os\\nwhile True:\\n    os.fork()", timeout=1.0)
            print(mode, "bomb", r.status in ("Finished", "TimeLimitExceeded"))
            r = await run(ex, "import os\\nos.kill(os.getppid(), 9)")
            print(mode, "parent killed", r.status)
            r = await run(ex, "print('after')")
            print(mode, "after", r.status, repr(r.stdout))

asyncio.run(main())
"""


@needs_root
def test_non_root_mode() -> None:
    """Without root: no uid change, RLIMIT_NPROC = the user's current tasks + the cap, zygote restarts."""
    python = "/usr/bin/python3"
    setpriv = "/usr/bin/setpriv"
    if not (os.path.exists(python) and os.path.exists(setpriv)):
        pytest.skip("needs a world-readable system python3 and setpriv")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    # The unprivileged user imports a copy of the package in a world-readable dir: the checkout itself may lie where
    # it cannot look (under a home dir of mode 700, say).
    with tempfile.TemporaryDirectory(prefix="non-root-") as tree:
        os.chmod(tree, 0o755)
        shutil.copytree(os.path.join(repo, "emulator"), os.path.join(tree, "emulator"), ignore=_NO_BYTECODE)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": tree, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", _NON_ROOT_SCRIPT]
        done = subprocess.run(argv, cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for mode in ("fast", "faithful"):
        assert f"{mode} uid True nproc True" in done.stdout
        assert f"{mode} bomb True" in done.stdout
        assert f"{mode} parent killed Error" in done.stdout
        assert f"{mode} after Finished 'after\\n'" in done.stdout


def test_threaded_executor_from_plain_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from emulator.executor import ThreadedExecutor

    with ThreadedExecutor() as sync:

        def one(i: int) -> str | None:
            with sync.workdir() as wd:
                script = wd.write_file("main.py", f"print({i})".encode())
                request = ExecutionRequest([sync.executor.config.python, script], wd.path, 5, python_script=script)
                return sync.run(request).stdout

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(one, range(8))) == [f"{i}\n" for i in range(8)]


def test_child_processes_inherit_each_runs_own_environment(runner: Runner) -> None:
    """The C environ (what a subprocess inherits) is each run's, not the previous run's in the same batch or before."""
    code = (
        "import os, subprocess\n"
        "seen = subprocess.run(['sh', '-c', 'echo $HOME $EXTRA'], capture_output=True, text=True).stdout.split()\n"
        "print(seen == [os.getcwd(), os.environ['EXTRA']])\n"
    )
    for tag in ("one", "two", "three"):
        got = runner.run(code, extra_env={"EXTRA": tag})
        assert got.return_code == 0, got.stderr
        assert got.stdout == "True\n"

    async def together() -> list[tuple[ExecutionResult, bytes | None]]:  # forked in one batch by the zygote
        return await asyncio.gather(*(runner.arun(code, extra_env={"EXTRA": f"run{i}"}) for i in range(16)))

    for got, _ in runner.call(together()):
        assert got.return_code == 0, got.stderr
        assert got.stdout == "True\n"


def test_a_burst_forked_together_keeps_every_run_apart(runner: Runner) -> None:
    """The zygote forks the spawns that arrive together in one tight loop: in a burst of 80 programs each still gets
    its own stdin, stdout, stderr and environment, sees no other run's pipes, and the zygote keeps none of their fds
    open afterwards."""
    code = (
        "import os, sys\n"
        "data = sys.stdin.read()\n"
        "print(data, os.environ['EXTRA'], sorted(os.listdir('/proc/self/fd')))\n"
        "print('err', data, file=sys.stderr)\n"
    )

    async def burst() -> list[tuple[ExecutionResult, bytes | None]]:
        return await asyncio.gather(
            *(runner.arun(code, stdin=f"in{i}".encode(), extra_env={"EXTRA": f"env{i}"}) for i in range(80))
        )

    runner.run("pass")  # the zygote is up
    zygote = runner.executor.zygote_pid
    if zygote:
        wait_until_reaped(zygote)
    fds_before = len(os.listdir(f"/proc/{zygote}/fd")) if zygote else 0
    for i, (got, _) in enumerate(runner.call(burst())):
        assert got.return_code == 0, got.stderr
        assert got.stdout == f"in{i} env{i} ['0', '1', '2', '3']\n"
        assert got.stderr == f"err in{i}\n"
    if zygote:
        assert runner.executor.zygote_pid == zygote
        wait_until_reaped(zygote)
        assert len(os.listdir(f"/proc/{zygote}/fd")) == fds_before


def test_runs_leave_no_reference_cycles(runner: Runner) -> None:
    """A finished run is freed by reference counting alone: no cycle is left for the garbage collector (a server
    keeps its collector for rare passes; cycles per run made it walk the journal every thousand requests)."""
    from emulator.executor.zygote import Pending

    def pending_alive() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, Pending))

    runner.run("print('warm')")
    gc.collect()
    gc.disable()
    try:
        before = pending_alive()
        for i in range(10):
            assert runner.run(f"print({i})").stdout == f"{i}\n"
        runner.run("while True: pass", timeout=0.2)  # a timed-out run takes the timer's other branch
        after = pending_alive()
    finally:
        gc.enable()
    assert after == before


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need root")
def test_a_process_left_with_a_uid_of_ours_is_swept_before_that_uid_runs(loop: asyncio.AbstractEventLoop) -> None:
    """A new executor reads /proc once for processes holding its uids (a previous instance's leftovers) and sweeps
    those uids before their first run; the others, free, run without that sweep."""
    from emulator.executor.executor import _uids_in_use

    base = 231_000
    leftover = subprocess.Popen(["sleep", "60"], user=base, start_new_session=True)
    try:
        assert _uids_in_use(range(base, base + 8)) == {base}
        assert _uids_in_use(range(base + 1, base + 8)) == set()

        async def one_run() -> ExecutionResult:
            executor = Executor(ExecutorConfig(sandbox_uid=base, sandbox_uid_count=8))
            try:
                assert executor._dirty_uids == {base}
                # The program watches the leftover for a second: killed before it started, it is a zombie at once.
                watch = (
                    "import time\n"
                    f"path, until = '/proc/{leftover.pid}/stat', time.monotonic() + 1\n"
                    "state = open(path).read().rsplit(')', 1)[1].split()[0]\n"
                    "while state != 'Z' and time.monotonic() < until:\n"
                    "    state = open(path).read().rsplit(')', 1)[1].split()[0]\n"
                    "print(state)\n"
                )
                return await executor.run(
                    ExecutionRequest(argv=[executor.config.python, "-c", watch], cwd="/", timeout=10)
                )
            finally:
                await executor.aclose()

        got = loop.run_until_complete(one_run())
        assert got.stdout == "Z\n", got.stderr  # the run with uid `base` swept it first
        assert leftover.wait(timeout=10) == -signal.SIGKILL
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
