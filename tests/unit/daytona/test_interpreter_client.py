"""The interpreter client's queue on its own: a fast client gets everything however bursty the code, a client whose
writes block is dropped once its queue is full, and the end leaves with what is queued."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from emulator.daytona.interpreter_client import ClientChannel


class FakeSocket:
    """What the channel uses of a Starlette WebSocket; ``blocked`` holds every write until set."""

    def __init__(self, blocked: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self.release = asyncio.Event()
        if not blocked:
            self.release.set()

    async def send_text(self, text: str) -> None:
        await self.release.wait()
        self.sent.append(json.loads(text))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)


def _frame(n: int) -> dict[str, str]:
    return {"type": "stdout", "text": f"{n}\n"}


def test_a_burst_larger_than_the_queue_reaches_a_client_that_keeps_up() -> None:
    async def main() -> tuple[FakeSocket, ClientChannel]:
        socket = FakeSocket()
        channel = ClientChannel(socket, capacity=4, close_wait=1.0)  # type: ignore[arg-type]
        for n in range(100):  # no pause between them: the writer gets its turns when the queue is full
            await channel.send(_frame(n))
        await channel.close(1000)
        return socket, channel

    socket, channel = asyncio.run(main())
    assert not channel.slow and not channel.gone
    assert [frame["text"] for frame in socket.sent] == [f"{n}\n" for n in range(100)]
    assert socket.closed == (1000, "")


def test_a_client_whose_writes_block_is_dropped_once_its_queue_is_full() -> None:
    async def main() -> tuple[FakeSocket, ClientChannel, float]:
        socket = FakeSocket(blocked=True)
        channel = ClientChannel(socket, capacity=4, close_wait=0.2)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n in range(50):
            await channel.send(_frame(n))
        waited = loop.time() - started
        await channel.close(1000)  # the end of the code: nobody is told any more
        return socket, channel, waited

    socket, channel, waited = asyncio.run(main())
    assert channel.slow
    assert waited >= 0.2  # the send that found the queue full waited out the grace, as the daemon's reader does
    assert socket.sent == []  # the one write in progress never finished
    # No socket to drop under a fake: the close frame the daemon meant to send.
    assert socket.closed == (1008, "slow consumer")


def test_the_end_leaves_with_what_is_queued() -> None:
    async def main() -> FakeSocket:
        socket = FakeSocket()
        channel = ClientChannel(socket, capacity=1024, close_wait=1.0)  # type: ignore[arg-type]
        await channel.send(_frame(1))
        await channel.send({"type": "control", "text": "completed"})
        await channel.close(1000)
        return socket

    socket = asyncio.run(main())
    assert [frame["text"] for frame in socket.sent] == ["1\n", "completed"]
    assert socket.closed == (1000, "")
