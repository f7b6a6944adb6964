"""Fixtures for the Daytona tests: an emulator served on loopback, the SDK pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

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


def make_server(config: EmulatedDaytona) -> EmulatorServer:
    """A separate emulator with its own Daytona configuration (use as a context manager)."""
    return EmulatorServer(Emulator(EmulatorConfig(daytona=config)))
