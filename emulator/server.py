"""Three ways to run the emulator: in-process ASGI, a loopback server on a thread, and a separate process.

* ``Emulator.app`` is a plain ASGI app: give it to ``httpx.ASGITransport`` (respx-compatible) in async tests.
* :class:`EmulatorServer` serves it on ``127.0.0.1`` (port 0 by default) from a background thread, for clients
  that need a real socket: ``requests``, aiohttp, Ray workers, verl's ``call_sandbox_api``.
* ``sandbox-emulator serve`` runs :func:`serve_forever` in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import uvicorn

from emulator.app import Emulator
from emulator.transport import DEFAULT_PROTOCOL, WS_PROTOCOL

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def quiet_reset_log() -> Iterator[None]:
    """Silence uvicorn's error log for a while: an injected reset is an ASGI app that never answers, which uvicorn
    logs as an error each time. Expected under a fault plan, and noise on a job's console."""
    server_log = logging.getLogger("uvicorn.error")
    level = server_log.level
    server_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        server_log.setLevel(level)


def _event_loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


#: Seconds a stopping server waits for the requests in flight before it cancels them.
GRACEFUL_SHUTDOWN_S = 5


def uvicorn_config(app: Any, host: str, port: int, log_level: str = "warning") -> uvicorn.Config:
    """The uvicorn settings every mode shares: our transport-exposing protocol, no lifespan, quiet logs."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=DEFAULT_PROTOCOL,
        ws=WS_PROTOCOL,
        loop=_event_loop_name(),
        lifespan="off",
        log_level=log_level,
        access_log=False,
        backlog=4096,
        timeout_keep_alive=30,
        # A request held by an injected latency or hang (up to a day) would otherwise hold SIGTERM off as long.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


class _EmulatorUvicorn(uvicorn.Server):
    """A uvicorn server that ends the emulator's injected hangs when it stops.

    Without it, a request held by a hang (its client long gone, say) holds the stop for the graceful timeout and is
    then cancelled, which uvicorn logs as an exception in the application."""

    def __init__(self, config: uvicorn.Config, emulator: Emulator) -> None:
        super().__init__(config)
        self._emulator = emulator

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        ended = self._emulator.gate.end_hangs()
        if ended:  # their answers first: uvicorn's own shutdown would close a WebSocket with 1012 before ours
            await asyncio.wait(ended, timeout=GRACEFUL_SHUTDOWN_S)
        await super().shutdown(sockets=sockets)


class _NotifyingServer(_EmulatorUvicorn):
    """A uvicorn server that tells a thread when it accepts connections."""

    def __init__(self, config: uvicorn.Config, emulator: Emulator, ready: threading.Event) -> None:
        super().__init__(config, emulator)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._ready.set()

    def install_signal_handlers(self) -> None:  # the main thread owns signals, not us
        return None


class EmulatorServer:
    """The emulator on a loopback port, served from a background thread.

    >>> with EmulatorServer() as server:
    ...     requests.post(server.url + "/run_code", json={"code": "print(1)", "language": "python"})
    """

    def __init__(self, emulator: Emulator | None = None, host: str = LOOPBACK, port: int = 0) -> None:
        if emulator is not None and not isinstance(emulator, Emulator):
            raise TypeError(f"EmulatorServer takes an Emulator (or None), got {type(emulator).__name__}")
        self.emulator = emulator if emulator is not None else Emulator()
        self._sock = bind_socket(host, port)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._ready = threading.Event()
        self._server = _NotifyingServer(uvicorn_config(self.emulator.app, host, self.port), self.emulator, self._ready)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """Base URL; Sandbox Fusion clients take this (the ``sandbox-fusion`` client) or ``url + "/run_code"``."""
        return base_url(self.host, self.port)

    @property
    def run_code_url(self) -> str:
        """The full URL verl's ``sandbox_fusion_url`` wants."""
        return self.url + "/run_code"

    def start(self, timeout: float = 30.0) -> EmulatorServer:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="sandbox-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"emulator server did not start within {timeout} s: {self._error!r}")
        return self

    def _run(self) -> None:
        async def main() -> None:
            try:
                await self._server.serve(sockets=[self._sock])
            finally:
                await self.emulator.aclose()

        try:
            if self._server.config.loop == "uvloop":
                import uvloop

                uvloop.run(main())
            else:
                asyncio.run(main())
        except BaseException as exc:  # surfaced by start()/stop()
            self._error = exc
            self._ready.set()

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout)
        self._thread = None
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0 picks a free one)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(4096)
    except OSError:
        sock.close()
        raise
    return sock


#: Wildcard bind addresses, and the loopback address a client on this machine reaches them by.
_REACHABLE_AS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def base_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server bound to ``host:port`` (a wildcard bind is the loopback)."""
    host = _REACHABLE_AS.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_forever(
    emulator: Emulator,
    host: str = LOOPBACK,
    port: int = 8080,
    log_level: str = "info",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve in the calling (main) thread until interrupted; used by ``sandbox-emulator serve``.

    The socket is bound first, so ``on_ready`` receives the real base URL even for port 0. Raises ``OSError`` when
    the address cannot be bound.
    """
    sock = bind_socket(host, port)
    bound_port: int = sock.getsockname()[1]
    server = _EmulatorUvicorn(uvicorn_config(emulator.app, host, bound_port, log_level=log_level), emulator)

    async def main() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            await emulator.aclose()

    if on_ready is not None:
        on_ready(base_url(host, bound_port))
    try:
        if server.config.loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    finally:
        sock.close()
