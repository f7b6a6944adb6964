"""A session command's log over a WebSocket, as the daemon's ``ReadLog`` streams it (``?follow=true``)."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.websockets import WebSocket, WebSocketDisconnect

from .session_shell import STDERR_PREFIX, STDOUT_PREFIX
from .sessions import Session, SessionCommand

#: The daemon's reader sends what it reads 1,024 bytes at a time.
CHUNK = 1024
#: The daemon's follower looks for the command's end after 50 reads that found nothing, 20 ms apart.
EXIT_CHECK_S = 1.0
_MARKERS = (STDOUT_PREFIX.encode(), STDERR_PREFIX.encode())


def unmarked(data: bytes, final: bool) -> tuple[bytes, int]:
    """``data`` without its markers, and how much of it that covers: a tail that may be the start of a marker is
    kept for the next time, unless ``final``."""
    held = 0
    if not final and not any(data.endswith(marker) for marker in _MARKERS):
        for size in (2, 1):
            tail = data[-size:]
            if len(data) >= size and any(marker.startswith(tail) for marker in _MARKERS):
                held = size
                break
    used = len(data) - held
    out = data[:used]
    for marker in _MARKERS:
        out = out.replace(marker, b"")
    return out, used


async def stream_log(
    websocket: WebSocket, session: Session, command: SessionCommand, follow: bool, combined: bool
) -> str:
    loop = asyncio.get_running_loop()
    sent = 0
    last_data = loop.time()

    async def client_left() -> None:
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass

    leaving = asyncio.ensure_future(client_left())
    try:
        while True:
            changed = command.changed
            available = len(command.log)
            ended = command.done.is_set() or session.cancelled.is_set()
            while sent < available:
                piece = bytes(command.log[sent : min(available, sent + CHUNK)])
                final = ended and sent + len(piece) == available
                if combined:
                    data, used = unmarked(piece, final)
                else:
                    data, used = piece, len(piece)
                if used == 0:
                    break
                sent += used
                if data:
                    await websocket.send_bytes(data)
                    last_data = loop.time()
            if session.cancelled.is_set() or not follow:
                break
            if command.done.is_set() and sent >= len(command.log):
                # The end is seen at the reader's next check: a second after it last found something, or after that.
                checks = max(1, -(-(loop.time() - last_data) // EXIT_CHECK_S))
                wait = last_data + checks * EXIT_CHECK_S - loop.time()
                if await _left_within(leaving, max(wait, 0.0)):
                    return "cancelled"
                break
            waiting = asyncio.ensure_future(changed.wait())
            await asyncio.wait({waiting, leaving}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if leaving.done():
                return "cancelled"
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await websocket.close(1000)
        return "ok"
    except (WebSocketDisconnect, RuntimeError):
        return "cancelled"
    finally:
        leaving.cancel()


async def _left_within(leaving: asyncio.Future[None], seconds: float) -> bool:
    if seconds > 0:
        await asyncio.wait({leaving}, timeout=seconds)
    return leaving.done()


__all__ = ["stream_log", "unmarked"]
