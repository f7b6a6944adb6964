"""pytest options ``--reference-url`` / ``--reference-service`` / ``--reference-api-key``: run the project's
conformance tests (``tests/reference``) against a live Sandbox Fusion or Daytona instead of the emulator, so users
can re-validate fidelity themselves.

Tests take a base URL from ``reference_sandbox_fusion_url`` or a :class:`~harness.reference.suite.Target` from
``reference_daytona``; without the options these point at an emulator on a loopback port, started once per session.
With ``--reference-url``, the other service's tests are deselected (they would test the emulator), and a run where
no test reaches the live service is a usage error: a green run means the live service was tested.

The options are checked once, at the start: a ``--reference-url`` that is malformed, that nothing answers on, or
whose probe (``suite.PROBES``) fails (a wrong base URL, a refused key) is one usage error, not a failure in every
test; so is ``--reference-service`` or ``--reference-api-key`` without ``--reference-url``, and a key for Sandbox
Fusion, which takes none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from harness.reference.suite import SERVICES, Target, base_url, key_problem, probe
from harness.urls import unreachable, url_problem, without_userinfo


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandbox-emulator reference")
    group.addoption(
        "--reference-url",
        metavar="URL",
        default=None,
        help="run the reference tests against this live service (Sandbox Fusion root URL, Daytona API URL)",
    )
    group.addoption(
        "--reference-service",
        choices=SERVICES,
        default=None,  # None: sandbox-fusion; given without --reference-url, it is refused
        help="which service --reference-url is (default: sandbox-fusion)",
    )
    group.addoption(
        "--reference-api-key",
        metavar="KEY",
        default=None,
        help="Daytona bearer key for --reference-url (default: $DAYTONA_API_KEY)",
    )


def _option(config: pytest.Config, name: str, default: Any = None) -> Any:
    """An option's value, or ``default`` when this plugin's options are not registered."""
    return config.getoption(name, default=default)


def _service(config: pytest.Config) -> str:
    """The service ``--reference-url`` is (``--reference-service``, default ``sandbox-fusion``)."""
    return str(_option(config, "reference_service") or "sandbox-fusion")


def _api_key(config: pytest.Config) -> str | None:
    """The live Daytona's bearer key: ``--reference-api-key``, else ``$DAYTONA_API_KEY``."""
    return _option(config, "reference_api_key") or os.environ.get("DAYTONA_API_KEY")


def pytest_configure(config: pytest.Config) -> None:
    url = _option(config, "reference_url")
    service = _service(config)
    if not url and _option(config, "reference_service") is not None:
        raise pytest.UsageError(
            "--reference-service has no effect without --reference-url (the reference tests then run against the "
            "emulator)"
        )
    if _option(config, "reference_api_key") is not None:
        if not url:
            raise pytest.UsageError(
                "--reference-api-key is for a live Daytona (--reference-url with --reference-service daytona); "
                "the emulator uses its own"
            )
        if service != "daytona":
            raise pytest.UsageError(
                "--reference-api-key is Daytona's (--reference-service daytona); Sandbox Fusion takes none"
            )
    if not url:
        return
    # Said once, not as a connection error (or, for a wrong base URL, a 404) in every test.
    problem = url_problem(str(url)) or unreachable(str(url))
    if problem is not None:
        raise pytest.UsageError(f"--reference-url: {problem}")
    key = _api_key(config) if service == "daytona" else None
    problem = key_problem(key)
    if problem is not None:
        raise pytest.UsageError(f"--reference-api-key (or $DAYTONA_API_KEY): {problem}")
    problem = probe(Target(service, base_url(service, str(url)), key))
    if problem is not None:
        # probe() speaks of the CLI's --api-key; here the key is --reference-api-key.
        problem = problem.replace("without --api-key", "without --reference-api-key")
        raise pytest.UsageError(f"--reference-url: {problem}")


#: The fixture through which a test reaches each service.
FIXTURES = {"sandbox-fusion": "reference_sandbox_fusion_url", "daytona": "reference_daytona"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--reference-url``, run only what tests the live service: a test of the other service would run against
    the emulator, and a pass would be read as the live service's. A run in which no test reaches the live service
    is a usage error, not a pass that tested nothing of it."""
    url = _option(config, "reference_url")
    if not url:
        return
    live, other = FIXTURES[_service(config)], FIXTURES[_other(_service(config))]
    names = {item: set(getattr(item, "fixturenames", ())) for item in items}
    deselected = [item for item in items if other in names[item] and live not in names[item]]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
    if not any(live in names[item] for item in items):
        raise pytest.UsageError(
            f"--reference-url: no selected test runs against the live {_service(config)} (none uses the {live} "
            "fixture); select the reference tests, e.g. tests/reference"
        )


def _other(service: str) -> str:
    return next(s for s in SERVICES if s != service)


def pytest_report_header(config: pytest.Config) -> str | None:
    url = _option(config, "reference_url")
    if not url:
        return None
    return f"reference: {_service(config)} at {without_userinfo(str(url))} (not the emulator)"


def _live(config: pytest.Config, service: str) -> str | None:
    url = _option(config, "reference_url")
    if url and _service(config) == service:
        return base_url(service, str(url))
    return None


@pytest.fixture(scope="session")
def reference_emulator() -> Iterator[Any]:
    """The emulator the reference tests run against when no live service is named."""
    from emulator.app import Emulator
    from emulator.server import EmulatorServer

    with EmulatorServer(Emulator()) as server:
        yield server


@pytest.fixture
def reference_is_live(pytestconfig: pytest.Config) -> bool:
    """True when the reference tests run against a live service."""
    return bool(_option(pytestconfig, "reference_url"))


@pytest.fixture
def reference_sandbox_fusion_url(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> str:
    """Base URL of the Sandbox Fusion under test (``url + "/run_code"`` is what verl wants)."""
    live = _live(pytestconfig, "sandbox-fusion")
    if live:
        return live
    return str(request.getfixturevalue("reference_emulator").url)


@pytest.fixture
def reference_daytona(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Target:
    """The Daytona under test: its API URL and bearer key."""
    live = _live(pytestconfig, "daytona")
    if live:
        return Target("daytona", live, _api_key(pytestconfig))
    server = request.getfixturevalue("reference_emulator")
    return Target("daytona", server.url + "/api", server.emulator.config.daytona.api_key)
