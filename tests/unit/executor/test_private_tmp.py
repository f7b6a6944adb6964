"""One-shot runs see the temp root as a private tmpfs; every other run sees the host's.

The real server runs in a container, so its programs see a ``/tmp`` of their own. Here a run whose work dir the
sandbox makes (``ExecutionRequest.setup``, as Sandbox Fusion's Python runs) gets the same ``/tmp/tmpXXXXXXXX``
path on a tmpfs mounted in a mount namespace of the zygote's own: the host's files there are hidden. That needs
root; without it the work dirs stay on the host's temp root.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig, WorkdirError

from .conftest import Runner, dead, wait_until_reaped

_LIST_TMP = "import os\nprint(os.getcwd())\nprint(sorted(os.listdir(os.path.dirname(os.getcwd()))))\n"


def _private_tmp_expected() -> bool:
    """Root gets a private temp root unless the runtime Python uses something under it (its files, or a checkout
    installed in editable mode under ``/tmp``): the tmpfs would hide that from programs, so the zygote refuses (see
    ``test_no_private_temp_root_when_the_runtime_python_lives_under_it``)."""
    if os.geteuid() != 0:
        return False
    roots = {tempfile.gettempdir().rstrip(os.sep) + os.sep, os.path.realpath(tempfile.gettempdir()) + os.sep}
    for used in (sys.executable, sys.prefix, sys.base_prefix, *sys.path):
        for path in (os.path.abspath(used), os.path.realpath(used)) if used else ():
            if (path + os.sep).startswith(tuple(roots)):
                return False
    return True


@pytest.fixture
def host_marker() -> Iterator[str]:
    """A file on the host's temp root."""
    path = os.path.join(tempfile.gettempdir(), f"host-marker-{uuid.uuid4().hex}")
    Path(path).write_text("host")
    yield os.path.basename(path)
    os.unlink(path)


async def _one_shot(executor: Executor, code: str, fetch: tuple[str, ...] = ()) -> tuple[ExecutionResult, str]:
    with executor.deferred_workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code.encode())
        wd.write_file("given.txt", b"given")
        wd.fetch = list(fetch)
        setup = wd.setup()
        assert setup is not None
        result = await executor.run(
            ExecutionRequest(
                argv=[executor.config.python, script], cwd=wd.path, timeout=10, python_script=script, setup=setup
            )
        )
        wd.complete(result.files, result.workdir_removed)
        return result, wd.path


def test_a_one_shot_run_sees_a_private_temp_root(runner: Runner, host_marker: str) -> None:
    code = _LIST_TMP + "print(open('given.txt').read())\nopen('made.txt', 'w').write('made')\n"
    result, path = runner.call(_one_shot(runner.executor, code, fetch=("made.txt",)))
    assert result.return_code == 0, result.stderr
    cwd, listing, given = (result.stdout or "").splitlines()
    assert cwd == path and os.path.dirname(cwd) == tempfile.gettempdir()
    assert given == "given" and result.files == {"made.txt": b"made"}
    if _private_tmp_expected():
        assert runner.executor.private_tmp == tempfile.gettempdir()
        assert host_marker not in listing and os.path.basename(path) in listing
        assert not os.path.exists(path)  # never on the host
    else:
        assert runner.executor.private_tmp is None
        assert host_marker in listing
    # The next one-shot run finds the first one's dir gone.
    again, _ = runner.call(_one_shot(runner.executor, _LIST_TMP))
    assert os.path.basename(path) not in (again.stdout or "")


def test_a_run_in_a_dir_made_by_the_server_sees_the_hosts_temp_root(runner: Runner, host_marker: str) -> None:
    result = runner.run(_LIST_TMP)
    assert result.return_code == 0, result.stderr
    assert host_marker in (result.stdout or "")


def test_no_private_temp_root_with_an_explicit_one(tmp_path: Path) -> None:
    async def scenario() -> str | None:
        executor = Executor(ExecutorConfig(temp_root=str(tmp_path), warm_interpreters=1))
        await executor.start()
        try:
            result, path = await _one_shot(executor, _LIST_TMP)
            assert result.return_code == 0, result.stderr
            assert os.path.dirname(path) == str(tmp_path)
            return executor.private_tmp
        finally:
            await executor.aclose()

    assert asyncio.run(scenario()) is None


def test_no_private_temp_root_when_the_runtime_python_lives_under_it(
    tmp_path: Path, host_marker: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A runtime under the temp root would vanish for the program: the work dirs stay on the host's."""
    python = tmp_path / "python3"
    python.symlink_to(ExecutorConfig().python)
    assert str(tmp_path).startswith(tempfile.gettempdir() + os.sep)

    async def scenario() -> tuple[str | None, ExecutionResult]:
        executor = Executor(ExecutorConfig(python=str(python)))
        await executor.start()
        try:
            result, _ = await _one_shot(
                executor,
                # Flushed first: a long listing of a busy temp root would otherwise leave the block buffer mid-line.
                _LIST_TMP + "import sys, subprocess\nsys.stdout.flush()\n"
                "subprocess.run([sys.executable, '-c', 'print(7)'], check=True)\n",
            )
            return executor.private_tmp, result
        finally:
            await executor.aclose()

    with caplog.at_level(logging.INFO, logger="emulator.executor"):
        private, result = asyncio.run(scenario())
    assert private is None
    assert result.return_code == 0, result.stderr
    assert host_marker in (result.stdout or "") and "7" in (result.stdout or "").splitlines()
    if os.geteuid() == 0:
        assert any("the runtime Python uses" in r.getMessage() for r in caplog.records)


def test_private_tmp_can_be_turned_off(host_marker: str) -> None:
    async def scenario() -> tuple[str | None, ExecutionResult]:
        executor = Executor(ExecutorConfig(private_tmp=False, warm_interpreters=1))
        await executor.start()
        try:
            result, _ = await _one_shot(executor, _LIST_TMP)
            return executor.private_tmp, result
        finally:
            await executor.aclose()

    private, result = asyncio.run(scenario())
    assert private is None and host_marker in (result.stdout or "")


def test_the_sweep_removes_only_stale_leftovers(tmp_path: Path) -> None:
    """What programs leave outside their work dirs goes once nothing in it changed for the age; live dirs stay."""
    from emulator.executor import zygote_main

    now = 1_000_000.0
    old, fresh = now - 100, now - 1

    def made(path: Path, when: float, is_dir: bool = False) -> Path:
        path.mkdir() if is_dir else path.write_text("x")
        os.utime(path, (when, when))
        return path

    made(tmp_path / "old.txt", old)
    old_tree = made(tmp_path / "old-tree", old, is_dir=True)
    made(old_tree / "inside", old)
    os.utime(old_tree, (old, old))
    busy_tree = made(tmp_path / "busy-tree", old, is_dir=True)
    made(made(busy_tree / "deep", old, is_dir=True) / "new", fresh)
    os.utime(busy_tree / "deep", (old, old))
    os.utime(busy_tree, (old, old))
    made(tmp_path / "fresh.txt", fresh)
    made(tmp_path / "tmplive0000", old, is_dir=True)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.utime(tmp_path / "dangling", (old, old), follow_symlinks=False)

    removed = zygote_main._sweep_private_tmp(str(tmp_path), {"tmplive0000"}, cutoff=now - 50)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy-tree", "fresh.txt", "tmplive0000"]
    assert removed == 3
    assert (busy_tree / "deep" / "new").exists()


@pytest.mark.parametrize("warm", [1, 2])
def test_leftovers_stay_for_later_runs_until_stale_and_live_dirs_stay(host_marker: str, warm: int) -> None:
    """With two warm interpreters the sweep goes to the idle one while the slow run holds the other: the live dir it
    keeps is another's."""
    name = f"left-{uuid.uuid4().hex}.txt"

    async def scenario() -> None:
        executor = Executor(ExecutorConfig(private_tmp_max_age=0.5, warm_interpreters=warm))
        await executor.start()
        try:
            wrote, _ = await _one_shot(executor, f"open('/tmp/{name}', 'w').write('kept')\n")
            assert wrote.return_code == 0, wrote.stderr
            if executor.private_tmp is None:
                assert not _private_tmp_expected()
                os.unlink(os.path.join(tempfile.gettempdir(), name))
                return
            read, _ = await _one_shot(executor, f"print(open('/tmp/{name}').read())\n")
            assert read.stdout == "kept\n"  # a later run finds it, as in the real server's container
            # A run that outlives the age without touching its dir keeps it.
            slow, _ = await _one_shot(
                executor, "import os, time\ntime.sleep(1.5)\nprint(os.path.exists(__file__), os.getcwd())\n"
            )
            assert (slow.stdout or "").startswith("True /tmp/tmp"), slow.stdout
            # By now the leftover is a second older than the age, and the sweep runs every quarter of a second.
            listed, _ = await _one_shot(executor, "import os\nprint(sorted(os.listdir('/tmp')))\n")
            assert listed.return_code == 0, listed.stderr
            assert name not in (listed.stdout or "")
        finally:
            await executor.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("age", [0.0, -1.0, float("nan")])
def test_a_max_age_that_is_not_positive_is_refused(age: float) -> None:
    with pytest.raises(ValueError, match="private_tmp_max_age must be a positive number"):
        Executor(ExecutorConfig(private_tmp_max_age=age))


def test_a_work_dir_that_cannot_be_made_is_a_workdir_error(runner: Runner) -> None:
    """A one-shot run's dir is made by the zygote just before the fork; when that fails, the run raises WorkdirError
    (as the server's own mkdtemp would have), and the program never runs."""
    executor = runner.executor

    taken: list[str] = []

    async def go() -> None:
        with executor.deferred_workdir() as wd:
            taken.append(wd.path)
            script = wd.new_script(".py")
            wd.write_file(os.path.basename(script), b"print('ran')")
            # A program takes the planned name first, where the zygote makes dirs (its own /tmp, as root).
            taker, _ = await _one_shot(executor, f"import os\nos.mkdir({wd.path!r})\n")
            assert taker.return_code == 0, taker.stderr
            setup = wd.setup()
            assert setup is not None
            request = ExecutionRequest(
                argv=[executor.config.python, script], cwd=wd.path, timeout=10, python_script=script, setup=setup
            )
            with pytest.raises(WorkdirError, match="File exists"):
                await executor.run(request)

    try:
        runner.call(go())
    finally:
        if taken and os.path.isdir(taken[0]):  # the host's temp root, when there is no private one
            os.rmdir(taken[0])


def test_a_spawn_that_fails_after_its_dir_was_made_removes_the_dir(runner: Runner) -> None:
    """The zygote makes a one-shot run's dir, then its pipes and fork. When those fail (here: the zygote's open-files
    limit, lowered from outside, stops its second pipe), the run is an error, the dir is gone, and the next run works.
    """
    executor = runner.executor
    runner.run("print('warm')")  # the zygote is up
    zygote = executor.zygote_pid
    assert zygote is not None
    wait_until_reaped(zygote)  # its pidfd closed: the fds counted below are those the zygote keeps
    open_fds = {int(fd) for fd in os.listdir(f"/proc/{zygote}/fd")}
    free = [fd for fd in range(max(open_fds) + 5) if fd not in open_fds]
    soft, hard = resource.prlimit(zygote, resource.RLIMIT_NOFILE)
    # New fds take the lowest free numbers: the files the zygote writes and the first pipe fit below the limit, the
    # second pipe's second end does not.
    resource.prlimit(zygote, resource.RLIMIT_NOFILE, (free[3], hard))
    try:
        failed, path = runner.call(_one_shot(executor, "print('never')"))
    finally:
        resource.prlimit(zygote, resource.RLIMIT_NOFILE, (soft, hard))
    assert (failed.status, failed.return_code, failed.stdout) == ("Error", None, None)
    assert "Too many open files" in (failed.stderr or "")
    as_zygote_sees_it = Path(f"/proc/{zygote}/root{path}")
    assert as_zygote_sees_it.parent.is_dir() and not as_zygote_sees_it.exists()
    after, _ = runner.call(_one_shot(executor, "print('after')"))
    assert (after.stdout, executor.zygote_pid) == ("after\n", zygote)


_HANDSHAKE = """
import os, time
mine, theirs = "/tmp/{name}-" + {me!r}, "/tmp/{name}-" + {other!r}
open(mine, "w").write(str(os.getppid()))
deadline = time.monotonic() + 10
while not os.path.exists(theirs) and time.monotonic() < deadline:
    time.sleep(0.005)
print(os.getppid(), open(theirs).read() if os.path.exists(theirs) else "missing")
"""


def test_warm_interpreters_share_one_private_temp_root() -> None:
    """Two one-shot runs at once, one per warm interpreter, each waiting for the file the other leaves in /tmp: in
    the real server's container they share /tmp, so each finds the other's (before, each warm interpreter had a tmpfs
    of its own, and both waited in vain). Both start at the first runs, together: one namespace is made, not two."""
    if not _private_tmp_expected():
        pytest.skip("no private temp root here (needs root, and a runtime Python outside the temp root)")
    name = f"hand-{uuid.uuid4().hex}"

    async def scenario() -> tuple[list[ExecutionResult], str | None, set[int]]:
        executor = Executor(ExecutorConfig(warm_interpreters=2))
        try:
            runs = [
                _one_shot(executor, _HANDSHAKE.format(name=name, me=me, other=other))
                for me, other in (("a", "b"), ("b", "a"))
            ]
            results = [result for result, _path in await asyncio.gather(*runs)]
            namespaces = {os.stat(f"/proc/{pid}/ns/mnt").st_ino for pid in _zygote_pids(executor)}
            return results, executor.private_tmp, namespaces
        finally:
            await executor.aclose()

    (first, second), private, namespaces = asyncio.run(scenario())
    assert first.return_code == 0 and second.return_code == 0, (first.stderr, second.stderr)
    ours_a, seen_b = (first.stdout or "").split()
    ours_b, seen_a = (second.stdout or "").split()
    assert ours_a != ours_b  # one run in each warm interpreter
    assert (seen_a, seen_b) == (ours_a, ours_b)
    assert private == tempfile.gettempdir()
    assert len(namespaces) == 1 and os.stat("/proc/self/ns/mnt").st_ino not in namespaces
    assert not [entry for entry in os.listdir(tempfile.gettempdir()) if entry.startswith(name)]  # not the host's


def _zygote_pids(executor: Executor) -> list[int]:
    return [zygote.pid for zygote in executor._zygotes if zygote is not None and zygote.pid is not None]


_WHOSE = "import os\nprint(os.getppid(), sorted(os.listdir('/tmp')))\n"


def test_a_warm_interpreter_that_cannot_join_the_private_temp_root_does_not_start(
    host_marker: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Were it to start anyway, its runs would see the host's /tmp and the others' runs the private one: its start
    fails instead, and its runs go to one in the private root (here the namespace to join is made the host's, which
    the warm interpreter refuses)."""
    if not _private_tmp_expected():
        pytest.skip("no private temp root here (needs root, and a runtime Python outside the temp root)")

    async def scenario() -> tuple[list[ExecutionResult], int | None, bool]:
        executor = Executor(ExecutorConfig(warm_interpreters=2))
        try:
            first, _ = await _one_shot(executor, "print('first')")  # the first warm interpreter makes the root
            assert first.stdout == "first\n", first.stderr
            held, executor._tmp_ns = executor._tmp_ns, os.open("/proc/self/ns/mnt", os.O_RDONLY)
            try:
                results = [result for result, _ in await asyncio.gather(*(_one_shot(executor, _WHOSE) for _ in "ab"))]
            finally:
                assert executor._tmp_ns is not None
                os.close(executor._tmp_ns)
                executor._tmp_ns = held
            return results, executor.zygote_pid, executor._zygotes[1] is None
        finally:
            await executor.aclose()

    with caplog.at_level(logging.ERROR, logger="emulator.executor"):
        results, first_pid, second_not_started = asyncio.run(scenario())
    for result in results:
        assert result.return_code == 0, result.stderr
        parent, listing = (result.stdout or "").split(" ", 1)
        assert int(parent) == first_pid and host_marker not in listing
    assert second_not_started
    assert any("could not join the private" in record.getMessage() for record in caplog.records)


def test_a_passing_failure_to_make_the_private_temp_root_is_a_failed_start(
    monkeypatch: pytest.MonkeyPatch, host_marker: str
) -> None:
    """The first warm interpreter's namespace is everyone's: one made on the host's /tmp for a passing reason (here:
    the descriptors ran out) is not kept (that would leave every later warm interpreter, restarted ones too, on the
    host's /tmp); its run is an error, and the next start makes the private root."""
    if not _private_tmp_expected():
        pytest.skip("no private temp root here (needs root, and a runtime Python outside the temp root)")
    from emulator.executor import zygote

    real_start = zygote.Zygote.start
    starts: list[int] = []

    async def first_without(self: zygote.Zygote) -> None:
        await real_start(self)
        starts.append(1)
        if len(starts) == 1:
            self.private_tmp, self.private_tmp_never = None, False
            self.private_tmp_error = "pipe2: Too many open files"

    monkeypatch.setattr(zygote.Zygote, "start", first_without)

    async def scenario() -> tuple[ExecutionResult, ExecutionResult, str | None]:
        executor = Executor(ExecutorConfig(warm_interpreters=1))
        try:
            failed, _ = await _one_shot(executor, _WHOSE)
            ran, _ = await _one_shot(executor, _WHOSE)
            return failed, ran, executor.private_tmp
        finally:
            await executor.aclose()

    failed, ran, private = asyncio.run(scenario())
    assert (failed.status, failed.stdout) == ("Error", None)
    assert "could not make the private" in (failed.stderr or "") and "Too many open files" in (failed.stderr or "")
    assert ran.return_code == 0 and host_marker not in (ran.stdout or ""), ran.stderr
    assert private == tempfile.gettempdir() and len(starts) == 2


def test_the_work_dirs_of_a_warm_interpreter_that_died_go_at_the_next_sweep() -> None:
    """Its runs' dirs stay in the shared root (its children die with it, the dirs do not); the next sweep removes
    them however new. Before the root was shared they went with the warm interpreter's own tmpfs."""
    if not _private_tmp_expected():
        pytest.skip("no private temp root here (needs root, and a runtime Python outside the temp root)")

    async def scenario() -> tuple[ExecutionResult, str, str, str]:
        executor = Executor(ExecutorConfig(warm_interpreters=1))
        try:
            with executor.deferred_workdir() as wd:
                script = wd.new_script(".py")
                wd.write_file(os.path.basename(script), b"import time\nprint('up', flush=True)\ntime.sleep(60)\n")
                setup = wd.setup()
                assert setup is not None
                request = ExecutionRequest(
                    argv=[executor.config.python, script], cwd=wd.path, timeout=90, python_script=script, setup=setup
                )
                slow = asyncio.ensure_future(executor.run(request))
                pid = None
                for _ in range(3000):  # until the zygote reports the program started (its dir made before)
                    zygote = executor._zygotes[0]
                    if zygote is not None and any(p.pid is not None for p in zygote._pending.values()):
                        pid = zygote.pid
                        break
                    await asyncio.sleep(0.01)
                assert pid is not None, "the slow run never started"
                os.kill(pid, 9)
                died = await slow
                dirname = os.path.basename(wd.path)
                before, _ = await _one_shot(executor, "import os\nprint(sorted(os.listdir('/tmp')))\n")
                executor._sweep_private_tmp()  # the timer's sweep, now (its age is ten minutes: none is stale)
                after, _ = await _one_shot(executor, "import os\nprint(sorted(os.listdir('/tmp')))\n")
                wd.complete(None, True)
            return died, dirname, before.stdout or "", after.stdout or ""
        finally:
            await executor.aclose()

    died, dirname, before, after = asyncio.run(scenario())
    assert died.status == "Error" and "restarted" in (died.stderr or "")
    assert dirname in before and dirname not in after


def test_a_restarted_warm_interpreter_finds_the_same_private_temp_root() -> None:
    """The executor holds the namespace: a warm interpreter that died and started again sees what programs left in
    /tmp before (a container's /tmp outlives any one of its processes)."""
    if not _private_tmp_expected():
        pytest.skip("no private temp root here (needs root, and a runtime Python outside the temp root)")
    name = f"kept-{uuid.uuid4().hex}.txt"

    async def scenario() -> tuple[ExecutionResult, int, int | None]:
        executor = Executor(ExecutorConfig(warm_interpreters=1))
        try:
            wrote, _ = await _one_shot(executor, f"open('/tmp/{name}', 'w').write('still here')\n")
            assert wrote.return_code == 0, wrote.stderr
            first = executor.zygote_pid
            assert first is not None
            os.kill(first, 9)
            assert dead(first)
            read, _ = await _one_shot(executor, f"print(open('/tmp/{name}').read())\n")
            return read, first, executor.zygote_pid
        finally:
            await executor.aclose()

    read, first, second = asyncio.run(scenario())
    assert second is not None and second != first
    assert (read.return_code, read.stdout) == (0, "still here\n"), read.stderr
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), name))  # never on the host's


_JOIN = """
import os, sys
sys.path.insert(0, {here!r})
from emulator.executor import zygote_main
fd = os.open({ns!r}, os.O_RDONLY)
before = os.stat("/proc/self/ns/mnt").st_ino
print(zygote_main._join_private_tmp({root!r}, fd))
print(os.stat("/proc/self/ns/mnt").st_ino == before)
"""


_HOLDER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.unshare(0x20000) == 0
assert libc.mount(b"none", b"/", None, 16384 | (1 << 18), None) == 0  # --make-rprivate /
if sys.argv[1] != "none":
    assert libc.mount(sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[1].encode(), 0, None) == 0
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("which", ["host", "nothing mounted", "ramfs", "tmpfs"])
def test_a_namespace_without_the_private_tmpfs_is_never_joined(which: str) -> None:
    """The sweep removes what is old in the private temp root; a warm interpreter that joined the host's namespace,
    or one with no tmpfs there (nothing mounted: the host's /tmp; or another file system), would sweep what is not
    its own. It refuses and stays where it was; a namespace with a tmpfs there it joins."""
    if os.geteuid() != 0:
        pytest.skip("joining a mount namespace needs root")
    import subprocess

    here = str(Path(__file__).resolve().parents[3])
    root = os.path.realpath(tempfile.gettempdir())
    holder = None
    if which == "host":
        ns = "/proc/self/ns/mnt"
    else:
        kind = {"nothing mounted": "none", "ramfs": "ramfs", "tmpfs": "tmpfs"}[which]
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, kind, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        ns = f"/proc/{holder.pid}/ns/mnt"
    try:
        code = _JOIN.format(here=here, ns=ns, root=root)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    finally:
        if holder is not None:
            holder.communicate("", timeout=10)
    assert out.returncode == 0, out.stderr
    why, stayed = out.stdout.splitlines()
    if which == "host":
        assert (why, stayed) == ("the namespace to join is the host's", "True")
    elif which == "tmpfs":
        assert (why, stayed) == ("None", "False")
    else:
        assert (why, stayed) == (f"the namespace to join has no tmpfs at {root}", "True")


@pytest.mark.parametrize(
    ("code", "never"),
    [
        *((str(number), True) for number in (errno.EPERM, errno.EACCES, errno.ENOSPC, errno.ENODEV, errno.EINVAL)),
        *((str(number), False) for number in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN)),
        ("0", False),
        ("", False),
    ],
)
def test_only_a_lasting_failure_to_make_the_namespace_is_for_good(code: str, never: bool) -> None:
    """EPERM, EACCES, ENOSPC (no mount namespaces left to this user), ENODEV (no tmpfs), EINVAL stay; EMFILE,
    ENFILE, ENOMEM, EAGAIN pass, as does a helper that died without a word."""
    from emulator.executor import zygote_main

    assert zygote_main._never(code) is never


_NO_NAMESPACES_LEFT = """
import asyncio, os, sys
sys.path.insert(0, {here!r})
from emulator.executor import ExecutionRequest, Executor, ExecutorConfig

async def one(executor):
    with executor.deferred_workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), b"print('ran')")
        setup = wd.setup()
        request = ExecutionRequest(
            argv=[executor.config.python, script], cwd=wd.path, timeout=30, python_script=script, setup=setup
        )
        result = await executor.run(request)
        wd.complete(result.files, result.workdir_removed)
        return result

async def main():
    executor = Executor(ExecutorConfig(warm_interpreters=2, sandbox_uid=0))
    try:
        for _ in range(3):
            result = await one(executor)
            print(result.status, repr(result.stdout), repr((result.stderr or "")[:200]))
        print("private:", executor.private_tmp)
    finally:
        await executor.aclose()

asyncio.run(main())
"""


def test_a_lasting_failure_to_make_the_private_temp_root_leaves_every_run_on_the_hosts() -> None:
    """A user namespace whose mount namespaces are all used up (``user.max_mnt_namespaces`` 0, a hardening setting):
    unshare fails with ENOSPC at every try. Every run goes on, on the host's temp root, as where there is no root
    (it was taken for a passing failure: every run an error, each after a start)."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and util-linux's unshare")
    probe = ["unshare", "--user", "--map-root-user", "--fork", "sh", "-c", "echo 0 > /proc/sys/user/max_mnt_namespaces"]
    if subprocess.run(probe, capture_output=True, timeout=30).returncode != 0:
        pytest.skip("this machine lets no user namespace be made, or none set its own mount namespace limit")
    here = str(Path(__file__).resolve().parents[3])
    script = "echo 0 > /proc/sys/user/max_mnt_namespaces && exec " + sys.executable + ' -c "$0"'
    out = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--fork", "sh", "-c", script, _NO_NAMESPACES_LEFT.format(here=here)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    *runs, private = out.stdout.splitlines()
    assert runs == ["Finished 'ran\\n' ''"] * 3, out.stdout + out.stderr
    assert private == "private: None"
