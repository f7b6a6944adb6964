"""Our side of the zygote: start it, send spawn/kill requests, route its replies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger(__name__)

ZYGOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote_main.py")
_READY_TIMEOUT = 30.0
_RECV_SIZE = 1 << 16


class ZygoteLost(Exception):
    """The zygote died (or was closed) while a request was in flight."""


@dataclass
class Pending:
    """Futures of one in-flight spawn request."""

    started: asyncio.Future[int]
    exited: asyncio.Future[int]
    exited_at: float = 0.0
    pid: int | None = field(default=None)


class Zygote:
    """A running zygote process and the socket to it."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self._python = python
        self._env = dict(env)
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, Pending] = {}
        self._next_id = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._stderr_fd = -1
        self._stderr_tail = bytearray()
        self._outbox: list[tuple[bytes, list[int]]] = []
        self._writing = False
        self._ready: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._reaper: asyncio.Future[None] | None = None
        self.alive = False
        self.pid: int | None = None

    async def start(self) -> None:
        """Launch the zygote and wait until it has pre-imported and is serving."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = self._launch(theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        # Children reuse the zygote's sys.stdin object, so stdin must look like a pipe that
        # is not a tty; EOF right away.
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        self._stderr_fd = os.dup(self._proc.stdout.fileno())
        self._proc.stdout.close()
        os.set_blocking(self._stderr_fd, False)
        self._loop.add_reader(self._stderr_fd, self._on_stderr)
        ours.setblocking(False)
        self._sock = ours
        self.alive = True
        self._loop.add_reader(ours.fileno(), self._on_readable)
        try:
            info = await asyncio.wait_for(asyncio.shield(self._ready), _READY_TIMEOUT)
        except BaseException:
            await self.aclose()
            raise
        self.pid = int(info["pid"])
        _log.debug("zygote %s ready (python %s)", self.pid, info.get("version"))

    def _launch(self, fd: int) -> subprocess.Popen[bytes]:
        """Start the zygote process (a quick fork+exec; it signals readiness on the socket)."""
        return subprocess.Popen(
            [self._python, ZYGOTE_SCRIPT, str(fd)],
            pass_fds=[fd],
            stdin=subprocess.PIPE,
            # Pipes like a child's: forked children reuse the zygote's sys.std* objects.
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd="/",
            start_new_session=True,
        )

    # --- I/O ---------------------------------------------------------------------------

    def _on_stderr(self) -> None:
        """Forward the zygote's own stderr (it should stay silent) to our log."""
        try:
            data = os.read(self._stderr_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(self._stderr_fd)
            os.close(self._stderr_fd)
            self._stderr_fd = -1
            if self._stderr_tail:
                _log.warning("zygote stderr: %s", self._stderr_tail.decode(errors="replace"))
            return
        self._stderr_tail += data
        if len(self._stderr_tail) > 8192:
            del self._stderr_tail[:-8192]

    def _on_readable(self) -> None:
        assert self._sock is not None
        while self.alive:
            try:
                data = self._sock.recv(_RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._on_dead("zygote exited")
                return
            self._dispatch(json.loads(data))

    def _dispatch(self, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "ready":
            if not self._ready.done():
                self._ready.set_result(msg)
            return
        pending = self._pending.get(int(msg.get("id", -1)))
        if pending is None:
            return
        if op == "started":
            pending.pid = int(msg["pid"])
            if not pending.started.done():
                pending.started.set_result(pending.pid)
        elif op == "exited":
            pending.exited_at = time.monotonic()
            del self._pending[int(msg["id"])]
            if not pending.started.done():
                pending.started.set_result(-1)
            if not pending.exited.done():
                pending.exited.set_result(int(msg["rc"]))
        elif op == "spawn_failed":
            del self._pending[int(msg["id"])]
            exc = OSError(str(msg.get("error", "spawn failed")))
            for fut in (pending.started, pending.exited):
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()  # mark retrieved: one of them may never be awaited

    def _send(self, msg: dict[str, Any], fds: list[int]) -> None:
        """Queue one message (with fds, duplicated in transit) and flush what we can."""
        if not self.alive:
            raise ZygoteLost("zygote is not running")
        data = json.dumps(msg).encode()
        if self._outbox:
            self._outbox.append((data, [os.dup(fd) for fd in fds]))
            return
        try:
            self._send_now(data, fds)
        except (BlockingIOError, InterruptedError):
            self._outbox.append((data, [os.dup(fd) for fd in fds]))
            if not self._writing:
                self._writing = True
                assert self._sock is not None
                self._loop.add_writer(self._sock.fileno(), self._flush_outbox)

    def _send_now(self, data: bytes, fds: list[int]) -> None:
        assert self._sock is not None
        try:
            if fds:
                socket.send_fds(self._sock, [data], fds)
            else:
                self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            raise
        except OSError as exc:
            self._on_dead(f"send failed: {exc}")
            raise ZygoteLost(str(exc)) from exc

    def _flush_outbox(self) -> None:
        while self._outbox and self.alive:
            data, fds = self._outbox[0]
            try:
                self._send_now(data, fds)
            except (BlockingIOError, InterruptedError):
                return
            except ZygoteLost:
                return
            self._outbox.pop(0)
            for fd in fds:
                os.close(fd)
        self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing:
            self._writing = False
            if self._sock is not None:
                self._loop.remove_writer(self._sock.fileno())

    def _on_dead(self, why: str) -> None:
        """Fail every pending request and kill what we know of their process groups."""
        if not self.alive:
            return
        self.alive = False
        if why != "closed":
            _log.warning("zygote %s lost: %s", self.pid, why)
        self._stop_writing()
        for _data, fds in self._outbox:
            for fd in fds:
                os.close(fd)
        self._outbox.clear()
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if not self._ready.done():
            self._ready.set_exception(ZygoteLost(why))
            self._ready.exception()
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if item.pid is not None and item.pid > 0:
                # Children get SIGKILL via PDEATHSIG; this also reaches their groups.
                with contextlib.suppress(OSError):
                    os.killpg(item.pid, signal.SIGKILL)
            for fut in (item.started, item.exited):
                if not fut.done():
                    fut.set_exception(ZygoteLost(why))
                    fut.exception()
        if self._proc is not None and self._reaper is None:
            self._reaper = self._loop.run_in_executor(None, self._reap, self._proc)

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        """Collect the zygote's exit status; it exits by itself once its socket closes."""
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # --- API ---------------------------------------------------------------------------

    def spawn(self, msg: dict[str, Any], fds: list[int]) -> tuple[int, Pending]:
        """Send a spawn request; returns its id and futures."""
        req_id = self._next_id
        self._next_id += 1
        pending = Pending(self._loop.create_future(), self._loop.create_future())
        self._pending[req_id] = pending
        try:
            self._send({**msg, "op": "spawn", "id": req_id}, fds)
        except BaseException:
            self._pending.pop(req_id, None)
            raise
        return req_id, pending

    def kill(self, req_id: int) -> None:
        """Ask the zygote to SIGKILL the process group of a request (no-op if gone)."""
        if self.alive:
            with contextlib.suppress(ZygoteLost):
                self._send({"op": "kill", "id": req_id}, [])

    async def aclose(self) -> None:
        """Stop the zygote: it kills every child group when its socket closes."""
        self._on_dead("closed")
        if self._reaper is not None:
            await self._reaper
