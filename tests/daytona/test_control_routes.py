"""Control-plane routes beyond a sandbox's life (activity, public status, pause, recover), through the real SDK, and
the statuses the API's controller gives them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import httpx
import pytest
from daytona import (
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaBadRequestError,
    DaytonaConfig,
    DaytonaError,
    DaytonaNotFoundError,
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


def test_what_is_not_emulated_says_so_instead_of_not_found(served: EmulatorServer, daytona: Daytona) -> None:
    """A route the emulator does not serve is a 501 in the envelope of who would answer it (the API's, the daemon's),
    not a 404, which the SDK raises as ``DaytonaNotFoundError`` ("sandbox not found")."""
    sandbox = daytona.create()
    calls: dict[str, Callable[[], object]] = {
        "set_ttl": lambda: sandbox.set_ttl(5),
        "set_auto_pause_interval": lambda: sandbox.set_auto_pause_interval(5),
        "update_network_settings": lambda: sandbox.update_network_settings(network_block_all=True),
        "archive": sandbox.archive,
        "update_env": lambda: sandbox.update_env({"A": "b"}),
        "get_metrics_latest": sandbox.get_metrics_latest,
    }
    for name, call in calls.items():
        with pytest.raises(DaytonaError) as info:
            call()
        assert not isinstance(info.value, DaytonaNotFoundError), name
        assert info.value.status_code == 501 and "is not emulated by sandbox-emulator" in str(info.value), name
    api = httpx.post(f"{served.url}/api/sandbox/{sandbox.id}/ttl/5", headers=HEADERS).json()
    assert (api["statusCode"], api["error"], api["path"]) == (
        501,
        "Not Implemented",
        f"/api/sandbox/{sandbox.id}/ttl/5",
    )
    daemon = httpx.get(f"{served.url}/toolbox/{sandbox.id}/system/metrics", headers=HEADERS).json()
    assert (daemon["code"], daemon["source"], daemon["method"]) == ("NOT_IMPLEMENTED", "DAYTONA_DAEMON", "GET")
    refused = httpx.post(f"{served.url}/api/sandbox/{sandbox.id}/ttl/5", headers={"Authorization": "Bearer no"})
    assert refused.status_code == 401  # the key is checked first, as on a route served


def test_the_apis_fixed_paths_never_name_a_sandbox(served: EmulatorServer, daytona: Daytona) -> None:
    """``GET /sandbox/paginated`` is the API's deprecated listing, declared before ``/sandbox/{idOrName}``: never the
    sandbox named ``paginated``."""
    daytona.create(CreateSandboxFromSnapshotParams(name="paginated"))
    for path in ("/api/sandbox/paginated", "/sandbox/for-runner"):
        answer = httpx.get(served.url + path, headers=HEADERS)
        assert answer.status_code == 501, path


def test_a_trailing_slash_is_still_redirected_to_the_route(served: EmulatorServer, daytona: Daytona) -> None:
    sandbox = daytona.create()
    for path in (f"/api/sandbox/{sandbox.id}/", f"/toolbox/{sandbox.id}/files/info/?path=."):
        moved = httpx.get(served.url + path, headers=HEADERS)
        assert moved.status_code == 307, path
        assert moved.headers["location"] == served.url + path.replace("/?", "?").rstrip("/")


def test_replacing_labels_answers_the_whole_sandbox(served: EmulatorServer, daytona: Daytona) -> None:
    """The API's ``replaceLabels`` returns ``toSandboxDto`` (the OpenAPI's ``SandboxLabels`` reads its ``labels``)."""
    sandbox = daytona.create(CreateSandboxFromSnapshotParams(labels={"a": "1"}))
    assert sandbox.set_labels({"b": "2"}) == {"b": "2"}
    assert daytona.get(sandbox.id).labels == {"b": "2"}
    answer = httpx.put(f"{served.url}/api/sandbox/{sandbox.id}/labels", json={"labels": {"c": "3"}}, headers=HEADERS)
    assert answer.status_code == 200
    model = SandboxModel.from_dict(answer.json())
    assert model is not None and (model.id, model.labels, model.state) == (sandbox.id, {"c": "3"}, "started")


def _interval(served: EmulatorServer, sid: str, which: str, raw: str) -> httpx.Response:
    return httpx.post(f"{served.url}/api/sandbox/{sid}/{which}/{raw}", headers=HEADERS)


def test_auto_archive_zero_is_the_maximum_and_larger_values_are_cut_to_it(
    served: EmulatorServer, daytona: Daytona
) -> None:
    """The API's ``resolveAutoArchiveInterval``: 0 means ``maxAutoArchiveInterval`` (43200 by default), a larger
    value is cut to it; at creation too."""
    sandbox = daytona.create(CreateSandboxFromSnapshotParams(auto_archive_interval=0))
    assert sandbox.auto_archive_interval == 43200
    sandbox.set_auto_archive_interval(60)
    assert daytona.get(sandbox.id).auto_archive_interval == 60
    sandbox.set_auto_archive_interval(0)
    assert daytona.get(sandbox.id).auto_archive_interval == 43200
    for raw in ("50000", "1e9", "Infinity", "99999.5"):  # Math.min cuts before the column sees a fraction
        assert _interval(served, sandbox.id, "autoarchive", raw).json()["autoArchiveInterval"] == 43200, raw


def test_interval_refusals_are_the_apis(served: EmulatorServer, daytona: Daytona) -> None:
    """The service's messages for a negative auto-stop or auto-archive interval (after the sandbox is found), any
    negative auto-delete kept (never), and what is no 32-bit integer after JavaScript's ``Number`` a 500 (the
    column refuses it)."""
    sandbox = daytona.create()
    stop = _interval(served, sandbox.id, "autostop", "-1")
    assert (stop.status_code, stop.json()["message"]) == (400, "Auto-stop interval must be non-negative")
    archive = _interval(served, sandbox.id, "autoarchive", "-5")
    assert (archive.status_code, archive.json()["message"]) == (400, "Auto-archive interval must be non-negative")
    assert _interval(served, "nope", "autostop", "-1").status_code == 404  # found before it is checked
    assert _interval(served, sandbox.id, "autodelete", "-7").json()["autoDeleteInterval"] == -7
    for raw, minutes in {" 12 ": 12, "0x10": 16, "1e2": 100, "-0": 0}.items():
        assert _interval(served, sandbox.id, "autostop", raw).json()["autoStopInterval"] == minutes, raw
    for raw in ("abc", "1.5", "NaN", "3000000000", "-0x10"):
        failed = _interval(served, sandbox.id, "autostop", raw)
        assert (failed.status_code, failed.json()["message"]) == (500, "An unexpected error occurred."), raw
    assert daytona.get(sandbox.id).auto_stop_interval == 0  # none of them stored
    gpu = httpx.post(f"{served.url}/api/sandbox", json={"gpu": 1, "autoDeleteInterval": 0}, headers=HEADERS).json()
    kept = _interval(served, gpu["id"], "autodelete", "5")
    assert (kept.status_code, kept.json()["message"]) == (400, "GPU sandboxes must remain ephemeral")


def test_the_interval_routes_answer_201_as_nest_answers_a_post(served: EmulatorServer, daytona: Daytona) -> None:
    """No ``@HttpCode`` on the autostop, autoarchive and autodelete routes: NestJS's 201 for a POST, with the
    Sandbox; the SDK's setters take it."""
    sandbox = daytona.create()
    for which in ("autostop", "autoarchive", "autodelete"):
        answer = _interval(served, sandbox.id, which, "30")
        assert answer.status_code == 201, which
        assert SandboxModel.from_dict(answer.json()) is not None
    sandbox.set_autostop_interval(20)
    sandbox.set_auto_delete_interval(40)
    assert (daytona.get(sandbox.id).auto_stop_interval, daytona.get(sandbox.id).auto_delete_interval) == (20, 40)


def test_stopping_an_ephemeral_sandbox_soft_deletes_it(served: EmulatorServer, daytona: Daytona) -> None:
    """The API's ``stop`` of an ephemeral sandbox (auto-delete 0) is its soft delete: the answer keeps the state,
    ``desiredState`` is destroyed and the name ``DESTROYED_<name>_<epoch ms>``; the sandbox is gone after."""
    made = httpx.post(
        f"{served.url}/api/sandbox", json={"name": "eph", "autoDeleteInterval": 0}, headers=HEADERS
    ).json()
    answer = httpx.post(f"{served.url}/api/sandbox/{made['id']}/stop", headers=HEADERS)
    assert answer.status_code == 200
    gone = answer.json()
    assert (gone["state"], gone["desiredState"]) == ("started", "destroyed")
    assert re.fullmatch(r"DESTROYED_eph_\d{13}", gone["name"]), gone["name"]
    assert httpx.get(f"{served.url}/api/sandbox/{made['id']}", headers=HEADERS).status_code == 404
    sandbox = daytona.create(CreateSandboxFromSnapshotParams(ephemeral=True))
    sandbox.stop()  # waits for stopped or destroyed: the 404 after counts as destroyed
    assert sandbox.state == SandboxState.DESTROYED
    assert served.emulator.daytona.store.alive() == 0


def test_an_ephemeral_sandbox_stopped_with_a_destroy_latency_stays_until_its_teardown(clock: SteppedClock) -> None:
    config = EmulatedDaytona(api_key=KEY, destroy_latency=5)
    with EmulatorServer(Emulator(EmulatorConfig(daytona=config), clock=clock)) as server:
        made = httpx.post(f"{server.url}/sandbox", json={"autoDeleteInterval": 0}, headers=HEADERS).json()
        url = f"{server.url}/sandbox/{made['id']}"
        answer = httpx.post(url + "/stop", headers=HEADERS).json()
        found = httpx.get(url, headers=HEADERS).json()
        assert (found["state"], found["desiredState"], found["name"]) == ("started", "destroyed", answer["name"])
        again = httpx.post(url + "/stop", headers=HEADERS)
        assert (again.status_code, again.json()["message"]) == (409, "Sandbox state change in progress")
        clock.now += 5
        assert httpx.get(url, headers=HEADERS).status_code == 404


def test_a_route_served_for_other_methods_answers_405_not_a_redirect_or_501(
    served: EmulatorServer, daytona: Daytona
) -> None:
    """Where a route serves the path for other methods, the answer is Starlette's 405 with its ``Allow`` (as before
    the catch-alls): not "not emulated" (the route is), nor a 307 to the slash twin, whose own 307 would come back."""
    sandbox = daytona.create()
    tb = f"{served.url}/toolbox/{sandbox.id}"
    calls = [
        ("PUT", f"{tb}/files", "GET"),
        ("POST", f"{tb}/files/", "GET"),
        ("GET", f"{tb}/process/execute", "POST"),
        ("POST", f"{tb}/files/info/", "GET"),  # the twin /files/info serves GET only: no redirect to it
        ("PATCH", f"{served.url}/api/sandbox/{sandbox.id}", "GET"),
        ("GET", f"{served.url}/api/sandbox/{sandbox.id}/start", "POST"),
    ]
    with httpx.Client(headers=HEADERS, follow_redirects=True) as client:
        for method, url, allowed in calls:
            answer = client.request(method, url)
            assert (answer.status_code, answer.history) == (405, []), (method, url)
            assert allowed in answer.headers["allow"].split(", "), (method, url)
            assert answer.json() == {"detail": "Method Not Allowed"}, (method, url)
