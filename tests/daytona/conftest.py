"""Fixtures for the Daytona tests: an emulator served on loopback, the SDK pointed at it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona import DEFAULT_API_KEY
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.server import EmulatorServer


@pytest.fixture(scope="session")
def daytona_server() -> Iterator[EmulatorServer]:
    with EmulatorServer(Emulator()) as server:
        yield server


@pytest.fixture
def server(daytona_server: EmulatorServer) -> Iterator[EmulatorServer]:
    """The shared server, reset (no sandboxes, empty journal, fresh throttler windows) around each test."""
    daytona_server.emulator.set_faults(None)
    daytona_server.emulator.reset()
    yield daytona_server
    daytona_server.emulator.set_faults(None)
    daytona_server.emulator.reset()


@pytest.fixture
def api_url(server: EmulatorServer) -> str:
    return server.url + "/api"


@pytest.fixture
def api_key() -> str:
    return DEFAULT_API_KEY


class SteppedClock:
    """The emulator's clock (``monotonic``, ``sleep``; callable as the store's ``now``), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def make_server(config: EmulatedDaytona) -> EmulatorServer:
    """A separate emulator with its own Daytona configuration (use as a context manager)."""
    return EmulatorServer(Emulator(EmulatorConfig(daytona=config)))


#: The grace of the ``graceful`` server's interpreter (the daemon's 2 s, shortened for the tests).
GRACE = 0.5


@pytest.fixture(scope="module")
def graceful() -> Iterator[EmulatorServer]:
    """A server whose interpreter gives interrupted code half a second before it kills it."""
    with make_server(EmulatedDaytona(interpreter_grace=GRACE)) as server:
        yield server


@pytest.fixture
def graceful_sandbox(graceful: EmulatorServer, api_key: str) -> Iterator[str]:
    """A sandbox of the ``graceful`` server, deleted after the test."""
    headers = {"Authorization": f"Bearer {api_key}"}
    created = httpx.post(graceful.url + "/api/sandbox", json={}, headers=headers)
    assert created.status_code == 200, created.text
    yield str(created.json()["id"])
    httpx.delete(graceful.url + f"/api/sandbox/{created.json()['id']}", headers=headers)


def interpreter_frames(
    server: EmulatorServer, api_key: str, sid: str, first: dict[str, Any]
) -> tuple[list[dict[str, Any]], int | None]:
    """Every text frame of one interpreter execution and the close code."""

    async def frames() -> tuple[list[dict[str, Any]], int | None]:
        url = server.url.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers={"Authorization": f"Bearer {api_key}"}) as ws,
        ):
            await ws.send_str(json.dumps(first))
            got = [json.loads(m.data) async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
            return got, ws.close_code

    return asyncio.run(frames())


@pytest.fixture
def tb(server: EmulatorServer, api_key: str) -> tuple[httpx.Client, str]:
    """A client of the shared server and the toolbox prefix (``/toolbox/<id>``) of a fresh sandbox."""
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    return client, f"/toolbox/{created.json()['id']}"


def dead(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (killed, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def all_dead(pids: Iterator[int] | list[int], within: float = 5.0) -> bool:
    """Whether every one of ``pids`` is :func:`dead` within ``within`` seconds: a SIGKILL takes effect when its
    target next runs, a moment later (polled, no fixed wait)."""
    left = list(pids)
    deadline = time.monotonic() + within
    while (left := [pid for pid in left if not dead(pid)]) and time.monotonic() < deadline:
        time.sleep(0.005)
    return not left
