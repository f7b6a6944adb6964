"""Daytona sessions, each a live shell as the daemon keeps it (``pkg/session``).

A session's shell starts when the session is created and lives until it is deleted (or its sandbox stops): a bash
reading its commands on its stdin, under a uid of the interpreter pool held for the session's life (the sandbox's
home is handed to it before each command, see ``HOLDERS``), with the interpreter's rlimits, in a process group of its
own. Each command is fed to it wrapped as the daemon wraps it (see :mod:`.session_shell`), so the shell keeps what its
commands change, background jobs included, and runs the commands one after the other (an asynchronous one holds it
until it ends).

The shell writes the log lines and records to two pipes the emulator reads (descriptors 3 and 4 of the shell) and
reads an asynchronous command's input from a third (5): no path a program could open. The log is kept in memory as
it comes, up to ``log_limit`` bytes a command (the daemon's is a file with no bound), so ``logs`` shows a running
command's output so far and a ``follow`` WebSocket streams it.

As on the daemon, a synchronous command has no timeout (the client's own bounds the wait), a command that ends the
shell (``exit``) never ends (nor does any later one: writing to the dead shell fails), and deleting a session sends
SIGTERM to its process group, waits until the shell has no child left (checked every 0.1 s) or ``grace`` seconds
have passed, then kills what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import math
import os
import shutil
import signal
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import session_shell
from .config import OUTPUT_LIMIT
from .errors import ApiError
from .interpreter import STARTING_ENV, UidsExhausted, go_start_error

#: The bash each session runs (the daemon's ``GetShell()``; the emulator's sandboxes have bash).
BASH = "/bin/bash"
_NOGROUP = 65534
#: How often a deletion looks whether the shell's children are gone (the daemon's ``TerminationCheckInterval``).
CHECK_INTERVAL_S = 0.1
#: The longest record (a command id and an exit code are far shorter).
_RECORD_MAX = 256


class SessionCancelled(Exception):
    """The session was deleted while a command was awaited (the daemon: ``session cancelled``)."""


@dataclass(eq=False)
class SessionCommand:
    id: str
    command: str
    run_async: bool = False
    suppress_input_echo: bool = False
    exit_code: int | None = None
    log: bytearray = field(default_factory=bytearray)
    #: Set when the command has ended (its exit record and both labelers' ends came); a follower's wake-up is
    #: :attr:`changed`, replaced at each change.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Which channels (0: stdout, 1: stderr) have said the command's output on them ended, and its exit record.
    ended: list[bool] = field(default_factory=lambda: [False, False])
    code: int | None = None
    script: str = ""
    #: A synchronous command's stdin: a FIFO (see ``session_shell.wrapper``); removed when the command ends.
    fifo: str = ""
    #: The daemon keeps a command's exit code once something read it (a listing, a get, the synchronous answer):
    #: until then, input to a command that has ended looks for its removed pipe (a 500), not a 410.
    exit_recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "command": self.command}
        if self.exit_code is not None:
            data["exitCode"] = self.exit_code
        return data

    def read(self) -> dict[str, Any]:
        """The command as the daemon's ``GetSessionCommand`` answers it (a get, its session's, a listing), which
        keeps the exit code it finds: from then on, input to the command is a 410."""
        if self.exit_code is not None:
            self.exit_recorded = True
        return self.to_json()

    def text(self) -> str:
        """The log as the daemon's JSON and text answers carry it (invalid UTF-8 replaced, as Go's encoder does)."""
        return self.log.decode("utf-8", "replace")

    def wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class LogChannel:
    """One of the two pipes the shell's labelers and script write to: log lines to the command whose output the
    channel carries, and records. A log line goes on as it comes, however long; what starts a line is looked at until
    it is known not to be a record."""

    def __init__(self, fd: int, on_data: Callable[[bytes], None], on_record: Callable[[bytes], None]) -> None:
        self.fd = fd
        self._on_data = on_data
        self._on_record = on_record
        self._start = bytearray()  # the start of a line not yet known to be a log line
        self._in_line = False  # in a log line: everything up to its newline is the log's

    def feed(self, data: bytes) -> None:
        while data:
            if self._in_line:
                end = data.find(b"\n")
                if end < 0:
                    self._on_data(data)
                    return
                self._on_data(data[: end + 1])
                data = data[end + 1 :]
                self._in_line = False
                continue
            self._start += data
            data = b""
            head = bytes(self._start[:3])
            if session_shell.RECORD_PREFIX.startswith(head):
                end = self._start.find(b"\n")
                if len(head) < 3 or end < 0 or end > _RECORD_MAX:
                    if len(self._start) > _RECORD_MAX:  # no record is that long: a line of the sandbox's own
                        data, self._in_line = bytes(self._start), True
                        self._start.clear()
                        continue
                    return
                record = bytes(self._start[3:end])
                data = bytes(self._start[end + 1 :])
                self._start.clear()
                self._on_record(record)
                continue
            data, self._in_line = bytes(self._start), True
            self._start.clear()


@dataclass(eq=False)
class Session:
    id: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    commands: dict[str, SessionCommand] = field(default_factory=dict)
    #: Commands sent to the shell and not ended yet, in the order it runs them.
    queue: deque[SessionCommand] = field(default_factory=deque)
    directory: str = ""
    home: str = ""
    uid: int | None = None
    process: asyncio.subprocess.Process | None = None
    channels: list[LogChannel] = field(default_factory=list)
    #: The emulator's ends of the input pipe (the shell's descriptor 5): written to, and drained of what a command
    #: left unread when it ends.
    input_w: int | None = None
    input_r: int | None = None
    input_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    log_limit: int = OUTPUT_LIMIT
    deleted: bool = False
    #: Set once the session is deleted or its sandbox stops: what waits on its commands stops waiting.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    gone_reason: str = "session"  # "session": deleted; "sandbox": its sandbox stopped or went

    def read(self, order: Callable[[list[SessionCommand]], list[SessionCommand]] = list) -> dict[str, Any]:
        """The session as the daemon answers it, each command read (see :meth:`SessionCommand.read`); ``order``
        puts the commands in the order they are listed in (the daemon's is a Go map's)."""
        return {"sessionId": self.id, "commands": [c.read() for c in order(list(self.commands.values()))]}

    @property
    def shell_alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    # ------------------------------------------------------------------ the channels

    def _writing(self, channel: int) -> SessionCommand | None:
        """The command whose output ``channel`` carries now: the first one it has not said the end of."""
        for command in self.queue:
            if not command.ended[channel]:
                return command
        return None

    def append(self, channel: int, data: bytes) -> None:
        command = self._writing(channel)
        if command is None:
            return  # written outside any command (through a descriptor a job kept): nobody's
        room = self.log_limit - len(command.log)
        if room > 0:
            command.log += data[:room]
            command.wake()

    def record(self, channel: int, record: bytes) -> None:
        parts = record.decode("ascii", "replace").split(" ")
        if parts[0] == "E" and len(parts) == 2:
            command = self._writing(channel)
            if command is not None and command.id == parts[1]:
                command.ended[channel] = True
        elif parts[0] == "X" and len(parts) == 3 and channel == 0:
            command = self._writing(channel)
            if command is not None and command.id == parts[1]:
                with contextlib.suppress(ValueError):
                    command.code = int(parts[2])
                    command.ended[channel] = True
        else:
            return
        self._finish_ended()

    def _finish_ended(self) -> None:
        while self.queue and all(self.queue[0].ended) and self.queue[0].code is not None:
            command = self.queue.popleft()
            command.exit_code = command.code
            _unlink(command.script, command.fifo)
            self._drain_input()
            command.done.set()
            command.wake()

    def _drain_input(self) -> None:
        """What the ended command left unread of its input goes (the daemon's FIFO went with the command)."""
        if self.input_r is None:
            return
        with contextlib.suppress(OSError):
            while os.read(self.input_r, 65536):
                pass

    def readable(self, index: int) -> None:
        channel = self.channels[index]
        try:
            data = os.read(channel.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # every writer closed: the shell and all it started are gone
            asyncio.get_running_loop().remove_reader(channel.fd)
            return
        channel.feed(data)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass(frozen=True)
class ShellStart:
    """What a session's shell needs to start: the interpreter's driver and settings, and a uid lease."""

    python: str
    driver: str
    limits: Callable[[int | None], dict[str, int]]
    lease: Callable[[str], Any]  # async (home) -> uid | None: a uid held until release, the home handed to it
    release: Callable[[str, int | None, bool], None]  # (home, uid, a process ran as it)
    setup: Callable[[dict[str, str], str], bytes]  # the driver's first line: env and cwd
    hand_over: Callable[[str, int], Any]  # async (home, uid): the home to that uid again


class SessionShells:
    """The live shells of one emulator's sessions."""

    def __init__(self, start: ShellStart, grace: float = 5.0, log_limit: int = OUTPUT_LIMIT) -> None:
        if not (isinstance(grace, (int, float)) and 0 <= grace < math.inf):  # NaN too
            raise ValueError(f"session_termination_grace must be a number of seconds >= 0, not {grace!r}")
        if not isinstance(log_limit, int) or log_limit < 0:
            raise ValueError(f"session_log_limit must be a number of bytes >= 0, not {log_limit!r}")
        self._start = start
        self.grace = grace
        self.log_limit = log_limit
        self._waiters: set[asyncio.Task[Any]] = set()

    async def open(self, session: Session, root: str, home: str, env: dict[str, str]) -> None:
        """Start ``session``'s shell in ``home`` (the daemon starts it when the session is created)."""
        session.home = home
        session.log_limit = self.log_limit
        session.directory = os.path.join(root, "run", f"session-{session.token}")
        loose: list[int] = []  # descriptors made and not yet the session's (closed here if the start fails)
        try:
            os.makedirs(session.directory, 0o711, exist_ok=True)
            session.uid = await self._start.lease(home)
            ends: list[int] = []
            child: list[int] = []
            for _ in range(2):
                read, write = os.pipe2(os.O_CLOEXEC)
                loose += (read, write)
                os.set_blocking(read, False)
                ends.append(read)
                child.append(write)
            read, write = os.pipe2(os.O_CLOEXEC)
            loose.append(read)
            child.append(read)
            session.input_w = write
            # Our own reader of the input pipe, non-blocking without making the shell's reader so too (its own
            # open file description).
            session.input_r = os.open(f"/proc/self/fd/{read}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(write, False)
            for index, fd in enumerate(ends):
                session.channels.append(
                    LogChannel(
                        fd,
                        lambda data, i=index: session.append(i, data),  # type: ignore[misc]
                        lambda record, i=index: session.record(i, record),  # type: ignore[misc]
                    )
                )
                loose.remove(fd)
            try:
                session.process = await asyncio.create_subprocess_exec(
                    self._start.python,
                    "-I",
                    self._start.driver,
                    json.dumps(self._start.limits(session.uid)),
                    "-" if session.uid is None else str(session.uid),
                    str(_NOGROUP),
                    "--exec",
                    BASH,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.DEVNULL,  # the daemon's shell has no stdout or stderr of its own
                    stderr=asyncio.subprocess.DEVNULL,
                    cwd="/",
                    env=STARTING_ENV,  # the sandbox's env and cwd come on the first line, taken after the uid change
                    pass_fds=child,
                    start_new_session=True,
                )
            finally:
                for fd in child:
                    _close(fd)
                    loose.remove(fd)
            assert session.process.stdin is not None
            setup = json.loads(self._start.setup(env, home))
            setup["fds"] = child
            session.process.stdin.write(json.dumps(setup).encode("ascii") + b"\n")
            loop = asyncio.get_running_loop()
            for index, channel in enumerate(session.channels):
                loop.add_reader(channel.fd, session.readable, index)
        except OSError as error:  # descriptors or processes run out: the daemon's 500 with Go's words
            said = go_start_error(error, BASH)  # before anything is closed: it may look at what is left
            self._release(session, loose)
            raise ApiError(500, said) from None
        except UidsExhausted as exhausted:
            self._release(session, loose)
            raise ApiError(500, f"fork/exec {BASH}: {exhausted}") from None
        except BaseException:
            self._release(session, loose)
            raise
        if session.deleted:  # deleted (its sandbox stopped) while the shell started: it must not run on
            self._release(session)
            return
        waiter = asyncio.ensure_future(session.process.wait())
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)

    async def execute(self, session: Session, text: str, run_async: bool, suppress_input_echo: bool) -> SessionCommand:
        """Send one command to the shell; it is listed (with no exit code) even when the shell is gone, as the
        daemon lists it before its write fails."""
        command = SessionCommand(str(uuid.uuid4()), text, run_async, suppress_input_echo)
        session.commands[command.id] = command
        process = session.process
        if process is None or process.stdin is None or not session.shell_alive:
            raise ApiError(
                500, "failed to execute command: bad request: failed to write command: write |1: broken pipe"
            )
        command.script = os.path.join(session.directory, command.id + ".sh")
        try:
            fd = os.open(command.script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, text.encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
            if not run_async:
                command.fifo = os.path.join(session.directory, command.id + ".in")
                os.mkfifo(command.fifo, 0o600)
                if session.uid is not None:
                    os.chown(command.fifo, session.uid, _NOGROUP)
        except OSError as exc:
            _unlink(command.script, command.fifo)
            raise ApiError(
                500, f"failed to execute command: bad request: failed to write command file: {exc.strerror}"
            ) from None
        if session.uid is not None:  # another holder (a second session, a context) may have the home meanwhile
            await self._start.hand_over(session.home, session.uid)
        session.queue.append(command)
        try:
            wrapped = session_shell.wrapper(command.id, command.script, run_async, command.fifo)
            process.stdin.write(wrapped.encode("utf-8"))
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            session.queue.remove(command)
            _unlink(command.script, command.fifo)
            raise ApiError(
                500, "failed to execute command: bad request: failed to write command: write |1: broken pipe"
            ) from None
        return command

    async def wait(self, session: Session, command: SessionCommand) -> None:
        """Until ``command`` ends; :class:`SessionCancelled` if its session is deleted first."""
        if command.done.is_set():
            return
        done = asyncio.ensure_future(command.done.wait())
        cancelled = asyncio.ensure_future(session.cancelled.wait())
        try:
            await asyncio.wait({done, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
            cancelled.cancel()
        if not command.done.is_set():
            raise SessionCancelled(session.gone_reason)

    async def send_input(self, session: Session, command: SessionCommand, data: str) -> None:
        """``POST .../input`` as the daemon's ``SendInput``: to the command's stdin, a newline added, echoed in the
        log as stdout unless the command suppresses it. A command has a stdin to write to while the shell runs it
        (the daemon's FIFO exists from the command's start to its end): an asynchronous one reads it as it comes, a
        synchronous one finds it at its end and gets what is sent at a later read. A command that has ended is a 410
        once its exit code was read (the daemon keeps it then), else its pipe is gone (500)."""
        if command.exit_code is not None and command.exit_recorded:
            # The code the SDK 0.226 raises DaytonaCommandAlreadyCompletedError for (the daemon at 8b6f9b14a: GONE).
            message = f"gone: command has already completed with exit code {command.exit_code}"
            raise ApiError(410, message, "COMMAND_ALREADY_COMPLETED")
        if not data.endswith("\n"):
            data += "\n"
        payload = data.encode("utf-8", "surrogateescape")
        running = bool(session.queue) and session.queue[0] is command and session.shell_alive
        if not running or (command.run_async and session.input_w is None):
            raise ApiError(500, f"internal server error: failed to open input pipe: {_no_pipe(session, command)}")
        if command.run_async:
            self._echo(session, command, payload)
            async with session.input_lock:
                if session.input_w is not None:
                    pipe = _pipe_path(session, command)
                    await _write_while(session.input_w, payload, command.done, session.cancelled, pipe=pipe)
            return
        async with session.input_lock:  # one input at a time, as on the asynchronous path: echoes in write order
            fd = await _open_fifo(command.fifo, command.done, session.cancelled, lambda: session.shell_alive)
            if fd is None:  # the command (or its shell) ended before it opened its stdin: its pipe went with it
                raise ApiError(500, f"internal server error: failed to open input pipe: {_no_pipe(session, command)}")
            try:
                self._echo(session, command, payload)
                await _write_while(
                    fd,
                    payload,
                    command.done,
                    session.cancelled,
                    released_with_session=False,
                    pipe=_pipe_path(session, command),
                )
            finally:
                _close(fd)

    @staticmethod
    def _echo(session: Session, command: SessionCommand, payload: bytes) -> None:
        """The input in the log as stdout (the daemon echoes right after its write; here just before it, so that it
        is there ahead of any answer to it), unless the command suppresses it."""
        if command.suppress_input_echo:
            return
        room = session.log_limit - len(command.log)
        if room > 0:
            command.log += (session_shell.STDOUT_PREFIX.encode() + payload)[:room]
            command.wake()

    async def delete(self, session: Session) -> None:
        """As the daemon's ``Delete``: SIGTERM to the shell's process group, then, once the shell has no child left
        (looked at every 0.1 s) or after the grace period, SIGKILL to what is left; then what waits on its commands
        stops, and its directory goes."""
        process = session.process
        if process is not None:  # the group outlives a shell that exited while its jobs run
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.grace
            for _tick in range(math.ceil(self.grace / CHECK_INTERVAL_S)):  # the daemon's ticker
                if not _has_children(process.pid) or loop.time() >= deadline:
                    break
                await asyncio.sleep(min(CHECK_INTERVAL_S, max(deadline - loop.time(), 0.0)))
        self._release(session)

    def drop(self, session: Session) -> None:
        """The sandbox stopped or went: the shell and all it started are killed at once."""
        session.gone_reason = "sandbox"
        self._release(session)

    def _release(self, session: Session, loose: list[int] | None = None) -> None:
        """End the session's shell and free what it holds (``loose``: descriptors of a start that failed midway)."""
        for fd in loose or ():
            _close(fd)
        session.deleted = True
        process = session.process
        if process is not None:  # the group outlives a shell that exited while its jobs run
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if process is not None and process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for channel in session.channels:
                loop.remove_reader(channel.fd)
            if session.input_w is not None:
                loop.remove_writer(session.input_w)  # before its number can be another session's
        for channel in session.channels:
            _close(channel.fd)
        session.channels.clear()
        _close(session.input_w)
        _close(session.input_r)
        session.input_w = session.input_r = None
        uid, session.uid = session.uid, None
        self._start.release(session.home, uid, process is not None)
        if session.directory:
            shutil.rmtree(session.directory, ignore_errors=True)
        session.cancelled.set()
        for command in session.commands.values():
            command.wake()


def _has_children(pid: int) -> bool:
    """Whether the process ``pid`` is there and has a child (the daemon's ``waitForTermination`` test)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return bool(f.read().strip())
    except OSError:
        return False


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _unlink(*paths: str) -> None:
    for path in paths:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _pipe_path(session: Session, command: SessionCommand) -> str:
    """Where the daemon's input pipe of ``command`` is (under its config dir, ``.daytona`` in the home that
    ``/user-home-dir`` reports): the path its errors name."""
    return os.path.join(session.home, ".daytona", "sessions", session.id, command.id, "input.pipe")


def _no_pipe(session: Session, command: SessionCommand) -> str:
    """Go's error for the daemon's input pipe of ``command`` where there is none."""
    return f"open {_pipe_path(session, command)}: no such file or directory"


#: How often a write to a synchronous command's stdin looks whether the command has opened it yet.
FIFO_RETRY_S = 0.005


async def _open_fifo(path: str, done: asyncio.Event, cancelled: asyncio.Event, alive: Callable[[], bool]) -> int | None:
    """The write end of a synchronous command's FIFO, once the command has its read end open (the daemon's open
    blocks until then); None if the command ends, its session goes or its shell dies first."""
    while not done.is_set() and not cancelled.is_set() and alive():
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                return None
        ending = asyncio.ensure_future(done.wait())
        going = asyncio.ensure_future(cancelled.wait())
        try:
            await asyncio.wait({ending, going}, timeout=FIFO_RETRY_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ending.cancel()
            going.cancel()
    return None


async def _write_while(
    fd: int,
    payload: bytes,
    done: asyncio.Event,
    cancelled: asyncio.Event,
    released_with_session: bool = True,
    pipe: str = "input.pipe",
) -> None:
    """All of ``payload`` to the non-blocking ``fd``, waiting while the pipe is full; given up when the command is
    ``done`` or its session ``cancelled`` (whose release closes ``fd`` when ``released_with_session``; the caller
    closes any other). A failed write is the daemon's 500, naming its ``pipe``."""
    loop = asyncio.get_running_loop()
    view = memoryview(payload)
    while view and not done.is_set() and not cancelled.is_set():
        try:
            view = view[os.write(fd, view) :]
            continue
        except BlockingIOError:
            pass
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)  # Go's words: write <path>: <errno>
            message = f"internal server error: failed to write to input pipe: write {pipe}: {reason}"
            raise ApiError(500, message) from None
        writable: asyncio.Future[None] = loop.create_future()
        loop.add_writer(fd, _settle, writable)
        ending = asyncio.ensure_future(done.wait())
        going = asyncio.ensure_future(cancelled.wait())
        try:
            waits: set[asyncio.Future[Any]] = {writable, ending, going}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not (cancelled.is_set() and released_with_session):  # else the release removed it and closed ``fd``
                loop.remove_writer(fd)
            ending.cancel()
            going.cancel()


__all__ = ["BASH", "LogChannel", "Session", "SessionCancelled", "SessionCommand", "SessionShells", "ShellStart"]
