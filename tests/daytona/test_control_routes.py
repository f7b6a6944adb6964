"""Control-plane routes beyond a sandbox's life (activity, public status, pause, recover), through the real SDK, and
the statuses the API's controller gives them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from daytona import (
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaBadRequestError,
    DaytonaConfig,
    DaytonaUnprocessableEntityError,
    SandboxState,
)
from daytona_api_client.models import Sandbox as SandboxModel

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.server import EmulatorServer

from .conftest import SteppedClock

KEY = "k-routes"
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture
def served(clock: SteppedClock) -> Iterator[EmulatorServer]:
    with EmulatorServer(Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key=KEY)), clock=clock)) as server:
        yield server


@pytest.fixture
def daytona(served: EmulatorServer) -> Daytona:
    return Daytona(DaytonaConfig(api_url=served.url + "/api", api_key=KEY))


def test_refresh_activity_restarts_the_auto_stop_timer(
    served: EmulatorServer, daytona: Daytona, clock: SteppedClock
) -> None:
    kept = daytona.create(CreateSandboxFromSnapshotParams(auto_stop_interval=1))
    idle = daytona.create(CreateSandboxFromSnapshotParams(auto_stop_interval=1))
    clock.now += 50
    kept.refresh_activity()
    clock.now += 20  # 70 s since creation, 20 s since the refresh
    kept.refresh_data()
    idle.refresh_data()
    assert (kept.state, idle.state) == (SandboxState.STARTED, SandboxState.STOPPED)
    answer = httpx.post(f"{served.url}/api/sandbox/{kept.id}/last-activity", headers=HEADERS)
    assert (answer.status_code, answer.content) == (201, b"")  # the controller returns nothing: Nest's 201


def test_set_public_is_stored_and_answered_with_the_sandbox(served: EmulatorServer, daytona: Daytona) -> None:
    sandbox = daytona.create()
    assert sandbox.public is False
    sandbox.set_public(True)
    assert daytona.get(sandbox.id).public is True
    sandbox.set_public(False)
    assert daytona.get(sandbox.id).public is False
    answer = httpx.post(f"{served.url}/api/sandbox/{sandbox.id}/public/true", headers=HEADERS)
    assert answer.status_code == 201  # no @HttpCode on the route: Nest answers a POST 201
    model = SandboxModel.from_dict(answer.json())
    assert model is not None and model.public is True
    # The API's ValidationPipe makes a boolean of the path segment: only "true" is true.
    other = httpx.post(f"{served.url}/api/sandbox/{sandbox.id}/public/yes", headers=HEADERS)
    assert (other.status_code, other.json()["public"]) == (201, False)


def test_pause_is_refused_as_the_api_refuses_a_container_sandbox(served: EmulatorServer, daytona: Daytona) -> None:
    sandbox = daytona.create()
    with pytest.raises(DaytonaUnprocessableEntityError, match="Pausing is not supported for this sandbox") as info:
        sandbox.pause()
    assert info.value.status_code == 422
    sandbox.stop()
    with pytest.raises(DaytonaBadRequestError, match="Sandbox must be in started state to pause"):
        sandbox.pause()


def test_recover_is_refused_since_no_emulated_sandbox_is_recoverable(served: EmulatorServer, daytona: Daytona) -> None:
    sandbox = daytona.create()
    with pytest.raises(DaytonaBadRequestError, match="Sandbox is not in a recoverable state"):
        sandbox.recover()
    url = f"{served.url}/api/sandbox/{sandbox.id}/recover"
    piped = httpx.post(url, params={"skipStart": "maybe"}, headers=HEADERS)
    assert (piped.status_code, piped.json()["message"]) == (400, "Validation failed (boolean string is expected)")
    missing = httpx.post(f"{served.url}/api/sandbox/nope/recover", params={"skipStart": "maybe"}, headers=HEADERS)
    assert missing.status_code == 404  # the access guard comes before the pipe
