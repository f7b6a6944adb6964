"""Our side of the zygote: start it, send spawn/kill requests, route its replies.

Frames (see ``zygote_main.py``) travel over one AF_UNIX stream socket. A frame is written as soon as it is made
(the zygote reads everything that is there when it wakes, so bursts still reach it in one read), and one read
takes every reply that is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger(__name__)

ZYGOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote_boot.py")
_READY_TIMEOUT = 30.0
_RECV_SIZE = 1 << 20
_HDR = struct.Struct("<II")
_STARTED = 0xFFFFFFFF  # binary replies: see zygote_main.py
_EXITED = 0xFFFFFFFE
_STARTED_BODY = struct.Struct("<qi")
_EXITED_BODY = struct.Struct("<qidBII")
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.loads


class ZygoteLost(Exception):
    """The zygote died (or was closed) while a request was in flight."""


@dataclass
class Reply:
    """The zygote's ``exited`` message: header fields and binary blobs."""

    msg: dict[str, Any]
    blobs: list[bytes]


@dataclass
class Pending:
    """Futures of one in-flight spawn request."""

    exited: asyncio.Future[Reply | None]  # None: we stopped waiting (see Executor)
    pid: int | None = field(default=None)
    #: Where the spawn request ends in the stream of bytes to the zygote: once that much is written, the zygote may
    #: have forked the program even if its ``started`` never reached us.
    frame_end: int = 0
    #: The work dir the zygote makes for the run and removes at its end (a one-shot run's), if any.
    workdir: str | None = None
    # Called once the zygote confirmed the end (True) or died (False), even if we stopped
    # waiting before.
    on_end: list[Callable[[bool], None]] = field(default_factory=list)

    def end(self, confirmed: bool) -> None:
        callbacks, self.on_end = self.on_end, []
        for callback in callbacks:
            callback(confirmed)


class Zygote:
    """A running zygote process and the socket to it."""

    def __init__(
        self, python: str, env: Mapping[str, str], private_tmp: str | None = None, join_ns: int | None = None
    ) -> None:
        """``private_tmp``: the temp root to see as a private tmpfs; ``join_ns``: an fd of the mount namespace that
        holds it, made by another zygote (a new one is made without; the fd stays the caller's)."""
        self._python = python
        self._env = dict(env)
        self._private_tmp = private_tmp
        self._join_ns = join_ns if private_tmp is not None else None
        #: The temp root that one-shot work dirs live on privately (a tmpfs in the zygote's own mount
        #: namespace), None when they are made on the host's.
        self.private_tmp: str | None = None
        #: Why not, when asked for: the zygote's reason, and whether no later start would do better.
        self.private_tmp_error = ""
        self.private_tmp_never = False
        #: The inode of its mount namespace (``/proc/<pid>/ns/mnt``), to tell an fd opened by pid is of this process.
        self.mnt_ns = 0
        #: Work dirs of the runs it had when it died: they stay in the shared private temp root until swept.
        self.orphaned_workdirs: list[str] = []
        self._loop = asyncio.get_running_loop()
        self._pending: dict[int, Pending] = {}
        #: Spawned children held before their program (see ``start_gate``): pending, but nothing of theirs runs.
        self.holding = 0
        #: Fast-path runs reported when their program ended, before the kernel had torn the process down (see
        #: ``_done_early`` in zygote_main): for tests and benchmarks.
        self.exits_before_teardown = 0
        self._next_id = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._fd = -1
        self._stderr_fd = -1
        self._stderr_tail = bytearray()
        self._inbuf = bytearray()
        self._outbuf = bytearray()
        self._queued = 0  # bytes ever queued for the zygote
        self._written = 0  # bytes of those written to its socket
        self._writing = False
        self._ready: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._reaper: asyncio.Future[None] | None = None
        self.alive = False
        self.pid: int | None = None

    @property
    def in_flight(self) -> int:
        """Runs spawned and not yet reported ended."""
        return len(self._pending)

    async def start(self) -> None:
        """Launch the zygote and wait until it is serving."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
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
        self._fd = ours.fileno()
        self.alive = True
        self._loop.add_reader(self._fd, self._on_readable)
        try:
            info = await asyncio.wait_for(asyncio.shield(self._ready), _READY_TIMEOUT)
        except BaseException:
            await self.aclose()
            raise
        self.pid = int(info["pid"])
        _log.debug("zygote %s ready (python %s)", self.pid, info.get("version"))
        self.mnt_ns = int(info.get("mnt_ns") or 0)
        if self._private_tmp is not None:
            if info.get("private_tmp") is True:
                self.private_tmp = self._private_tmp
            else:
                self.private_tmp_error = str(info.get("private_tmp"))
                self.private_tmp_never = bool(info.get("private_tmp_never"))

    def _launch(self, fd: int) -> subprocess.Popen[bytes]:
        """Start the zygote process (a quick fork+exec; it signals readiness on the socket)."""
        join = [] if self._join_ns is None else [str(self._join_ns)]
        return subprocess.Popen(
            [self._python, ZYGOTE_SCRIPT, str(fd), *([self._private_tmp, *join] if self._private_tmp else [])],
            pass_fds=[fd, *([] if self._join_ns is None else [self._join_ns])],
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
        buf = self._inbuf
        while self.alive:
            try:
                data = os.read(self._fd, _RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self._on_dead("zygote exited")
                return
            buf += data
            if len(data) < _RECV_SIZE:
                break
        pos = 0
        size = len(buf)
        hdr_size = _HDR.size
        while size - pos >= hdr_size and self.alive:
            body_len, head_len = _HDR.unpack_from(buf, pos)
            end = pos + hdr_size + body_len
            if end > size:
                break
            start = pos + hdr_size
            pos = end
            if head_len == _STARTED:
                req_id, pid = _STARTED_BODY.unpack_from(buf, start)
                pending = self._pending.get(req_id)
                if pending is not None:
                    pending.pid = pid
                continue
            blobs: list[bytes] = []
            if head_len == _EXITED:
                req_id, rc, at, flags, out_len, err_len = _EXITED_BODY.unpack_from(buf, start)
                offset = start + _EXITED_BODY.size
                blobs.append(bytes(buf[offset : offset + out_len]))
                blobs.append(bytes(buf[offset + out_len : offset + out_len + err_len]))
                msg: dict[str, Any] = {"op": "exited", "id": req_id, "rc": rc, "at": at, "removed": bool(flags & 1)}
                if flags & 2:
                    self.exits_before_teardown += 1
            else:
                msg = _loads(bytes(buf[start : start + head_len]))
                lengths = msg.get("b")
                if lengths:
                    offset = start + head_len
                    for length in lengths:
                        blobs.append(bytes(buf[offset : offset + length]))
                        offset += length
            self._dispatch(msg, blobs)
        del buf[:pos]

    def _dispatch(self, msg: dict[str, Any], blobs: list[bytes]) -> None:
        op = msg["op"]
        if op == "exited":
            pending = self._pending.pop(msg["id"], None)
            if pending is not None:
                if not pending.exited.done():
                    pending.exited.set_result(Reply(msg, blobs))
                if pending.on_end:
                    pending.end(True)
        elif op == "started":
            pending = self._pending.get(msg["id"])
            if pending is not None:
                pending.pid = msg["pid"]
        elif op == "ready":
            if not self._ready.done():
                self._ready.set_result(msg)
        elif op == "spawn_failed":
            pending = self._pending.pop(msg["id"], None)
            if pending is not None:
                if not pending.exited.done():
                    pending.exited.set_exception(OSError(str(msg.get("error", "spawn failed"))))
                pending.end(True)

    def _send(self, msg: dict[str, Any], blobs: Sequence[bytes] = ()) -> None:
        """Write one frame now (or queue it behind a write the socket could not take yet).

        Written at once rather than once per loop iteration: when a burst of requests arrives, the server spends
        about 0.2 ms on each before its spawn, and held until the iteration's end the first spawn waited for the
        whole burst (some 20 ms at 128) while the zygote's core sat idle. Sent one by one, the zygote forks while
        the server parses the rest; the zygote still forks whatever has queued up meanwhile in one run.
        """
        if not self.alive:
            raise ZygoteLost("zygote is not running")
        if blobs:
            msg["b"] = [len(b) for b in blobs]
        head = _dumps(msg).encode()
        out = self._outbuf
        size = len(head) + sum(len(b) for b in blobs)
        out += _HDR.pack(size, len(head))
        out += head
        for blob in blobs:
            out += blob
        self._queued += _HDR.size + size
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        out = self._outbuf
        while out and self.alive:
            try:
                n = os.write(self._fd, out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._on_dead(f"send failed: {exc}")
                return
            del out[:n]
            self._written += n
        want = bool(out) and self.alive
        if want != self._writing:
            self._writing = want
            if want:
                self._loop.add_writer(self._fd, self._flush)
            else:
                self._loop.remove_writer(self._fd)

    def _on_dead(self, why: str) -> None:
        """Fail every pending request and kill what we know of their process groups."""
        if not self.alive:
            return
        self.alive = False
        if why != "closed":
            _log.warning("zygote %s lost: %s", self.pid, why)
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        self._outbuf.clear()
        if self._sock is not None:
            self._loop.remove_reader(self._fd)
            self._sock.close()
            self._sock = None
        if not self._ready.done():
            self._ready.set_exception(ZygoteLost(why))
            self._ready.exception()
        pending, self._pending = self._pending, {}
        # Only a run that may have started has its dir made (a run never sent whole is tried again under its name).
        self.orphaned_workdirs = [
            item.workdir
            for item in pending.values()
            if item.workdir is not None and (item.pid is not None or item.frame_end <= self._written)
        ]
        for item in pending.values():
            if item.pid is not None and item.pid > 0:
                # Children get SIGKILL via PDEATHSIG; this also reaches their groups.
                with contextlib.suppress(OSError):
                    os.killpg(item.pid, signal.SIGKILL)
            if not item.exited.done():
                # A request the zygote had whole may have started its program, its ``started`` unsent or unread:
                # only one it never had is safe to run again.
                started = item.pid is not None or item.frame_end <= self._written
                item.exited.set_exception(ZygoteLost("started" if started else "not started"))
                item.exited.exception()
            item.end(False)
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

    def spawn(self, msg: dict[str, Any], blobs: Sequence[bytes]) -> tuple[int, Pending]:
        """Send a spawn request; returns its id and futures."""
        req_id = self._next_id
        self._next_id += 1
        pending = Pending(self._loop.create_future())
        msg["op"] = "spawn"
        msg["id"] = req_id
        self._send(msg, blobs)
        if not self.alive:  # the write failed: the zygote never had the request whole
            raise ZygoteLost("not started")
        pending.frame_end = self._queued
        workdir = msg.get("dir")
        if workdir is not None:
            pending.workdir = workdir["path"]
        self._pending[req_id] = pending
        return req_id, pending

    def workdirs(self) -> list[str]:
        """The work dirs of the one-shot runs this zygote has not reported ended (it made them; it removes them)."""
        return [pending.workdir for pending in self._pending.values() if pending.workdir is not None]

    def sweep(self, keep: Collection[str], age: float, drop: Collection[str] = ()) -> None:
        """Have the zygote remove what programs left in its private temp root that nothing changed for ``age``
        seconds, but for the work dirs named in ``keep`` (those of other zygotes sharing the root) and its own; and
        the dirs named in ``drop`` (a dead zygote's work dirs) whatever their age."""
        if self.alive:
            with contextlib.suppress(ZygoteLost):
                self._send({"op": "sweep", "keep": sorted(keep), "age": age, "drop": sorted(drop)})

    def go(self, req_id: int) -> None:
        """Let a child spawned with ``hold`` start its program (no-op if gone)."""
        if self.alive:
            with contextlib.suppress(ZygoteLost):
                self._send({"op": "go", "id": req_id})

    def kill(self, req_id: int) -> None:
        """Ask the zygote to SIGKILL the process group of a request (no-op if gone)."""
        if self.alive:
            with contextlib.suppress(ZygoteLost):
                self._send({"op": "kill", "id": req_id})

    async def aclose(self) -> None:
        """Stop the zygote: it kills every child group when its socket closes."""
        self._on_dead("closed")
        if self._reaper is not None:
            await self._reaper
