"""Pipe capture that reproduces the real server's output quirks with real pipes.

The real server (asyncio StreamReader, read only after exit) returns output up to ~150 KB
complete, truncates ~300 KB to exactly 219264 chars with a normal finish, and blocks a child
writing ~1 MB or more on its full pipe until the timeout.  We keep at most ``KEEP_BYTES``
per stream, keep draining (and discarding) until ``ABSORB_BYTES`` were read, then stop
reading, so a bigger writer blocks on the full pipe exactly like on the real server (which
also contains ``while True: print()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

# Exact truncation length measured on the real server.
KEEP_BYTES = 219264
# Total bytes we read per stream before we stop reading.  Real server: 300 KB finishes,
# 1 MB blocks.  448 KiB + the 64 KiB pipe buffer = 512 KiB that a child can write before
# it blocks, safely between the two measured points.
ABSORB_BYTES = 448 * 1024
_CHUNK = 65536


def decode_output(data: bytes) -> str:
    """Decode like the real server: the whole stream is replaced on a UTF-8 error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"[DecodeError] {exc}"


class StreamCapture:
    """Reads one non-blocking pipe end on the event loop within the keep/absorb budgets."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._kept = bytearray()
        self._absorbed = 0
        self._done: asyncio.Future[None] = loop.create_future()
        self._reading = True
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    @property
    def done(self) -> asyncio.Future[None]:
        """Resolved at EOF or when the absorb budget is used up (then we stop reading)."""
        return self._done

    def _read_available(self) -> bool:
        """Read what is available; True when the stream is finished for us."""
        while True:
            room = ABSORB_BYTES - self._absorbed
            if room <= 0:
                return True
            try:
                chunk = os.read(self._fd, min(_CHUNK, room))
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                return True
            if not chunk:
                return True
            self._absorbed += len(chunk)
            missing = KEEP_BYTES - len(self._kept)
            if missing > 0:
                self._kept += chunk[:missing]

    def _on_readable(self) -> None:
        if self._read_available():
            self._stop_reading()

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)
        if not self._done.done():
            self._done.set_result(None)

    def close(self) -> bytes:
        """Take what is left in the pipe (within budget), close it and return the output."""
        if self._reading:
            self._read_available()
        self._stop_reading()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        return bytes(self._kept)


class StdinFeeder:
    """Writes the request's stdin into the child's pipe, then closes it.

    ``None`` closes the pipe immediately, so ``input()`` gets EOF as on the real server.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes | None) -> None:
        self._loop = loop
        self._fd = fd
        self._view = memoryview(data or b"")
        self._writing = False
        self._closed = False
        os.set_blocking(fd, False)
        if self._write_available():
            self.close()
        else:
            self._writing = True
            loop.add_writer(fd, self._on_writable)

    def _write_available(self) -> bool:
        """Write as much as possible; True when finished (all written or pipe gone)."""
        while self._view:
            try:
                n = os.write(self._fd, self._view[:_CHUNK])
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:  # EPIPE: the child exited or closed stdin
                return True
            self._view = self._view[n:]
        return True

    def _on_writable(self) -> None:
        if self._write_available():
            self.close()

    def close(self) -> None:
        """Stop writing and close our end (idempotent)."""
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        if not self._closed:
            self._closed = True
            self._view = memoryview(b"")
            with contextlib.suppress(OSError):
                os.close(self._fd)
