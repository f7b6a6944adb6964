"""Daytona sessions, each a live shell as the daemon keeps it (``pkg/session``).

A session's shell starts when the session is created and lives until it is deleted (or its sandbox stops): a bash
reading its commands on its stdin, under a uid of the interpreter pool held for the session's life (the sandbox's
home is handed to it, see ``HOLDERS``), with the interpreter's rlimits, in a process group of its own. Each command
is fed to it wrapped as the daemon wraps it (see :mod:`.session_shell`), so the shell keeps what its commands change,
background jobs included, and runs the commands one after the other (an asynchronous one holds it until it ends).

The shell writes the log lines and exit records to two FIFOs in the session's directory, which belongs to the
emulator (``<sandbox root>/run/session-<token>``, mode 0711, its FIFOs the session uid's, mode 0600): the emulator
never opens a file the sandbox could have replaced. The log is kept in memory as it comes, up to ``log_limit`` bytes
a command (the daemon's is a file with no bound), so ``logs`` shows a running command's output so far and a
``follow`` WebSocket streams it.

As on the daemon, a synchronous command has no timeout (the client's own bounds the wait), a command that ends the
shell (``exit``) never ends (nor does any later one: writing to the dead shell fails), and deleting a session sends
SIGTERM to its process group and SIGKILL after ``grace`` seconds if the shell is still there, which it is once it
has run a command (the wrapper's traps catch SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import stat
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import session_shell
from .errors import ApiError

#: The bash each session runs (the daemon's ``GetShell()``; the emulator's sandboxes have bash).
BASH = "/bin/bash"
_NOGROUP = 65534


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
    #: Set when the exit record came; a follower's wake-up is :attr:`changed`, replaced at each change.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: The emulator's end of an asynchronous command's stdin FIFO (the writer that keeps it open for ``input``).
    stdin_fd: int | None = None
    paths: session_shell.CommandPaths | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "command": self.command}
        if self.exit_code is not None:
            data["exitCode"] = self.exit_code
        return data

    def text(self) -> str:
        """The log as the daemon's JSON and text answers carry it (invalid UTF-8 replaced, as Go's encoder does)."""
        return self.log.decode("utf-8", "replace")

    def wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


#: The longest exit record (a command id and an exit code are far shorter).
_RECORD_MAX = 256


class LogChannel:
    """One of a session's two FIFOs the shell's labelers append to: lines to the running command's log, and on the
    stdout channel the exit records. A log line goes on as it comes, however long; what starts a line is looked at
    until it is known not to be an exit record."""

    def __init__(self, fd: int, on_data: Callable[[bytes], None], on_exit: Callable[[bytes], None] | None) -> None:
        self.fd = fd
        self._on_data = on_data
        self._on_exit = on_exit
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
            if self._on_exit is not None and session_shell.EXIT_PREFIX.startswith(head):
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
                self._on_exit(record)
                continue
            data, self._in_line = bytes(self._start), True
            self._start.clear()

    def drain(self) -> None:
        """Read what the FIFO holds now (what the shell wrote before its last record)."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not chunk:
                return
            self.feed(chunk)


@dataclass(eq=False)
class Session:
    id: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    commands: dict[str, SessionCommand] = field(default_factory=dict)
    #: Commands sent to the shell and not ended yet, in the order it runs them: the first one's is the log.
    queue: deque[SessionCommand] = field(default_factory=deque)
    directory: str = ""
    home: str = ""
    uid: int | None = None
    process: asyncio.subprocess.Process | None = None
    channels: list[LogChannel] = field(default_factory=list)
    log_limit: int = 64 * 1024 * 1024
    deleted: bool = False
    #: Set once the session is deleted or its sandbox stops: what waits on its commands stops waiting.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    gone_reason: str = "session"  # "session": deleted; "sandbox": its sandbox stopped or went

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.id, "commands": [c.to_json() for c in self.commands.values()]}

    @property
    def shell_alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    # ------------------------------------------------------------------ the channels

    def _append(self, data: bytes) -> None:
        if not self.queue:
            return  # written between commands (by a job of an earlier one, through the channel's path): nobody's
        command = self.queue[0]
        room = self.log_limit - len(command.log)
        if room > 0:
            command.log += data[:room]
            command.wake()

    def _exit_record(self, record: bytes) -> None:
        parts = record.split(b" ")
        if len(parts) != 2:
            return
        command_id = parts[0].decode("ascii", "replace")
        try:
            code = int(parts[1])
        except ValueError:
            return
        for channel in self.channels[1:]:
            channel.drain()  # the stderr labeler ended before the record was written: all it wrote is there
        for command in list(self.queue):
            if command.id == command_id:
                self.queue.remove(command)
                self._finish(command, code)
                return

    def _finish(self, command: SessionCommand, code: int) -> None:
        command.exit_code = code
        _close(command.stdin_fd)
        command.stdin_fd = None
        if command.paths is not None:
            for path in command.paths.all():
                with contextlib.suppress(OSError):
                    os.unlink(path)
        command.done.set()
        command.wake()

    def readable(self, channel: LogChannel) -> None:
        try:
            data = os.read(channel.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            asyncio.get_running_loop().remove_reader(channel.fd)
            return
        if data:
            channel.feed(data)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _fifo(path: str, uid: int | None) -> None:
    os.mkfifo(path, 0o600)
    if uid is not None:
        os.chown(path, uid, _NOGROUP)


@dataclass(frozen=True)
class ShellStart:
    """What a session's shell needs to start: the interpreter's driver and settings, a uid lease, the env."""

    python: str
    driver: str
    limits: Callable[[int | None], dict[str, int]]
    lease: Callable[[str], Any]  # async (home) -> uid | None
    release: Callable[[str, int | None], None]


class SessionShells:
    """The live shells of one emulator's sessions."""

    def __init__(self, start: ShellStart, grace: float = 5.0, log_limit: int = 64 * 1024 * 1024) -> None:
        self._start = start
        self.grace = grace
        self.log_limit = log_limit
        self._waiters: set[asyncio.Task[Any]] = set()

    async def open(self, session: Session, root: str, home: str, env: dict[str, str]) -> None:
        """Start ``session``'s shell in ``home`` (the daemon starts it when the session is created)."""
        session.home = home
        session.log_limit = self.log_limit
        session.directory = os.path.join(root, "run", f"session-{session.token}")
        os.makedirs(session.directory, 0o711, exist_ok=True)
        os.chmod(session.directory, 0o711)
        uid = await self._start.lease(home)
        session.uid = uid
        try:
            for path in (_channel_path(session, 0), _channel_path(session, 1)):
                _fifo(path, uid)
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)  # never an end of file: ours writes too
                session.channels.append(
                    LogChannel(fd, session._append, session._exit_record if not session.channels else None)
                )
            loop = asyncio.get_running_loop()
            for channel in session.channels:
                loop.add_reader(channel.fd, session.readable, channel)
            session.process = await asyncio.create_subprocess_exec(
                self._start.python,
                self._start.driver,
                json.dumps(self._start.limits(uid)),
                "-" if uid is None else str(uid),
                str(_NOGROUP),
                "--exec",
                BASH,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,  # the daemon's shell has no stdout or stderr of its own
                stderr=asyncio.subprocess.DEVNULL,
                cwd=home,
                env=env,
                start_new_session=True,
            )
        except BaseException:
            self._release(session, kill=True)
            raise
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
            raise ApiError(500, "failed to execute command: failed to write command: write |1: broken pipe")
        base = os.path.join(session.directory, command.id)
        paths = session_shell.CommandPaths(base + ".sh", base + ".stdout", base + ".stderr", base + ".stdin")
        command.paths = paths
        try:
            fd = os.open(paths.script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, text.encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
            for path in (paths.stdout, paths.stderr, paths.stdin):
                _fifo(path, session.uid)
            if run_async:  # the writer that keeps the command's stdin open, for ``input``
                command.stdin_fd = os.open(paths.stdin, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ApiError(400, f"failed to execute command: failed to create log file: {exc}") from None
        script = session_shell.wrapper(
            command.id, paths, _channel_path(session, 0), _channel_path(session, 1), run_async
        )
        session.queue.append(command)
        try:
            process.stdin.write(script.encode("utf-8", "surrogateescape"))
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            session.queue.remove(command)
            raise ApiError(500, "failed to execute command: failed to write command: write |1: broken pipe") from None
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
        """``POST .../input`` as the daemon's ``SendInput``: to the command's stdin FIFO, a newline added, echoed in
        the log as stdout unless the command suppresses it."""
        if not session.shell_alive:
            raise ApiError(410, "session process has exited")
        if command.exit_code is not None:
            raise ApiError(410, f"command has already completed with exit code {command.exit_code}")
        if not data.endswith("\n"):
            data += "\n"
        payload = data.encode("utf-8", "surrogateescape")
        paths = command.paths
        if paths is None:
            raise ApiError(500, "failed to open input pipe: no such file or directory")
        try:
            fd = await asyncio.to_thread(_open_fifo, paths.stdin)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ApiError(500, f"failed to open input pipe: open {paths.stdin}: {reason.lower()}") from None
        # Echoed before it is written (the daemon echoes right after): in the log ahead of what the command answers.
        if not command.suppress_input_echo:
            room = session.log_limit - len(command.log)
            if room > 0:
                command.log += (session_shell.STDOUT_PREFIX.encode() + payload)[:room]
                command.wake()
        try:
            await asyncio.to_thread(_write_all, fd, payload)
        except OSError as exc:
            raise ApiError(500, f"failed to write to input pipe: write {paths.stdin}: {exc.strerror}") from None
        finally:
            os.close(fd)

    async def delete(self, session: Session) -> None:
        """As the daemon's ``Delete``: SIGTERM to the shell's process group, SIGKILL after the grace period if the
        shell is still there; then what waits on its commands stops, and its directory goes."""
        process = session.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), self.grace)
        self._release(session, kill=True)

    def drop(self, session: Session) -> None:
        """The sandbox stopped or went: the shell and all it started are killed at once."""
        session.gone_reason = "sandbox"
        self._release(session, kill=True)

    def _release(self, session: Session, kill: bool) -> None:
        session.deleted = True
        process = session.process
        if kill and process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if process is not None and process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for channel in session.channels:
                loop.remove_reader(channel.fd)
        for channel in session.channels:
            _close(channel.fd)
        session.channels.clear()
        for command in session.commands.values():
            _close(command.stdin_fd)
            command.stdin_fd = None
        uid, session.uid = session.uid, None
        self._start.release(session.home, uid)
        if session.directory:
            shutil.rmtree(session.directory, ignore_errors=True)
        session.cancelled.set()
        for command in session.commands.values():
            command.wake()


def _channel_path(session: Session, index: int) -> str:
    return os.path.join(session.directory, ("stdout.channel", "stderr.channel")[index])


def _open_fifo(path: str) -> int:
    """A blocking writer of the FIFO at ``path`` (the emulator's own directory's); ENXIO when nothing reads it."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a FIFO")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, payload: bytes) -> None:
    """All of ``payload``, waiting while the FIFO is full, as the daemon's write does."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]


__all__ = ["BASH", "LogChannel", "Session", "SessionCancelled", "SessionCommand", "SessionShells", "ShellStart"]
