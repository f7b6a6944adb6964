"""pytest plugin: an emulator for the whole session, reset before every test, with a fault-plan marker.

Fixtures:

* ``sandbox_emulator`` - the :class:`~emulator.server.EmulatorServer` (loopback, threaded) for this test, reset
  (journal and counters) and loaded with the test's ``@pytest.mark.faults(...)`` plan, or no faults.
* ``sandbox_fusion_url`` - the full ``/run_code`` URL, as verl's ``sandbox_fusion_url`` wants it.
* ``emulator_journal`` - the journal of this test's requests.
* ``sandbox_emulator_session`` - the session-scoped server itself.
* ``daytona_config`` - a ``daytona.DaytonaConfig`` (the real SDK's) pointed at this test's emulator, with its key.
* ``daytona_client`` - a sync ``daytona.Daytona`` built from ``daytona_config`` (needs the ``daytona`` extra).
* ``daytona_leaks`` - the Daytona sandbox report of this test (``.leaked``, ``.leaked_by(label)``, ``.max_alive``).

The emulator is reset after every test, which destroys the sandboxes the test left alive.

Marker: ``@pytest.mark.faults(plan)`` where plan is a dict, a YAML/JSON path or a profile name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona import SandboxReport
from emulator.executor import ExecutorConfig
from emulator.journal import Journal
from emulator.server import EmulatorServer


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandbox-emulator")
    group.addoption(
        "--emulator-python-mode",
        choices=["fast", "faithful"],
        default="fast",
        help="how the emulator runs submitted Python: fork from a warm interpreter (fast) or a fresh one",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults(plan): load this fault plan (dict, YAML/JSON path or profile name) into the emulator"
    )


@pytest.fixture(scope="session")
def sandbox_emulator_session(pytestconfig: pytest.Config) -> Iterator[EmulatorServer]:
    mode = pytestconfig.getoption("--emulator-python-mode")
    emulator = Emulator(EmulatorConfig(executor=ExecutorConfig(python_mode=mode)))
    with EmulatorServer(emulator) as server:
        yield server


@pytest.fixture
def sandbox_emulator(
    sandbox_emulator_session: EmulatorServer, request: pytest.FixtureRequest
) -> Iterator[EmulatorServer]:
    emulator = sandbox_emulator_session.emulator
    marker = request.node.get_closest_marker("faults")
    emulator.set_faults(marker.args[0] if marker and marker.args else None)
    emulator.reset()
    try:
        yield sandbox_emulator_session
    finally:
        emulator.set_faults(None)
        emulator.reset()


@pytest.fixture
def sandbox_fusion_url(sandbox_emulator: EmulatorServer) -> str:
    return sandbox_emulator.run_code_url


@pytest.fixture
def daytona_config(sandbox_emulator: EmulatorServer) -> Any:
    from daytona import DaytonaConfig

    return DaytonaConfig(
        api_url=sandbox_emulator.url + "/api", api_key=sandbox_emulator.emulator.config.daytona.api_key
    )


@pytest.fixture
def daytona_client(daytona_config: Any) -> Any:
    from daytona import Daytona

    return Daytona(daytona_config)


@pytest.fixture
def daytona_leaks(sandbox_emulator: EmulatorServer) -> SandboxReportView:
    return SandboxReportView(sandbox_emulator.emulator)


class SandboxReportView:
    """A live view of the emulator's Daytona sandbox report (computed from the journal on each access)."""

    def __init__(self, emulator: Emulator) -> None:
        self._emulator = emulator

    @property
    def report(self) -> SandboxReport:
        return self._emulator.daytona_report()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._emulator.daytona_report(), name)


@pytest.fixture
def emulator_journal(sandbox_emulator: EmulatorServer) -> Journal:
    return sandbox_emulator.emulator.journal


__all__ = ["Emulator"]
