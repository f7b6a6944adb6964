"""The emulator served inside the test's own event loop, on that loop's clock.

Clients that need real sockets (aiohttp, the daytona SDK) talk to a uvicorn server running as a task in the same loop,
on a free loopback port. On a :class:`~harness.chaos.vtime.VirtualTimeLoop` the emulator's clock is the loop's, so
injected latency, ``Retry-After`` windows, token buckets, sandbox timers and journal timestamps all sit on the
clients' virtual timeline, and a busy check keeps time from jumping while a program really runs.

>>> async def main() -> None:
...     async with in_loop_emulator(faults={"rules": [...]}) as emu:
...         ...  # give emu.run_code_url to a tool; read emu.journal afterwards
>>> run_virtual(main())
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass
from typing import Any

import uvicorn

from emulator.app import Emulator, EmulatorConfig, PlanSpec
from emulator.journal import Journal
from emulator.server import LOOPBACK, base_url, bind_socket, uvicorn_config
from harness.chaos.vtime import LoopClock, VirtualTimeLoop

__all__ = ["InLoopEmulator", "emulator_busy", "in_loop_emulator"]


@dataclass(frozen=True)
class InLoopEmulator:
    """What :func:`in_loop_emulator` yields: the emulator and where it listens."""

    emulator: Emulator
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL (Sandbox Fusion and Daytona share it)."""
        return base_url(self.host, self.port)

    @property
    def run_code_url(self) -> str:
        """The full URL verl's ``sandbox_fusion_url`` wants."""
        return self.url + "/run_code"

    @property
    def daytona_api_url(self) -> str:
        """The Daytona SDK's ``api_url``."""
        return self.url + "/api"

    @property
    def daytona_api_key(self) -> str:
        return self.emulator.config.daytona.api_key

    @property
    def journal(self) -> Journal:
        return self.emulator.journal

    def now(self) -> float:
        """The emulator's clock (the loop's time)."""
        return self.emulator.clock.monotonic()


def emulator_busy(emulator: Emulator) -> Callable[[], bool]:
    """A busy check for ``emulator``: true while it runs a program or starts a helper process.

    Programs run in child processes (the executor's zygote, the Daytona interpreters); their progress is real time,
    so the loop must not jump past their timeouts. The executor says whether it runs anything; the emulator and the
    interpreters expose no such state, so this reads theirs directly; the attribute names are checked here, once,
    so a refactor fails loudly.
    """
    interpreters = emulator.daytona.interpreters
    for owner, name in ((emulator, "_executor"), (emulator, "_start_lock"), (interpreters, "_contexts")):
        if not hasattr(owner, name):
            raise RuntimeError(f"emulator internals changed: {type(owner).__name__}.{name} is gone; update {__name__}")

    def busy() -> bool:
        start_lock = emulator._start_lock
        if start_lock is not None and start_lock.locked():
            return True  # the executor is starting its zygote
        executor = emulator._executor
        if executor is not None and executor.running():
            return True  # a zygote (re)starts, or programs run (not just held, ready, until a latency is over)
        contexts = interpreters._contexts
        return any(context.lock.locked() for by_id in contexts.values() for context in by_id.values())

    return busy


class _InLoopServer(uvicorn.Server):
    """uvicorn waiting on an event instead of its 0.1 s tick (which would cost a loop turn per 0.1 virtual s)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)  # sets the default headers (Date) once
        await self.stop.wait()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the test runner owns signals

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None


@contextlib.asynccontextmanager
async def in_loop_emulator(
    faults: PlanSpec = None,
    *,
    config: EmulatorConfig | None = None,
    host: str = LOOPBACK,
    port: int = 0,
    log_level: str = "warning",
) -> AsyncIterator[InLoopEmulator]:
    """Serve a fresh emulator (``faults``, ``config``) from a task of the running loop, on that loop's clock.

    On a :class:`~harness.chaos.vtime.VirtualTimeLoop` it registers :func:`emulator_busy` and starts the executor
    with time held; on any other loop it simply runs in real time.
    """
    loop = asyncio.get_running_loop()
    emulator = Emulator(config, faults=faults, clock=LoopClock(loop))
    virtual = loop if isinstance(loop, VirtualTimeLoop) else None
    remove_check = virtual.add_busy_check(emulator_busy(emulator)) if virtual is not None else _nothing
    sock = bind_socket(host, port)
    server = _InLoopServer(uvicorn_config(emulator.app, host, sock.getsockname()[1], log_level=log_level))
    serving: asyncio.Task[None] | None = None
    try:
        with virtual.hold() if virtual is not None else contextlib.nullcontext():
            await emulator.executor()  # the zygote's start-up is real time
        serving = loop.create_task(server.serve(sockets=[sock]), name="in-loop-emulator")
        await _started(server, serving)
        yield InLoopEmulator(emulator, host, sock.getsockname()[1])
    finally:
        try:
            if serving is not None:
                server.should_exit = True
                server.stop.set()
                await serving
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            await emulator.aclose()  # kills the interpreters
            remove_check()
            if virtual is not None:
                await virtual.reap_subprocesses()


def _nothing() -> None:
    return None


async def _started(server: _InLoopServer, serving: asyncio.Task[Any]) -> None:
    """Wait until the server listens, or raise what stopped it."""
    ready = asyncio.ensure_future(server.ready.wait())
    try:
        await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    if not server.ready.is_set():
        serving.result()  # raises the start-up error
        raise RuntimeError("the in-loop emulator stopped before it listened")
