"""pytest plugin: an emulator for the whole session, reset before every test, with a fault-plan marker.

Fixtures:

* ``sandbox_emulator`` - the :class:`~emulator.server.EmulatorServer` (loopback, threaded) for this test, reset
  (journal and counters) and loaded with the test's ``@pytest.mark.faults(...)`` plan, or no faults.
* ``sandbox_fusion_url`` - the full ``/run_code`` URL, as verl's ``sandbox_fusion_url`` wants it.
* ``emulator_journal`` - the journal of this test's requests.
* ``sandbox_emulator_session`` - the session-scoped server itself.

Marker: ``@pytest.mark.faults(plan)`` where plan is a dict, a YAML/JSON path or a profile name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulator.app import Emulator, EmulatorConfig
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
def emulator_journal(sandbox_emulator: EmulatorServer) -> Journal:
    return sandbox_emulator.emulator.journal


__all__ = ["Emulator"]
