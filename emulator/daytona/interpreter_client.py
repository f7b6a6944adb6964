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

from starlette.websockets import WebSocket

from emulator.transport import websocket_transport

from .interpreter_request import CLOSE_POLICY_VIOLATION

#: Frames the daemon's channel to a client holds.
CAPACITY = 1024
#: Seconds the daemon waits for the writer to send what is queued before it closes a client's connection.
CLOSE_WAIT_S = 5.0


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
    """The frames of one execution on their way to its client, as the daemon's ``wsClient`` sends them."""

    def __init__(self, websocket: WebSocket, capacity: int = CAPACITY, close_wait: float = CLOSE_WAIT_S) -> None:
        self._websocket = websocket
        self._queue: asyncio.Queue[str | _Close] = asyncio.Queue(capacity)
        self._close_wait = close_wait
        self._shut = False  # no more frames taken
        #: The client was dropped as a slow consumer.
        self.slow = False
        #: The client left (a write failed).
        self.gone = False
        self._closed_cleanly = False
        self._busy = False  # the writer is in a write
        self._writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while not (self._shut and self._queue.empty()):
            item = await self._queue.get()
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

    async def send(self, frame: dict[str, str]) -> None:
        """Queue a frame (the daemon's ``emitOutput``); a full queue drops the client, which this waits out."""
        message = _output_message(frame)
        while not (self._shut or self.gone):
            try:
                self._queue.put_nowait(message)
                return
            except asyncio.QueueFull:
                if not self._busy:  # the writer has not had its turn yet (the daemon's runs beside the reader)
                    await asyncio.sleep(0)
                    continue
            self.slow = True  # full while a write waits on the client
            await self._finish(with_close_frame=False)  # the 1008 does not fit in the full channel either

    async def close(self, code: int, reason: str = "") -> None:
        """Queue the close frame (the daemon's ``requestClose``, which leaves it out when the channel is full), then
        let the writer send what is queued, up to the daemon's five seconds."""
        if self._shut:
            return
        while True:
            try:
                self._queue.put_nowait(_Close(code, reason))
                fitted = True
            except asyncio.QueueFull:
                if not (self._busy or self.gone):  # the writer has not had its turn yet
                    await asyncio.sleep(0)
                    continue
                fitted = False
            break
        await self._finish(with_close_frame=fitted)

    async def _finish(self, with_close_frame: bool) -> None:
        self._shut = True
        if not self._busy and not self._writer.done():
            # The writer waits for the queue (a frame put there is still in it until the writer runs): what is
            # queued leaves from here, in this turn of the loop, as one write with the end.
            self._writer.cancel()
            while not self._queue.empty() and await self._deliver(self._queue.get_nowait()):
                pass
        else:  # a write in progress: the client is slow, or gone
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._writer), self._close_wait)
            if not self._writer.done():
                self._writer.cancel()
        if with_close_frame and self._closed_cleanly:
            return
        if self.gone:
            return
        transport = websocket_transport()
        if transport is not None:
            transport.close()  # what was written leaves, then the connection ends with no close frame
        elif self.slow:  # no socket to drop (an in-process client): the close frame the daemon meant to send
            with contextlib.suppress(Exception):
                await self._websocket.close(CLOSE_POLICY_VIOLATION, "slow consumer")


__all__ = ["CAPACITY", "CLOSE_WAIT_S", "ClientChannel"]
