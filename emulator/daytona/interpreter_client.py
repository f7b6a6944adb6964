"""The daemon's sender to one interpreter WebSocket client: a queue of 1,024 frames that a writer drains.

The daemon never makes the code wait for its client. Each frame of output goes into the client's channel (1,024
frames), which a writer sends on; a write blocks only when the connection's buffers are full, that is when the client
reads slower than the code prints. A client that lets the channel fill is dropped as a ``slow consumer``: the close
frame 1008 it is then sent goes into the same full channel, so it is rarely sent; the daemon waits up to five seconds
for the writer to send what is queued, then closes the connection, and the client sees 1006. The code runs on, and
its later output and its end go nowhere. The daemon's reader of the worker's output waits out those five seconds,
as the caller of :meth:`ClientChannel.send` does here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from emulator.transport import websocket_transport

from .interpreter_request import CLOSE_POLICY_VIOLATION

#: Frames the daemon's channel to a client holds.
CAPACITY = 1024
#: Seconds the daemon waits for the writer to send what is queued before it closes a client's connection.
CLOSE_WAIT_S = 5.0
#: Unsent bytes in a connection's transport up to which a write goes through at once: asyncio's and uvloop's low water
#: mark. Their transports pause the WebSocket protocol above 64 KiB unsent and resume it only at 16 KiB or less, so
#: a writer waiting in a write with more than this unsent waits for the client.
STALLED_BYTES = 16 * 1024
#: Seconds between two looks at a full queue whose writer is in a write (until it is stalled or takes an item).
_RECHECK_S = 0.01


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


def _output_message(frame: dict[str, str]) -> str:
    """A frame as the daemon writes its ``OutputMessage``: every field, empty when unused, in its order."""
    return json.dumps(
        {
            "type": frame.get("type", ""),
            "text": frame.get("text", ""),
            "name": frame.get("name", ""),
            "value": frame.get("value", ""),
            "traceback": frame.get("traceback", ""),
        }
    )


class ClientChannel:
    """The frames of one execution on their way to its client, as the daemon's ``wsClient`` sends them.

    A client counts as slow only when the writer waits in a write for its connection (the transport holds more than
    :data:`STALLED_BYTES` unsent): a queue that fills while the writer merely waits for its turn of the event loop
    is not the client's doing. Under an in-process ASGI transport, with no connection, no client is slow.
    """

    def __init__(
        self,
        websocket: WebSocket,
        capacity: int = CAPACITY,
        close_wait: float = CLOSE_WAIT_S,
        transport: Any = None,
    ) -> None:
        self._websocket = websocket
        #: The connection's transport (``get_write_buffer_size``, ``abort``); by default the upgraded one's.
        self._transport = transport if transport is not None else websocket_transport()
        self._queue: asyncio.Queue[str | _Close] = asyncio.Queue(capacity)
        self._close_wait = close_wait
        self._shut = False  # no more frames taken
        #: The client was dropped as a slow consumer.
        self.slow = False
        #: The client left (a write failed).
        self.gone = False
        #: The connection was closed with frames still unsent (the five seconds ran out).
        self.cut = False
        self._closed_cleanly = False
        self._busy = False  # the writer is in a write
        self._took = asyncio.Event()  # set by the writer each time it takes an item
        self._writer = asyncio.ensure_future(self._write())

    def _unsent(self) -> int:
        transport = self._transport
        return 0 if transport is None else int(transport.get_write_buffer_size())

    def _stalled(self) -> bool:
        """Whether the writer waits in a write for the client's connection to take more."""
        return self._busy and self._unsent() > STALLED_BYTES

    async def _write(self) -> None:
        while not (self._shut and self._queue.empty()):
            item = await self._queue.get()
            self._took.set()
            self._busy = True
            try:
                if not await self._deliver(item):
                    return
            finally:
                self._busy = False

    async def _deliver(self, item: str | _Close) -> bool:
        """Send one item; False once nothing more is to be sent (the close frame went, or the client left)."""
        try:
            if isinstance(item, _Close):
                await self._websocket.close(item.code, item.reason)
                self._closed_cleanly = True
                return False
            await self._websocket.send_text(item)
        except Exception:  # the client left: nothing more can reach it
            self.gone = True
            return False
        return True

    async def _put(self, item: str | _Close) -> bool:
        """Queue ``item``; False when the queue is full while the client's connection is (the daemon's full
        channel). A queue full only because the writer has not had its turn waits for that turn."""
        while True:
            try:
                self._queue.put_nowait(item)
                return True
            except asyncio.QueueFull:
                if self.gone or self._stalled() or self._writer.done():
                    return False
                # The writer has not had its turn, or is in a write the connection is about to take: the queue
                # gets room when it takes the next item (or the connection turns out to be stalled after all).
                self._took.clear()
                took = asyncio.ensure_future(self._took.wait())
                try:
                    await asyncio.wait({took, self._writer}, timeout=_RECHECK_S, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    took.cancel()

    async def send(self, frame: dict[str, str]) -> None:
        """Queue a frame (the daemon's ``emitOutput``); a full queue drops the client, which this waits out."""
        if self._shut or self.gone:
            return
        if not await self._put(_output_message(frame)) and not self.gone:
            self.slow = True
            await self._finish(with_close_frame=False)  # the 1008 does not fit in the full channel either

    async def close(self, code: int, reason: str = "") -> None:
        """Queue the close frame (the daemon's ``requestClose``, which leaves it out when the channel is full), then
        let what is queued leave, for the daemon's five seconds at most."""
        if self._shut:
            return
        await self._finish(with_close_frame=await self._put(_Close(code, reason)))

    def abandon(self) -> None:
        """Stop the writer (the execution ended in an error of ours, or the server is stopping)."""
        self._shut = True
        if not self._writer.done():
            self._writer.cancel()

    async def _finish(self, with_close_frame: bool) -> None:
        self._shut = True
        #: The writer was stopped here with nothing left for it: not waited for (it ends in the loop's next turn; a
        #: wait would end this execution only after that turn, once the transport has flushed the answer and the
        #: client it woke has had the CPU, which put the client's time into the journal's).
        stopped = False
        delivering = False  # an item taken off the queue and not yet sent
        try:
            if not self._busy and not self._writer.done() and self._transport is not None:
                # The writer waits for the queue (a frame put there stays in it until the writer runs): what is
                # queued leaves from here, in this turn of the loop, as one write with the end, as long as the
                # connection takes it at once; the rest, if any, through the writer and its time limit. (With no
                # connection to ask, everything goes through the writer.)
                self._writer.cancel()
                stopped = True
                while not self._queue.empty() and self._unsent() <= STALLED_BYTES:  # a write now goes at once
                    delivering = True
                    if not await self._deliver(self._queue.get_nowait()):
                        delivering = False
                        break
                    delivering = False
                if not self._queue.empty() and not (self.gone or self._closed_cleanly):
                    self._writer = asyncio.ensure_future(self._write())
                    stopped = False
            if not stopped and not self._writer.done():
                await asyncio.wait({self._writer}, timeout=self._close_wait)  # neither raises nor cancels it
        finally:
            if not stopped and not self._writer.done():  # the time ran out (or our caller was cancelled): what is
                self._writer.cancel()  # queued is dropped
                self.cut = not self.gone
            elif stopped and (delivering or not self._queue.empty()) and not (self.gone or self._closed_cleanly):
                self.cut = True  # our caller was cancelled in the middle of the delivery
        if with_close_frame and self._closed_cleanly:
            return
        if self.gone:
            return
        if self._transport is not None:
            # The connection ends with what the kernel already holds (a close frame never comes): the daemon's
            # conn.Close(). What our transport still buffers is dropped, so a client that never reads holds nothing.
            self._transport.abort()
        elif self.slow:  # no socket to drop (an in-process client): the close frame the daemon meant to send
            with contextlib.suppress(Exception):
                await self._websocket.close(CLOSE_POLICY_VIOLATION, "slow consumer")


__all__ = ["CAPACITY", "CLOSE_WAIT_S", "STALLED_BYTES", "ClientChannel"]
