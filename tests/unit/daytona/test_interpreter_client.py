"""The interpreter client's queue on its own: a fast client gets everything however bursty the code, a client whose
writes block is dropped once its queue is full, and the end leaves with what is queued."""

from __future__ import annotations

import asyncio
import contextlib
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


class FakeTransport:
    """The connection under the socket: full (a write would wait for the client) while the socket is blocked."""

    def __init__(self, socket: FakeSocket) -> None:
        self.socket = socket
        self.aborted = False
        self.judged_stalled = asyncio.Event()  # asked while the socket is blocked

    def get_write_buffer_size(self) -> int:
        if self.socket.release.is_set():
            return 0
        self.judged_stalled.set()
        return 1 << 20

    def abort(self) -> None:
        self.aborted = True


def _frame(n: int) -> dict[str, str]:
    return {"type": "stdout", "text": f"{n}\n"}


async def _flood(channel: ClientChannel, frames: int) -> None:
    for n in range(frames):
        await channel.send(_frame(n))


def test_a_burst_larger_than_the_queue_reaches_a_client_that_keeps_up() -> None:
    async def main() -> tuple[FakeSocket, ClientChannel]:
        socket = FakeSocket()
        channel = ClientChannel(socket, capacity=4, close_wait=1.0, transport=FakeTransport(socket))  # type: ignore[arg-type]
        for n in range(100):  # no pause between them: the writer gets its turns when the queue is full
            await channel.send(_frame(n))
        await channel.close(1000)
        return socket, channel

    socket, channel = asyncio.run(main())
    assert not channel.slow and not channel.gone
    assert [frame["text"] for frame in socket.sent] == [f"{n}\n" for n in range(100)]
    assert socket.closed == (1000, "")


def test_a_client_whose_writes_block_is_dropped_once_its_queue_is_full() -> None:
    async def main() -> tuple[FakeSocket, FakeTransport, ClientChannel, float]:
        socket = FakeSocket(blocked=True)
        transport = FakeTransport(socket)
        channel = ClientChannel(socket, capacity=4, close_wait=0.2, transport=transport)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n in range(50):
            await channel.send(_frame(n))
        waited = loop.time() - started
        await channel.close(1000)  # the end of the code: nobody is told any more
        return socket, transport, channel, waited

    socket, transport, channel, waited = asyncio.run(main())
    assert channel.slow
    assert waited >= 0.2  # the send that found the queue full waited out the grace, as the daemon's reader does
    assert socket.sent == []  # the one write in progress never finished
    assert socket.closed is None and transport.aborted  # the connection dropped, no close frame


def test_with_no_connection_to_judge_by_no_client_is_slow() -> None:
    """An in-process client (no transport) whose writes take a turn each: queued frames wait for their turn."""

    class YieldingSocket(FakeSocket):
        async def send_text(self, text: str) -> None:
            await asyncio.sleep(0)
            self.sent.append(json.loads(text))

    async def main() -> tuple[FakeSocket, ClientChannel]:
        socket = YieldingSocket()
        channel = ClientChannel(socket, capacity=4, close_wait=1.0)  # type: ignore[arg-type]
        for n in range(300):
            await channel.send(_frame(n))
        await channel.close(1000)
        return socket, channel

    socket, channel = asyncio.run(main())
    assert not channel.slow and len(socket.sent) == 300 and socket.closed == (1000, "")


def test_a_writer_cancelled_with_its_caller_is_not_left_behind() -> None:
    """A caller cancelled during the five seconds (its run's timeout) is cancelled, and the writer with it."""

    async def main() -> ClientChannel:
        socket = FakeSocket(blocked=True)
        transport = FakeTransport(socket)
        channel = ClientChannel(socket, capacity=2, close_wait=30.0, transport=transport)  # type: ignore[arg-type]

        task = asyncio.ensure_future(_flood(channel, 10))
        await transport.judged_stalled.wait()  # the queue filled against a blocked write: the drop's wait begins
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled() and channel.slow  # before: the cancel was swallowed, and the reader went on
        await asyncio.sleep(0)  # one turn: the writer's own cancel is carried out
        return channel

    channel = asyncio.run(main())
    assert channel._writer.done()


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


def test_a_client_stalled_between_the_water_marks_is_dropped_not_spun_on() -> None:
    """A connection paused above 64 KiB unsent resumes only at 16 KiB: a client that reads a little and stops leaves
    the writer waiting with, say, 40 KiB unsent. Before, that was not "stalled" (64 KiB was the mark) and the reader
    spun on a full queue for ever."""

    class HalfFullTransport(FakeTransport):
        def get_write_buffer_size(self) -> int:
            return 0 if self.socket.release.is_set() else 40 * 1024

    async def main() -> ClientChannel:
        socket = FakeSocket(blocked=True)
        channel = ClientChannel(socket, capacity=4, close_wait=0.1, transport=HalfFullTransport(socket))  # type: ignore[arg-type]

        await asyncio.wait_for(_flood(channel, 50), 10)
        return channel

    assert asyncio.run(main()).slow


def test_the_end_is_over_when_it_is_written_not_a_turn_of_the_loop_later() -> None:
    """Everything queued leaves at once with the close frame: ``close`` then returns in the same turn of the event
    loop, as the journal's end of the execution should (a turn later, the server's transport has flushed the answer
    and the client it woke may have taken the CPU: about a millisecond of the client's time, counted as ours). The
    stopped writer ends in the next turn all the same."""

    async def main() -> tuple[FakeSocket, ClientChannel, bool, bool]:
        socket = FakeSocket()
        channel = ClientChannel(socket, capacity=8, close_wait=1.0, transport=FakeTransport(socket))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the writer waits on its queue
        turned = asyncio.Event()
        for n in range(3):
            await channel.send(_frame(n))
        asyncio.get_running_loop().call_soon(turned.set)
        await channel.close(1000)
        same_turn = not turned.is_set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        writer_ended = channel._writer.done()
        return socket, channel, same_turn, writer_ended

    socket, channel, same_turn, writer_ended = asyncio.run(main())
    assert [frame["text"] for frame in socket.sent] == ["0\n", "1\n", "2\n"] and socket.closed == (1000, "")
    assert same_turn
    assert writer_ended and not channel.cut and not channel.slow


def test_an_end_whose_caller_is_cancelled_in_the_middle_of_the_delivery_is_cut() -> None:
    class SlowButNotFull(FakeSocket):
        """A write that waits while the connection reports room (the moment between a write and its drain)."""

        def __init__(self) -> None:
            super().__init__(blocked=True)

        def transport(self) -> FakeTransport:
            transport = FakeTransport(self)
            transport.get_write_buffer_size = lambda: 0  # type: ignore[method-assign]
            return transport

    async def main() -> tuple[SlowButNotFull, ClientChannel]:
        socket = SlowButNotFull()
        channel = ClientChannel(socket, capacity=8, close_wait=1.0, transport=socket.transport())  # type: ignore[arg-type]
        await asyncio.sleep(0)

        async def end() -> None:  # no turn of the loop between the frames and the end: the writer has not run
            for n in range(3):
                await channel.send(_frame(n))
            await channel.close(1000)

        closing = asyncio.ensure_future(end())
        for _ in range(5):
            await asyncio.sleep(0)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        return socket, channel

    socket, channel = asyncio.run(main())
    assert socket.sent == [] and socket.closed is None
    assert channel.cut and not channel.gone


def test_an_end_cancelled_while_its_last_item_is_sent_is_cut() -> None:
    """The queue is empty while its last item, the close frame, is on its way: a cancellation then still cuts."""

    class SlowClose(FakeSocket):
        async def close(self, code: int = 1000, reason: str = "") -> None:
            await asyncio.Event().wait()  # never done

    async def main() -> ClientChannel:
        socket = SlowClose()
        transport = FakeTransport(socket)
        channel = ClientChannel(socket, capacity=8, close_wait=1.0, transport=transport)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(channel.close(1000))
        for _ in range(5):
            await asyncio.sleep(0)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        return channel

    channel = asyncio.run(main())
    assert channel.cut and not channel.gone
