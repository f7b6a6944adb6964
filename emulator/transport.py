"""Connection-level faults: uvicorn protocols that expose their transport so a handler can reset or truncate.

ASGI gives an application no way to drop a connection. Our server runs uvicorn with these protocol classes, which
put the asyncio transport into ``scope["extensions"]["emulator.transport"]``. Under an ASGI transport that has no
socket (httpx's ``ASGITransport``), a reset is raised as :class:`EmulatedConnectionReset` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

TRANSPORT_KEY = "emulator.transport"

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional in uvicorn
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


class EmulatedConnectionReset(ConnectionResetError):
    """Raised to an in-process ASGI client where a real server would have reset the connection."""


def _expose(scope: dict[str, Any], transport: asyncio.BaseTransport) -> None:
    extensions = scope.setdefault("extensions", {})
    extensions[TRANSPORT_KEY] = transport


class ExposingH11Protocol(H11Protocol):
    """h11 protocol whose scopes carry the transport."""

    def handle_events(self) -> None:
        super().handle_events()
        if getattr(self, "scope", None) is not None:
            _expose(self.scope, self.transport)  # type: ignore[arg-type]


if HttpToolsProtocol is not None:

    class ExposingHttpToolsProtocol(HttpToolsProtocol):
        """httptools protocol whose scopes carry the transport."""

        def on_message_begin(self) -> None:
            super().on_message_begin()
            _expose(self.scope, self.transport)  # type: ignore[arg-type]

    DEFAULT_PROTOCOL: type[Any] = ExposingHttpToolsProtocol
else:  # pragma: no cover - depends on the install
    DEFAULT_PROTOCOL = ExposingH11Protocol


def transport_of(scope: dict[str, Any]) -> Any:
    """The connection's transport (asyncio's or uvloop's, which is not an ``asyncio.Transport`` subclass)."""
    transport = scope.get("extensions", {}).get(TRANSPORT_KEY)
    return transport if hasattr(transport, "abort") else None


def reset(scope: dict[str, Any]) -> None:
    """Close the client connection with a TCP RST (SO_LINGER 0), or raise when there is no socket."""
    transport = transport_of(scope)
    if transport is None:
        raise EmulatedConnectionReset("connection reset by the emulator (injected fault)")
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def write_then_close(scope: dict[str, Any], data: bytes) -> None:
    """Write raw bytes (a partial response) and close, for truncated-body faults."""
    transport = transport_of(scope)
    if transport is None:
        raise EmulatedConnectionReset("connection closed mid-body by the emulator (injected fault)")
    transport.write(data)
    transport.close()
