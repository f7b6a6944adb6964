"""What one turn of the event loop writes leaves in one ``write``: a response's head and body together."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from emulator.app import Emulator
from emulator.server import uvicorn_config
from emulator.transport import DEFAULT_PROTOCOL, CoalescingTransport, ExposingH11Protocol, arrived_at


class _Recorder:
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


def _turns(loop: asyncio.AbstractEventLoop, n: int = 2) -> None:
    for _ in range(n):
        loop.run_until_complete(asyncio.sleep(0))


def test_writes_of_one_turn_leave_together_at_its_end() -> None:
    loop = asyncio.new_event_loop()
    try:
        inner = _Recorder()
        transport = CoalescingTransport(inner, loop)
        buffer = bytearray(b"head;")
        transport.write(buffer)
        buffer[:] = b"XXXXX"  # the caller may reuse its buffer once write returns
        transport.write(memoryview(b"body"))
        assert inner.writes == [] and transport.get_write_buffer_size() == 9
        _turns(loop)
        assert inner.writes == [b"head;body"]
        transport.write(b"next")
        _turns(loop)
        assert inner.writes == [b"head;body", b"next"]
    finally:
        loop.close()


def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    loop = asyncio.new_event_loop()
    try:
        closed, aborted = _Recorder(), _Recorder()
        one, two = CoalescingTransport(closed, loop), CoalescingTransport(aborted, loop)
        one.write(b"last words")
        one.close()
        two.write(b"never")
        two.abort()
        _turns(loop)
        assert (closed.writes, closed.closed) == ([b"last words"], True)
        assert (aborted.writes, aborted.aborted) == ([], True)
        assert one.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the wrapped transport's
    finally:
        loop.close()


@pytest.mark.parametrize("protocol_class", [ExposingH11Protocol, DEFAULT_PROTOCOL])
def test_our_server_protocols_write_through_it(protocol_class: type[Any]) -> None:
    """uvicorn writes a head and a body in two calls: with our protocols they reach the socket as one."""
    loop = asyncio.new_event_loop()
    try:
        config = uvicorn_config(Emulator().app, "127.0.0.1", 0)
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        inner = _Recorder()
        protocol.connection_made(inner)
        protocol.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        protocol.transport.write(b"{}")
        assert inner.writes == []
        protocol.on_response_complete()  # what uvicorn calls after a response's last byte: sent at once, whole
        assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        _turns(loop)
        assert len(inner.writes) == 1
        protocol.connection_lost(None)
    finally:
        loop.close()


UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


@pytest.mark.parametrize("protocol_class", [ExposingH11Protocol, DEFAULT_PROTOCOL])
def test_a_websocket_scope_knows_when_its_upgrade_request_arrived(protocol_class: type[Any]) -> None:
    """uvicorn's WebSocket protocols make their own scopes: the arrival comes through the hand-over's context."""
    seen: list[tuple[float | None, float]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            seen.append((arrived_at(scope), time.monotonic()))
            await send({"type": "websocket.close"})

    async def upgrade() -> float:
        config = uvicorn.Config(app, lifespan="off")
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
        protocol.connection_made(_Recorder())
        before = time.monotonic()
        protocol.data_received(UPGRADE)
        for _ in range(50):  # the handshake and the application's task take a few turns of the loop
            if seen:
                break
            await asyncio.sleep(0)
        return before

    before = asyncio.run(upgrade())
    [(arrived, handled)] = seen
    assert arrived is not None and before <= arrived <= handled
