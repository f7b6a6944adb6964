"""Stateful interpreter contexts: one long-lived Python process per (sandbox, context).

Isolation mirrors the executor's: when the emulator is root each context runs under a uid of its own (from
``interpreter_uid_base``), with no supplementary groups, in its own session, with rlimits on processes, file size,
address space and core dumps; processes left behind under that uid are killed when the context ends. The sandbox's
home is handed to the context's uid before each execution (as the executor does before each run).

A timeout interrupts the code as the daemon does: SIGINT to the process, whose code then ends in
``KeyboardInterrupt`` (the context's state kept), and only when the code has not ended ``grace`` seconds later (the
daemon's 2) the process is killed, and with it the state: the next ``run_code`` starts a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from emulator.executor.holders import HOLDERS
from emulator.executor.sweep import sweep_uid
from emulator.faults.bodies import now_iso

from .go_json import as_go_decodes

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interp_driver.py")
#: How long the last chunk waits for the end of the run before it is sent alone (seconds).
_HOLD_S = 0.005
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NOGROUP = 65534

Frame = dict[str, str]
OnFrame = Callable[[Frame], Awaitable[None]]


class InterpreterTimeout(Exception):
    """The execution ran past its timeout and did not end when interrupted; the context's process was killed.

    ``unsent``: the output the code wrote last, not streamed yet (as :attr:`ExecutionOutcome.unsent`)."""

    def __init__(self, unsent: list[dict[str, str]] | None = None) -> None:
        super().__init__("execution timeout")
        self.unsent = unsent or []


_log = logging.getLogger(__name__)


class ContextClosed(RuntimeError):
    """The context was deleted (or its sandbox stopped or deleted) before or while its process started: a race with
    the client's own delete, answered as such rather than logged as a failure of ours."""

    def __init__(self) -> None:
        super().__init__("context deleted")


class WorkerStartError(Exception):
    """A context's process could not start (descriptors, processes or uids exhausted); ``cause`` is the daemon's
    error text from its worker start on, ``restart`` whether the context had a process before."""

    def __init__(self, cause: str, restart: bool) -> None:
        super().__init__(cause)
        self.cause = cause
        self.restart = restart


def go_start_error(error: OSError, program: str) -> str:
    """How Go's ``os/exec`` words ``error`` in starting ``program``: it makes the pipes first (``pipe2: ...``, where
    descriptors run out), then forks (``fork/exec PROGRAM: ...``); Go's texts are the C library's, lower-cased."""
    number = error.errno
    if not (isinstance(number, int) and number > 0):
        number = _spawn_errno()
    if isinstance(number, int) and number > 0:
        reason = os.strerror(number)
    else:
        reason = error.strerror or str(error) or type(error).__name__
    reason = reason[:1].lower() + reason[1:]
    if number in (errno.EMFILE, errno.ENFILE):
        return f"pipe2: {reason}"
    return f"fork/exec {program}: {reason}"


def _spawn_errno() -> int | None:
    """uvloop words some failed spawns as errno -1, libuv's unnamed error, when descriptors are nearly out: as many
    descriptors as a spawn takes (its pipes, its error pipe), made at once, say whether they are."""
    made: list[int] = []
    try:
        for _ in range(4):
            made.extend(os.pipe())
    except OSError as probe:
        return probe.errno
    finally:
        for fd in made:
            os.close(fd)
    return None


def _start_failure(error: OSError, python: str) -> str:
    """What the daemon's ``Context.start`` says when its worker cannot start."""
    said = go_start_error(error, python)
    step = "failed to create stdin pipe" if said.startswith("pipe2:") else "failed to start Python worker"
    return f"{step}: {said}"


@dataclass(frozen=True)
class InterpreterSettings:
    python: str
    uid_base: int | None  # None: no uid change (not root)
    uid_count: int
    max_processes: int = 512
    max_file_size_mb: int = 64
    max_address_space_mb: int = 4096
    #: Seconds a timed-out execution has to end after its SIGINT before its process is killed (the daemon's 2).
    grace: float = 2.0


@dataclass
class ExecutionOutcome:
    error: dict[str, str] | None
    #: What the code wrote, in the pieces it came in (joined on demand: a noisy run's output is not copied again
    #: at each piece).
    stdout_parts: list[str] = field(default_factory=list)
    stderr_parts: list[str] = field(default_factory=list)
    #: The code never ran: its client left before its start (see ``Interpreters.run``'s ``abandoned``).
    cancelled: bool = False
    #: The code ended in ``KeyboardInterrupt`` (its own, or the SIGINT of a timeout): the daemon's ``interrupted``.
    interrupted: bool = False
    #: The context's process exited during the run (``os._exit``, a signal): the daemon closes with 1001.
    exited: bool = False
    #: Each stream's last frame, which came with the end of the run: left to the caller to send with the rest of its
    #: answer, so that they leave together (sent one turn of the event loop earlier, the frame woke the client,
    #: which then took the CPU from the server before the end of the answer was written: 0.3 ms at concurrency 1).
    unsent: list[Frame] = field(default_factory=list)

    @property
    def stdout(self) -> str:
        return "".join(self.stdout_parts)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_parts)


@dataclass
class Context:
    """One interpreter context of a sandbox (``default`` is created on first use)."""

    id: str
    cwd: str
    home: str
    env: dict[str, str]
    language: str = "python"
    created_at: str = field(default_factory=now_iso)
    uid: int | None = None
    process: asyncio.subprocess.Process | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False
    #: A process was started for it once (a later start is the daemon's restart).
    started: bool = False
    #: ``cwd`` as the client gave it, which the daemon answers (``cwd`` is the host directory it stands for).
    shown_cwd: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "cwd": self.shown_cwd or self.cwd,
            "language": self.language,
            "active": self.process is not None and self.process.returncode is None,
            "createdAt": self.created_at,
        }


_claimed_blocks: set[int] = set()
_LOCK_DIR = os.path.join(tempfile.gettempdir(), "sandbox-emulator-locks")


def _claim_block(base: int, count: int) -> tuple[int, int | None]:
    """A block of uids no other emulator (in this process, or another holding the flock) uses."""
    for k in range(64):
        start = base + k * count
        if start in _claimed_blocks:
            continue
        fd: int | None = None
        try:
            os.makedirs(_LOCK_DIR, exist_ok=True)
            fd = os.open(os.path.join(_LOCK_DIR, f"interpreter-{start}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held by another process
            if fd is not None:
                os.close(fd)
            continue
        except OSError:  # no lock to be had (descriptors run out): no block may be claimed unlocked
            if fd is not None:
                os.close(fd)
            raise
        _claimed_blocks.add(start)
        return start, fd
    raise UidsExhausted("no free uid block (interpreter_uid_base)")  # every one held by another emulator


class UidsExhausted(RuntimeError):
    """Every uid of the pool is held by a live context or session shell."""


class UidPool:
    """Uids for interpreter processes, one per live context, from a block of its own."""

    def __init__(self, base: int | None, count: int) -> None:
        self._count = max(count, 1)
        self._lock_fd: int | None = None
        self._wanted = base
        self._base: int | None = None
        self._free: list[int] = []

    def take(self) -> int | None:
        if self._wanted is None:
            return None
        if self._base is None:  # claimed on first use: most emulators never start an interpreter
            self._base, self._lock_fd = _claim_block(self._wanted, self._count)
            self._free = list(range(self._base, self._base + self._count))[::-1]
        if not self._free:
            raise UidsExhausted("no free uid (interpreter_uid_count)")  # short: it goes in a close frame
        return self._free.pop()

    def give(self, uid: int | None) -> None:
        if uid is not None:
            self.kill(uid)
            self.free(uid)

    def kill(self, uid: int) -> None:
        """Kill every process left under ``uid`` (those that escaped the context's session): a pass over ``/proc``,
        then ``kill(-1)`` made as the uid, which also catches what forks meanwhile (see ``sweep``)."""
        if self._base is not None:
            _kill_uid(uid)
            sweep_uid(uid)

    def free(self, uid: int) -> None:
        if self._base is not None:
            self._free.append(uid)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process running as ``uid`` (processes that escaped the context's session)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            os.kill(int(entry), signal.SIGKILL)
                        break
        except (OSError, ValueError):
            continue


async def hand_over(root: str, uid: int) -> None:
    """The home goes to the context's uid, which holds it until the context ends (see ``HOLDERS``).

    A change that fails (descriptors or processes run out) leaves the home with its previous owner, of the same
    sandbox or root: the code then runs without write access to it, and nothing crosses to another sandbox."""
    try:
        pending = HOLDERS.take(root, uid, _NOGROUP)
        if pending is not None:
            await pending
    except OSError as error:
        _log.warning("home %s not handed to uid %d: %s", root, uid, error)


class Interpreters:
    """Contexts of every sandbox of one emulator."""

    def __init__(self, settings: InterpreterSettings) -> None:
        self.settings = settings
        self._uids = UidPool(settings.uid_base, settings.uid_count)
        self._handing_back: set[asyncio.Task[None]] = set()  # uids freed once the home is handed back
        self._contexts: dict[str, dict[str, Context]] = {}
        self._kept_out: dict[int, str] = {}  # uid -> the home it served, until its processes and home are dealt with
        self._retrying: set[int] = set()

    def contexts(self, sandbox_id: str) -> dict[str, Context]:
        return self._contexts.setdefault(sandbox_id, {})

    def create(
        self, sandbox_id: str, home: str, env: dict[str, str], cwd: str, language: str = "python", shown_cwd: str = ""
    ) -> Context:
        """A context that starts in the host directory ``cwd``; its answers name ``shown_cwd`` (the client's)."""
        context = Context(
            id=str(uuid.uuid4()), cwd=cwd, home=home, env=dict(env), language=language, shown_cwd=shown_cwd
        )
        self.contexts(sandbox_id)[context.id] = context
        return context

    def default(self, sandbox_id: str, home: str, env: dict[str, str]) -> Context:
        contexts = self.contexts(sandbox_id)
        context = contexts.get("default")
        if context is None:
            context = Context(id="default", cwd=home, home=home, env=dict(env))
            contexts["default"] = context
        return context

    async def start(self, context: Context) -> None:
        """Start the context's process now (the daemon starts it when the context is created)."""
        async with context.lock:
            await self._ensure_running(context)

    async def _ensure_running(self, context: Context) -> bool:
        """Under the context's lock: start its process if it has none alive; True if it was started now."""
        if context.closed:
            raise ContextClosed
        if context.process is None or context.process.returncode is not None:
            self._stop(context)
            try:
                await self._start(context)
            except OSError as error:
                raise WorkerStartError(_start_failure(error, self.settings.python), context.started) from error
            context.started = True
            return True
        return False

    def get(self, sandbox_id: str, context_id: str) -> Context | None:
        return self._contexts.get(sandbox_id, {}).get(context_id)

    def delete(self, sandbox_id: str, context_id: str) -> bool:
        context = self._contexts.get(sandbox_id, {}).pop(context_id, None)
        if context is None:
            return False
        context.closed = True
        self._stop(context)
        return True

    def drop_sandbox(self, sandbox_id: str) -> None:
        """Kill every context of a sandbox (stop or delete)."""
        for context in self._contexts.pop(sandbox_id, {}).values():
            context.closed = True
            self._stop(context)

    def close(self) -> None:
        for sandbox_id in list(self._contexts):
            self.drop_sandbox(sandbox_id)
        self._retry_kept_out()  # descriptors are back now, most likely: nothing may outlive the emulator

    def live_processes(self) -> int:
        return sum(
            1
            for contexts in self._contexts.values()
            for c in contexts.values()
            if c.process is not None and c.process.returncode is None
        )

    # ------------------------------------------------------------------ processes

    def _stop(self, context: Context) -> None:
        process, context.process = context.process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        uid, context.uid = context.uid, None
        self._give_back(context.home, uid)

    def _give_back(self, home: str, uid: int | None, ran: bool = True) -> None:
        """Kill what is left under ``uid``, hand the home back (see ``HOLDERS``), then free the uid: no other context
        can get it before the home is no longer its. ``ran``: a process was started as the uid (else there is
        nothing to kill: its start failed). A uid whose processes or home could not be dealt with (descriptors or
        processes run out) is kept out of the pool, and tried again at each later give-back and at the close."""
        if uid is None:
            return
        self._retry_kept_out()
        self._hand_back(home, uid, ran)

    def _hand_back(self, home: str, uid: int, ran: bool, again: bool = False) -> None:
        try:
            if ran:
                self._uids.kill(uid)
        except OSError as error:  # /proc unreadable or no process left to make (descriptors, tasks exhausted)
            self._keep_out(uid, home, "its processes could not be swept", error)
            return
        try:
            asyncio.get_running_loop()
            at_once = False
        except RuntimeError:  # a shutdown with no loop left: no thread to wait for either
            at_once = True
        try:
            pending = HOLDERS.let_go(home, uid, at_once=at_once, again=again)
        except OSError as error:  # the home (or part of it) may still be the uid's
            self._keep_out(uid, home, "its home could not be handed back", error)
            return
        if pending is None:
            self._uids.free(uid)
            return

        async def free_after() -> None:
            try:
                await pending
            except Exception as error:
                self._keep_out(uid, home, "its home could not be handed back", error)
                return
            self._uids.free(uid)

        task = asyncio.ensure_future(free_after())
        self._handing_back.add(task)
        task.add_done_callback(self._handing_back.discard)

    def _keep_out(self, uid: int, home: str, why: str, error: BaseException) -> None:
        """A uid that might still run processes or own files of the sandbox it served is given to no other."""
        if uid not in self._retrying:
            _log.warning("interpreter uid %d kept out of the pool for now: %s (%s)", uid, why, error)
        self._kept_out[uid] = home

    def _retry_kept_out(self) -> None:
        for uid, home in list(self._kept_out.items()):
            del self._kept_out[uid]
            self._retrying.add(uid)
            try:
                self._hand_back(home, uid, ran=True, again=True)  # kept out again (quietly) if need be
            finally:
                self._retrying.discard(uid)

    @property
    def kept_out(self) -> list[int]:
        """Uids held back from the pool until what they may still own is dealt with."""
        return sorted(self._kept_out)

    def limits(self, uid: int | None) -> dict[str, int]:
        """The rlimits of a context's process (and of a session's shell), as the driver applies them."""
        settings = self.settings
        mib = 1024 * 1024
        return {
            "RLIMIT_NPROC": settings.max_processes if uid is not None else 0,
            "RLIMIT_FSIZE": settings.max_file_size_mb * mib,
            "RLIMIT_AS": settings.max_address_space_mb * mib,
            "RLIMIT_CORE": 1,  # setrlimit(0) is skipped by the driver; 1 byte means no usable core
        }

    async def lease(self, home: str) -> int | None:
        """A uid of the pool for another long-lived process of a sandbox (a session's shell), the home handed to
        it until :meth:`release`; None when the emulator does not change uids."""
        self._retry_kept_out()
        uid = self._uids.take()
        if uid is not None:
            try:
                await hand_over(home, uid)
            except BaseException:
                self._give_back(home, uid, ran=False)
                raise
        return uid

    def release(self, home: str, uid: int | None, ran: bool = True) -> None:
        """Kill what is left under a leased uid (``ran``: a process was started as it), hand the home back, then
        free the uid."""
        self._give_back(home, uid, ran)

    async def _start(self, context: Context) -> None:
        settings = self.settings
        self._retry_kept_out()  # no give-back may come to do it: every uid could be a kept-out one
        try:
            uid = self._uids.take()
        except UidsExhausted as exhausted:
            raise WorkerStartError(f"failed to start Python worker: {exhausted}", context.started) from None
        limits = self.limits(uid)
        env = {
            "PATH": f"{_bin_dir(settings.python)}:{_SYSTEM_PATH}",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": context.home,
            "TMPDIR": context.home,
            **context.env,
        }
        cwd = context.cwd if _is_dir(context.cwd) else context.home
        try:
            if uid is not None:
                await hand_over(context.home, uid)
            process = await asyncio.create_subprocess_exec(
                settings.python,
                "-I",
                DRIVER,
                json.dumps(limits),
                "-" if uid is None else str(uid),
                str(_NOGROUP),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,  # the worker's stderr is the daemon's log: nobody sees it
                cwd="/",
                env=STARTING_ENV,  # the sandbox's env and cwd come on the first line, taken after the uid change
                start_new_session=True,
                limit=2**26,
            )
        except BaseException:
            self._give_back(context.home, uid, ran=False)  # no process was made
            raise
        assert process.stdin is not None
        context.process, context.uid = process, uid
        if context.closed:  # the sandbox (or the context) went while the process was starting: it must not run
            self._stop(context)
            await process.wait()  # reaped here: nothing is left to the loop's clean-up
            raise ContextClosed
        try:
            process.stdin.write(driver_setup(env, cwd))
        except (RuntimeError, OSError):  # its pipe closed already: the process died (killed) as it started
            self._stop(context)
            await process.wait()
            if context.closed:
                raise ContextClosed from None
            raise WorkerStartError("failed to start Python worker: its input closed", context.started) from None

    async def run(
        self,
        context: Context,
        code: str,
        envs: dict[str, str],
        timeout: float,
        on_frame: OnFrame,
        start_at: float | None = None,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> ExecutionOutcome:
        """Run ``code`` in ``context``; frames stream to ``on_frame`` but for each stream's last one (``unsent`` in the
        outcome); raises :class:`InterpreterTimeout`.

        ``start_at``: the ``time.monotonic()`` before which the code must not start (an injected latency's end). The
        interpreter gets the code at once and waits by itself, so the code starts on time, with no message of ours
        in between; ``timeout`` counts from then. ``abandoned``: awaited once the code is sent, True if the client
        leaves before ``start_at``; the interpreter is then told to skip the code (``cancelled`` in the outcome).
        """
        async with context.lock:
            if not await self._ensure_running(context) and context.uid is not None:
                await hand_over(context.home, context.uid)  # a started process got it already
            process = context.process
            assert process is not None and process.stdin is not None and process.stdout is not None
            stdout = process.stdout
            nonce = uuid.uuid4().hex
            command: dict[str, Any] = {"code": code, "envs": envs, "nonce": nonce}
            if start_at is not None:
                command["start_at"] = start_at
                timeout = timeout + max(start_at - time.monotonic(), 0.0) if timeout > 0 else timeout
            line = json.dumps(command) + "\n"
            outcome = ExecutionOutcome(error=None)
            # The last chunk is held back a moment: when the end follows at once, the two leave together (sent one
            # turn of the event loop earlier, the frame woke the client, which then took the CPU from the server
            # before the end of the answer was written). The output of code killed at a timeout is sent from here.
            held: list[Frame] = []

            async def send_held() -> None:
                while held:
                    await on_frame(held.pop(0))

            def cancel_if_left(watch: asyncio.Future[bool]) -> None:
                if not watch.cancelled() and watch.exception() is None and watch.result():
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        process.stdin.write(json.dumps({"cancel": nonce}).encode() + b"\n")  # type: ignore[union-attr]

            async def finish() -> None:
                process.stdin.write(line.encode())  # type: ignore[union-attr]
                await process.stdin.drain()  # type: ignore[union-attr]
                if abandoned is not None:
                    watches.append(asyncio.ensure_future(abandoned()))
                    watches[0].add_done_callback(cancel_if_left)
                deaf = False  # the daemon's reader stopped at a line past its limit: nothing more is heard
                while True:
                    if held and not deaf:
                        try:
                            raw = await asyncio.wait_for(stdout.readline(), _HOLD_S)
                        except asyncio.TimeoutError:
                            await send_held()
                            continue
                    else:
                        raw = await stdout.readline()
                    if not raw:
                        # The process exited (the code ended it, or it was killed): the context starts afresh.
                        outcome.exited = True
                        outcome.unsent.extend(held)
                        held.clear()
                        if context.process is process:  # not a later one (this reader outlived its run)
                            self._stop(context)
                        return
                    if deaf:
                        continue  # until the timeout kills the process, as the daemon's would be
                    message = _message(raw)
                    if message is None:
                        continue  # no line of ours (the code wrote to our pipe): dropped, as the daemon drops it
                    kind = message.get("type")
                    if kind in ("stdout", "stderr"):
                        text = as_go_decodes(message.get("text"))
                        if not isinstance(text, str):
                            continue
                        (outcome.stdout_parts if kind == "stdout" else outcome.stderr_parts).append(text)
                        await send_held()
                        held.append({"type": kind, "text": text})
                    elif message.get("overflow") is True:
                        deaf = True
                        await send_held()
                    elif message.get("end") == nonce and _valid_error(message.get("error")):
                        outcome.error = message.get("error")
                        outcome.cancelled = bool(message.get("cancelled"))
                        outcome.interrupted = bool(message.get("interrupted"))
                        outcome.unsent.extend(held)
                        held.clear()
                        return

            watches: list[asyncio.Future[bool]] = []
            running = asyncio.ensure_future(finish())
            try:
                if timeout > 0 and not (await asyncio.wait({running}, timeout=timeout))[0]:
                    # The daemon's timeout: SIGINT to the worker, then a kill if the code has not ended by the grace.
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        process.send_signal(signal.SIGINT)
                    if not (await asyncio.wait({running}, timeout=self.settings.grace))[0]:
                        running.cancel()
                        raise InterpreterTimeout(list(held))
                await running
            except InterpreterTimeout:
                self._stop(context)
                raise
            except (ConnectionError, BrokenPipeError):
                self._stop(context)
                raise RuntimeError("interpreter process is gone") from None
            except BaseException:
                self._stop(context)
                raise
            finally:
                running.cancel()
                for watch in watches:
                    watch.cancel()
            return outcome


def _message(raw: bytes) -> dict[str, Any] | None:
    """A line of the driver's as a JSON object, or None when it is none."""
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _valid_error(error: Any) -> bool:
    """An end's error: null or ``{name, value, traceback}``, each a string."""
    return error is None or (
        isinstance(error, dict) and all(isinstance(error.get(key), str) for key in ("name", "value", "traceback"))
    )


#: The environment the driver starts with, as the emulator's user: nothing of the sandbox's; a UTF-8 locale, so that
#: the interpreter is not in the UTF-8 mode a bare C locale would set.
STARTING_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def driver_setup(env: dict[str, str], cwd: str) -> bytes:
    """The driver's first line: the environment and directory it takes once it runs as the sandbox's uid."""
    return json.dumps({"env": env, "cwd": cwd}, ensure_ascii=True).encode("ascii") + b"\n"


def _bin_dir(python: str) -> str:
    return os.path.dirname(os.path.abspath(python))


def _is_dir(path: str) -> bool:
    return os.path.isdir(path)
