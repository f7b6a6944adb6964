"""Errors as the SDK sees them: throttlers, quotas, timeouts, authentication, faults, failed states."""

from __future__ import annotations

import asyncio

import pytest
from daytona import (
    AsyncDaytona,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaAuthenticationError,
    DaytonaConfig,
    DaytonaError,
    DaytonaRateLimitError,
    DaytonaServiceUnavailableError,
    DaytonaTimeoutError,
    DaytonaValidationError,
    SandboxState,
)
from daytona_toolbox_api_client_async.exceptions import ApiException

from emulator.daytona import Quotas, ThrottlerSpec
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.server import EmulatorServer

from .conftest import SteppedClock, make_server

KEY = "k-test"


def _config(**kwargs: object) -> EmulatedDaytona:
    return EmulatedDaytona(api_key=KEY, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("throttler", "operation"),
    [("sandbox-create", "create"), ("sandbox-lifecycle", "stop"), ("authenticated", "get")],
)
def test_each_throttler_surfaces_as_rate_limit_error(throttler: str, operation: str) -> None:
    specs = {
        "authenticated": ThrottlerSpec("authenticated", 3),
        "sandbox-create": ThrottlerSpec("sandbox-create", 1 if throttler == "sandbox-create" else 100),
        "sandbox-lifecycle": ThrottlerSpec("sandbox-lifecycle", 0 if throttler == "sandbox-lifecycle" else 100),
    }
    if throttler != "authenticated":
        specs["authenticated"] = ThrottlerSpec("authenticated", 100)
    with make_server(_config(throttlers=tuple(specs.values()))) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url + "/api", api_key=KEY))
        sandbox = daytona.create()
        with pytest.raises(DaytonaRateLimitError) as info:
            if operation == "create":
                daytona.create()
            elif operation == "stop":
                sandbox.stop()
            else:
                for _ in range(5):
                    daytona.get(sandbox.id)
        error = info.value
        assert error.status_code == 429
        headers = {k.lower(): v for k, v in (error.headers or {}).items()}
        # NestJS's guard: the refusing throttler sets only its Retry-After (the whole block, a ttl, from this hit) ...
        assert headers[f"retry-after-{throttler}"] == "60"
        assert not any(name.startswith("x-ratelimit-") and name.endswith(f"-{throttler}") for name in headers)
        # ... and creation and the lifecycle skip the general throttler (the API's @SkipThrottle).
        if throttler != "authenticated":
            assert "x-ratelimit-limit-authenticated" not in headers
        assert "ThrottlerException" in str(error)


def test_throttler_headers_on_every_api_response(api_url: str, api_key: str, server: EmulatorServer) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"}
    response = httpx.post(api_url + "/sandbox", json={"env": {}, "labels": {}}, headers=headers)
    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-sandbox-create"] == "300"  # Tier 1 by default
    assert response.headers["x-ratelimit-remaining-sandbox-create"] == "299"
    assert "x-ratelimit-limit-authenticated" not in response.headers  # creation skips the general throttler
    sandbox_id = response.json()["id"]
    response = httpx.get(f"{api_url}/sandbox/{sandbox_id}", headers=headers)
    assert response.headers["x-ratelimit-limit-authenticated"] == "10000"
    assert response.headers["x-ratelimit-remaining-authenticated"] == "9999"  # the creation did not count
    response = httpx.delete(f"{api_url}/sandbox/{sandbox_id}", headers=headers)
    assert response.headers["x-ratelimit-limit-sandbox-lifecycle"] == "10000"
    assert "x-ratelimit-limit-authenticated" not in response.headers


def test_create_over_quota_is_a_bad_request() -> None:
    with make_server(_config(quotas=Quotas(total_cpu=2))) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        daytona.create()
        daytona.create()
        with pytest.raises(DaytonaValidationError) as info:
            daytona.create()
        assert info.value.status_code == 400
        assert "Total CPU limit exceeded. Maximum allowed: 2." in str(info.value)
        assert str(info.value).endswith(
            "\nTo increase concurrency limits, upgrade your organization's Tier by visiting "
            "https://app.daytona.io/dashboard/limits."
        )
    with make_server(_config(quotas=Quotas(total_cpu=2))) as server:  # a start asks the pool too, as the API's does
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        first = daytona.create(CreateSandboxFromSnapshotParams())
        first.stop()
        daytona.create()
        daytona.create()
        with pytest.raises(DaytonaValidationError, match="Total CPU limit exceeded"):
            first.start()
    with make_server(_config(quotas=Quotas(max_sandboxes=1))) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        daytona.create()
        with pytest.raises(DaytonaValidationError):
            daytona.create()


def test_interpreter_timeout_is_a_timeout_error(api_url: str, api_key: str) -> None:
    async def scenario() -> None:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            await sandbox.code_interpreter.run_code("state = 1")
            with pytest.raises(DaytonaTimeoutError):
                await sandbox.code_interpreter.run_code("import time\nprint('start')\ntime.sleep(30)", timeout=1)
            # The timeout interrupted the code (SIGINT, as the daemon sends it): the context lives on, state and all.
            result = await sandbox.code_interpreter.run_code("print('state' in globals())")
            assert result.stdout == "True\n"
            await sandbox.delete()

    asyncio.run(scenario())


def test_exec_timeout_is_408(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    with pytest.raises(DaytonaTimeoutError) as info:
        sandbox.process.exec("sleep 30", timeout=1)
    assert info.value.status_code == 408
    assert info.value.code == "REQUEST_TIMEOUT"
    sandbox.delete()


def test_wrong_key_is_an_authentication_error(api_url: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key="wrong"))
    with pytest.raises(DaytonaAuthenticationError) as info:
        daytona.create()
    assert info.value.status_code == 401


def test_fault_plan_on_daytona_routes(api_url: str, api_key: str, server: EmulatorServer) -> None:
    server.emulator.set_faults(
        {
            "rules": [
                {"route": "daytona.sandbox.create", "requests": "1", "fault": 503},
                {"route": "daytona.toolbox.code_run", "requests": "1", "fault": 429},
                {"route": "daytona.interpreter.execute", "requests": "1", "fault": {"hang": {"seconds": 0.2}}},
            ]
        }
    )

    async def scenario() -> None:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            with pytest.raises(DaytonaServiceUnavailableError):
                await daytona.create()
            sandbox = await daytona.create()
            with pytest.raises(ApiException) as info:  # code_run is not wrapped by the SDK's error mapping
                await sandbox.process.code_run("print(1)")
            assert info.value.status == 429
            with pytest.raises(DaytonaTimeoutError):
                await sandbox.code_interpreter.run_code("print(1)")
            assert (await sandbox.code_interpreter.run_code("print(1)")).stdout == "1\n"
            await sandbox.delete()

    asyncio.run(scenario())
    faults = server.emulator.journal.counts("fault", "daytona")
    assert faults.get("status") == 2 and faults.get("hang") == 1


def test_creation_latency_and_error_states() -> None:
    with make_server(_config(create_latency=0.3)) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        sandbox = daytona.create(timeout=10)  # polled until started
        assert sandbox.state == SandboxState.STARTED
        server.emulator.daytona.store.fail_next_creates(1, "build_failed", "bad image")
        with pytest.raises(DaytonaError, match="bad image"):
            daytona.create(CreateSandboxFromSnapshotParams(), timeout=10)
    with make_server(_config(create_latency=30)) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        with pytest.raises(DaytonaTimeoutError) as info:
            daytona.create(timeout=1)
        assert getattr(info.value, "sandbox_id", None)


def test_ephemeral_sandbox_is_deleted_on_stop(api_url: str, api_key: str, server: EmulatorServer) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create(CreateSandboxFromSnapshotParams(ephemeral=True))
    sandbox.stop()
    assert server.emulator.daytona.store.alive() == 0


def test_downloading_a_directory_is_a_clear_400_and_the_connection_survives() -> None:
    """``GET /files/download?path=<a directory>`` used to raise inside the emulator (500 with a traceback, then a reset
    connection); the daemon answers a client error in its envelope."""
    import requests

    with make_server(_config()) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url + "/api", api_key=KEY))
        sandbox = daytona.create()
        toolbox = f"{server.url}/toolbox/{sandbox.id}"
        headers = {"Authorization": f"Bearer {KEY}"}
        with requests.Session() as session:
            made = session.post(f"{toolbox}/files/folder", params={"path": "d", "mode": "755"}, headers=headers)
            assert made.status_code == 201
            answer = session.get(f"{toolbox}/files/download", params={"path": "d"}, headers=headers, timeout=10)
            assert answer.status_code == 400
            body = answer.json()
            assert (body["code"], body["source"], body["message"]) == (
                "BAD_REQUEST",
                "DAYTONA_DAEMON",
                "path must be a file",
            )
            again = session.get(f"{toolbox}/files/info", params={"path": "d"}, headers=headers, timeout=10)
            assert again.status_code == 200 and again.json()["isDir"] is True  # the connection still answers
        sandbox.delete()


def test_start_and_stop_refuse_what_the_api_refuses() -> None:
    """The API's ``start``/``stop``: a stopped sandbox is not stoppable (400), one between states is a 409, an errored
    one a 400; a started one starts again as it is."""
    import httpx

    with make_server(_config()) as server:
        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        sandbox = daytona.create()
        sandbox.start()  # started already: answered as it is
        sandbox.stop()
        with pytest.raises(DaytonaValidationError, match="Sandbox is not in a stoppable state") as info:
            sandbox.stop()
        assert info.value.status_code == 400
        sandbox.start()
        assert sandbox.state == SandboxState.STARTED
        server.emulator.daytona.store.fail_next_creates(1, "error", "boom")
        broken = httpx.post(server.url + "/sandbox", json={}, headers={"Authorization": f"Bearer {KEY}"}).json()
        for action in ("start", "stop"):
            answer = httpx.post(
                f"{server.url}/sandbox/{broken['id']}/{action}", headers={"Authorization": f"Bearer {KEY}"}
            )
            assert (answer.status_code, answer.json()["message"]) == (400, "Sandbox is in an errored state")
    with make_server(_config(create_latency=30)) as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        creating = httpx.post(server.url + "/sandbox", json={}, headers=headers).json()
        assert creating["state"] == "creating"
        for action in ("start", "stop"):
            answer = httpx.post(f"{server.url}/sandbox/{creating['id']}/{action}", headers=headers)
            assert (answer.status_code, answer.json()["message"]) == (409, "Sandbox state change in progress")
        assert httpx.get(f"{server.url}/sandbox/{creating['id']}", headers=headers).json()["state"] == "creating"


def test_delete_answers_the_soft_deleted_sandbox_and_frees_its_name() -> None:
    """The API's ``destroy``: the answer is the sandbox with its state as it was, ``desiredState`` destroyed and the
    name renamed ``DESTROYED_<name>_<epoch ms>`` (which the SDK copies into ``sandbox.name``); the name is free at
    once."""
    import re
    import time

    import httpx

    with make_server(_config()) as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        made = httpx.post(server.url + "/sandbox", json={"name": "box"}, headers=headers).json()
        before = time.time_ns() // 1_000_000
        answer = httpx.delete(f"{server.url}/sandbox/{made['id']}", headers=headers)
        after = time.time_ns() // 1_000_000
        assert answer.status_code == 200
        gone = answer.json()
        assert (gone["id"], gone["state"], gone["desiredState"]) == (made["id"], "started", "destroyed")
        stamp = re.fullmatch(r"DESTROYED_box_(\d{13})", gone["name"])
        assert stamp and before <= int(stamp.group(1)) <= after
        assert httpx.get(f"{server.url}/sandbox/{made['id']}", headers=headers).status_code == 404
        again = httpx.post(server.url + "/sandbox", json={"name": "box"}, headers=headers)
        assert again.status_code == 200  # the name was freed by the rename

        daytona = Daytona(DaytonaConfig(api_url=server.url, api_key=KEY))
        sandbox = daytona.create(CreateSandboxFromSnapshotParams(name="sdk-box"))
        sandbox.delete()
        assert sandbox.name.startswith("DESTROYED_sdk-box_")
        assert sandbox.state == SandboxState.STARTED  # as the API answers: the runner has not torn it down yet
        waited = daytona.create()
        waited.delete(wait=True)  # polls until destroyed; the 404 that follows counts as destroyed


def test_deleting_a_sandbox_between_states_is_a_409_until_it_settles() -> None:
    """The API refuses to delete a ``pending`` sandbox (creating, starting): 409, as for start and stop. Once the
    creation is done the delete goes through. An errored sandbox is not pending and deletes at once."""
    import httpx

    from emulator.app import Emulator, EmulatorConfig

    clock = SteppedClock()
    emulator = Emulator(EmulatorConfig(daytona=_config(create_latency=30)), clock=clock)
    with EmulatorServer(emulator) as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        creating = httpx.post(server.url + "/sandbox", json={}, headers=headers).json()
        assert creating["state"] == "creating"
        refused = httpx.delete(f"{server.url}/sandbox/{creating['id']}", headers=headers)
        assert (refused.status_code, refused.json()["message"]) == (409, "Sandbox state change in progress")
        assert httpx.get(f"{server.url}/sandbox/{creating['id']}", headers=headers).json()["state"] == "creating"
        clock.now += 30
        assert httpx.delete(f"{server.url}/sandbox/{creating['id']}", headers=headers).status_code == 200
        server.emulator.daytona.store.fail_next_creates(1, "error", "boom")
        broken = httpx.post(server.url + "/sandbox", json={}, headers=headers).json()
        answer = httpx.delete(f"{server.url}/sandbox/{broken['id']}", headers=headers)
        assert (answer.status_code, answer.json()["state"]) == (200, "error")


def test_a_deleted_sandbox_stays_found_until_its_teardown_with_a_destroy_latency() -> None:
    """``destroy_latency``: between the soft delete and the runner's teardown the API still finds and lists the
    sandbox (its state as it was, ``desiredState`` destroyed, renamed) and a second delete is a 409; the name is free
    at once; after the teardown it is a 404."""
    import httpx

    from emulator.app import Emulator, EmulatorConfig

    clock = SteppedClock()
    emulator = Emulator(EmulatorConfig(daytona=_config(destroy_latency=5)), clock=clock)
    with EmulatorServer(emulator) as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        made = httpx.post(server.url + "/sandbox", json={"name": "box"}, headers=headers).json()
        url = f"{server.url}/sandbox/{made['id']}"
        answer = httpx.delete(url, headers=headers).json()
        found = httpx.get(url, headers=headers).json()
        assert (found["state"], found["desiredState"], found["name"]) == ("started", "destroyed", answer["name"])
        listed = httpx.get(server.url + "/sandbox", headers=headers).json()["items"]
        assert [item["id"] for item in listed] == [made["id"]]
        again = httpx.delete(url, headers=headers)
        assert (again.status_code, again.json()["message"]) == (409, "Sandbox state change in progress")
        assert httpx.post(server.url + "/sandbox", json={"name": "box"}, headers=headers).status_code == 200
        clock.now += 5
        assert httpx.get(url, headers=headers).status_code == 404
        assert httpx.delete(url, headers=headers).status_code == 404
        assert [i["name"] for i in httpx.get(server.url + "/sandbox", headers=headers).json()["items"]] == ["box"]


def test_an_errored_sandbox_being_deleted_is_not_found() -> None:
    """The API's ``findOneByIdOrName``: an errored sandbox whose desired state is destroyed is a 404 at once, and a
    listing shows it only with ``includeErroredDeleted``, while its teardown (``destroy_latency``) is pending."""
    import httpx

    from emulator.app import Emulator, EmulatorConfig

    clock = SteppedClock()
    emulator = Emulator(EmulatorConfig(daytona=_config(destroy_latency=5)), clock=clock)
    with EmulatorServer(emulator) as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        server.emulator.daytona.store.fail_next_creates(1, "error", "boom")
        broken = httpx.post(server.url + "/sandbox", json={}, headers=headers).json()
        url = f"{server.url}/sandbox/{broken['id']}"
        assert httpx.delete(url, headers=headers).json()["state"] == "error"
        assert httpx.get(url, headers=headers).status_code == 404
        assert httpx.delete(url, headers=headers).status_code == 404
        assert httpx.get(server.url + "/sandbox", headers=headers).json()["items"] == []
        shown = httpx.get(server.url + "/sandbox", params={"includeErroredDeleted": "true"}, headers=headers).json()
        assert [item["id"] for item in shown["items"]] == [broken["id"]]


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "2", True, 86_401])
@pytest.mark.parametrize("name", ["create_latency", "start_latency", "destroy_latency"])
def test_a_latency_that_cannot_be_waited_is_refused(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"DaytonaConfig.{name} must be a number of seconds from 0 to 86400"):
        EmulatedDaytona(**{name: value})  # type: ignore[arg-type]
