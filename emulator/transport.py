"""Our uvicorn protocols: they expose their transport so a handler can reset or truncate, and send each response whole.

ASGI gives an application no way to drop a connection. Our server runs uvicorn with these protocol classes, which
put the asyncio transport into ``scope["extensions"]["emulator.transport"]``. Under an ASGI transport that has no
socket (httpx's ``ASGITransport``), a reset is raised as :class:`EmulatedConnectionReset` instead.

uvicorn writes a response's head and its body in two system calls. A client then wakes for the head alone, and on a
small machine it takes the CPU from the server before the body is written (0.3 ms more per call at concurrency 1).
:class:`CoalescingTransport` sends what one turn of the event loop writes in one call, and our protocols send a
response as soon as it is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

TRANSPORT_KEY = "emulator.transport"
#: When the request began to arrive (``time.monotonic()``): an injected latency runs from then.
ARRIVED_KEY = "emulator.arrived"
#: When a WebSocket's upgrade request began to arrive. uvicorn's WebSocket protocols make their own scopes (without
#: our extensions), but they start the application's task while our protocol hands the connection over, so the task
#: inherits this from the hand-over's context.
_UPGRADE_ARRIVED: ContextVar[float | None] = ContextVar("emulator_upgrade_arrived", default=None)
#: The upgraded connection's transport, handed over the same way.
_UPGRADE_TRANSPORT: ContextVar[Any] = ContextVar("emulator_upgrade_transport", default=None)

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional in uvicorn
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


class EmulatedConnectionReset(ConnectionResetError):
    """Raised to an in-process ASGI client where a real server would have reset the connection."""


class CoalescingTransport:
    """A transport whose writes within one turn of the event loop leave in one ``write`` (at the turn's end).

    ``close`` sends what is pending first; ``abort`` drops it (a reset sends nothing more). Everything else is the
    wrapped transport's.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        chunk = data if type(data) is bytes else bytes(data)  # the caller may reuse its buffer
        if self._pending is None:
            self._pending = [chunk]
            self._loop.call_soon(self._flush)
        else:
            self._pending.append(chunk)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is pending now (a complete response), not at the end of the turn."""
        self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        pending = sum(len(chunk) for chunk in self._pending) if self._pending else 0
        return int(self._transport.get_write_buffer_size()) + pending

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _expose(scope: dict[str, Any], transport: asyncio.BaseTransport) -> None:
    extensions = scope.setdefault("extensions", {})
    extensions[TRANSPORT_KEY] = transport
    extensions[ARRIVED_KEY] = time.monotonic()


def _hand_over(scope: Mapping[str, Any] | None, transport: Any, upgrade: Callable[[], None]) -> None:
    """Run an upgrade with its request's arrival and its transport in the context that the WebSocket's application
    task copies."""
    arrived = arrived_at(scope) if scope is not None else None
    token = _UPGRADE_ARRIVED.set(arrived if arrived is not None else time.monotonic())
    transport_token = _UPGRADE_TRANSPORT.set(transport)
    try:
        upgrade()
    finally:
        _UPGRADE_TRANSPORT.reset(transport_token)
        _UPGRADE_ARRIVED.reset(token)


class ExposingH11Protocol(H11Protocol):
    """h11 protocol whose scopes carry the transport, and whose responses leave whole."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]
        super().on_response_complete()

    def handle_events(self) -> None:
        super().handle_events()
        if getattr(self, "scope", None) is not None:
            _expose(self.scope, self.transport)  # type: ignore[arg-type]

    def handle_websocket_upgrade(self, event: Any) -> None:
        # h11 makes the scope as it upgrades (it is exposed after): the arrival is then the hand-over's time.
        _hand_over(None, self.transport, lambda: super(ExposingH11Protocol, self).handle_websocket_upgrade(event))


if HttpToolsProtocol is not None:

    class ExposingHttpToolsProtocol(HttpToolsProtocol):
        """httptools protocol whose scopes carry the transport, and whose responses leave whole."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]
            super().on_response_complete()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            _expose(self.scope, self.transport)  # type: ignore[arg-type]

        def handle_websocket_upgrade(self) -> None:
            _hand_over(self.scope, self.transport, super().handle_websocket_upgrade)

    DEFAULT_PROTOCOL: type[Any] = ExposingHttpToolsProtocol
else:  # pragma: no cover - depends on the install
    DEFAULT_PROTOCOL = ExposingH11Protocol


def _denial_completes_the_handshake(base: Any) -> type[Any]:
    """``base`` (a uvicorn WebSocket protocol) where an HTTP denial of the upgrade counts as the handshake's end.

    The fault gate answers some upgrade requests with an HTTP status (a gateway's 504, a 429); uvicorn sends it, but
    its sans-I/O and wsproto protocols then log "ASGI callable returned without completing handshake." at ERROR for
    every such denial, though the client got its answer."""

    class DenyingProtocol(base):  # type: ignore[misc]
        async def send(self, message: Any) -> None:
            await super().send(message)
            if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
                self.handshake_complete = True

    DenyingProtocol.__name__ = DenyingProtocol.__qualname__ = f"Denying{base.__name__}"
    return DenyingProtocol


try:
    from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol
except ImportError:  # pragma: no cover - no WebSocket library installed
    AutoWebSocketsProtocol = None
#: The WebSocket protocol our server runs: uvicorn's own choice, with denials completing the handshake.
WS_PROTOCOL: Any = (
    _denial_completes_the_handshake(AutoWebSocketsProtocol)
    if AutoWebSocketsProtocol is not None and hasattr(AutoWebSocketsProtocol, "send")
    else "auto"
)


def arrived_at(scope: Mapping[str, Any]) -> float | None:
    """When the request (a WebSocket's: its upgrade request) began to arrive (``time.monotonic()``); None under an
    ASGI transport with no socket."""
    arrived = scope.get("extensions", {}).get(ARRIVED_KEY)
    if arrived is None and scope.get("type") == "websocket":
        arrived = _UPGRADE_ARRIVED.get()
    return arrived if isinstance(arrived, float) else None


def transport_of(scope: dict[str, Any]) -> Any:
    """The connection's transport (asyncio's or uvloop's, which is not an ``asyncio.Transport`` subclass)."""
    transport = scope.get("extensions", {}).get(TRANSPORT_KEY)
    return transport if hasattr(transport, "abort") else None


def websocket_transport() -> Any:
    """The transport of the WebSocket connection whose application task calls this; None under an ASGI transport
    with no socket."""
    transport = _UPGRADE_TRANSPORT.get()
    return transport if hasattr(transport, "abort") else None


def reset(scope: dict[str, Any]) -> None:
    """Close the client connection with a TCP RST (SO_LINGER 0), or raise when there is no socket."""
    transport = transport_of(scope)
    if transport is None:
        raise EmulatedConnectionReset("connection reset by the emulator (injected fault)")
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):  # uvloop: ValueError when the client closed it meanwhile
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def write_then_close(scope: dict[str, Any], data: bytes) -> None:
    """Write raw bytes (a partial response) and close, for truncated-body faults."""
    transport = transport_of(scope)
    if transport is None:
        raise EmulatedConnectionReset("connection closed mid-body by the emulator (injected fault)")
    transport.write(data)
    transport.close()
