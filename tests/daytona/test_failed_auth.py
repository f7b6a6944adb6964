"""The API's ``failed-auth`` throttler (daytonaio/daytona at 8b6f9b14a: ``failed-auth-tracker.service.ts``,
``failed-auth-rate-limit.middleware.ts``, ``all-exceptions.filter.ts``): failed authentications counted per client
IP, the ``limit``-th answered 429 and blocking the IP for a ttl, during which even a right key is refused before
authentication; the toolbox proxy's bearer-key checks count and are refused through the same API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from daytona import AsyncDaytona, Daytona, DaytonaAuthenticationError, DaytonaConfig, DaytonaRateLimitError

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona import ThrottlerSpec, tier_throttlers
from emulator.daytona.config import FAILED_AUTH
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.daytona.failed_auth import FailedAuth, ProxyTokenCache
from emulator.server import EmulatorServer

from .conftest import SteppedClock

KEY = "k-right"
GOOD = {"Authorization": f"Bearer {KEY}"}
BAD = {"Authorization": "Bearer k-wrong"}
LIMIT, TTL = 5, 60.0


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[EmulatorServer, SteppedClock]]:
    clock = SteppedClock()
    throttlers = (*tier_throttlers(1), ThrottlerSpec(FAILED_AUTH, LIMIT, TTL))
    emulator = Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key=KEY, throttlers=throttlers)), clock=clock)
    with EmulatorServer(emulator) as server:
        yield server, clock


@pytest.fixture
def server(served: tuple[EmulatorServer, SteppedClock]) -> Iterator[EmulatorServer]:
    server, clock = served
    server.emulator.reset()
    clock.now = 1000.0
    yield server
    server.emulator.reset()


@pytest.fixture
def clock(served: tuple[EmulatorServer, SteppedClock]) -> SteppedClock:
    return served[1]


def _failed_auth_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if "failed-auth" in k or k.startswith("retry-after")}


def _get(server: EmulatorServer, headers: dict[str, str], path: str = "/api/sandbox") -> httpx.Response:
    return httpx.get(server.url + path, headers=headers)


def test_the_limit_th_failure_is_a_429_that_blocks_the_client_even_with_the_right_key(
    server: EmulatorServer, clock: SteppedClock
) -> None:
    for hit in range(1, LIMIT):
        clock.now = 1000.0 + hit  # the window opened at the first failure, t=1
        refused = _get(server, BAD)
        assert refused.status_code == 401
        assert _failed_auth_headers(refused) == {
            "x-ratelimit-limit-failed-auth": "5",
            "x-ratelimit-remaining-failed-auth": str(LIMIT - hit),
            "x-ratelimit-reset-failed-auth": str(60 - (hit - 1)),
        }
    clock.now = 1010.0
    throttled = _get(server, BAD)  # the 5th failure: hits >= limit, answered 429 instead of 401
    assert throttled.status_code == 429
    body = throttled.json()
    assert list(body) == ["path", "timestamp", "statusCode", "error", "message"]  # the API's exception filter
    assert {k: body[k] for k in ("path", "statusCode", "error", "message")} == {
        "path": "/api/sandbox",
        "statusCode": 429,
        "error": "Too Many Requests",
        "message": "ThrottlerException: Too Many Requests",
    }
    assert _failed_auth_headers(throttled) == {
        "x-ratelimit-limit-failed-auth": "5",
        "x-ratelimit-remaining-failed-auth": "0",
        "x-ratelimit-reset-failed-auth": "60",
        "retry-after": "60",  # plain: the tracker sets no Retry-After-failed-auth
    }
    [entry] = [e for e in server.emulator.journal.entries("daytona.sandbox.list") if e.status == 429]
    assert entry.detail["throttler"] == FAILED_AUTH and entry.detail["retry_after"] == {"Retry-After": 60.0}

    # The middleware refuses the blocked IP before authentication: the right key too, on any route, and the
    # other throttlers never see it.
    clock.now = 1030.5
    for method, path in (("GET", "/api/sandbox"), ("POST", "/sandbox"), ("GET", "/api/sandbox/nope")):
        blocked = httpx.request(method, server.url + path, headers=GOOD, json={} if method == "POST" else None)
        assert blocked.status_code == 429
        assert blocked.json()["message"] == "ThrottlerException: Too Many Requests"
        assert _failed_auth_headers(blocked) == {
            "x-ratelimit-limit-failed-auth": "5",
            "x-ratelimit-remaining-failed-auth": "0",
            "x-ratelimit-reset-failed-auth": "40",  # the block's 39.5 s left, rounded up
            "retry-after": "40",
        }
        assert not any(k.endswith(("-authenticated", "-sandbox-create")) for k in blocked.headers)
    assert not server.emulator.daytona.store.list()

    # Per IP, as Express's req.ips[0] with trust proxy: the first address of X-Forwarded-For.
    assert _get(server, {**GOOD, "X-Forwarded-For": "10.0.0.2"}).status_code == 200
    assert _get(server, {**GOOD, "X-Forwarded-For": "127.0.0.1, 10.0.0.2"}).status_code == 429

    # The block lasts a ttl from the failure that began it.
    clock.now = 1069.9
    assert _get(server, GOOD).status_code == 429
    clock.now = 1070.0
    allowed = _get(server, GOOD)
    assert allowed.status_code == 200 and not _failed_auth_headers(allowed)
    again = _get(server, BAD)  # the window of t=1 is over too: a new one
    assert again.status_code == 401 and again.headers["x-ratelimit-remaining-failed-auth"] == "4"


def test_a_success_resets_nothing_and_each_window_counts_from_its_first_failure(
    server: EmulatorServer, clock: SteppedClock
) -> None:
    for _ in range(LIMIT - 1):
        assert _get(server, BAD).status_code == 401
    clock.now += 59
    assert _get(server, GOOD).status_code == 200  # no reset
    assert _get(server, BAD).status_code == 429  # the 5th failure of the window of t=0

    server.emulator.reset()
    for _ in range(LIMIT - 1):
        assert _get(server, BAD).status_code == 401
    clock.now += 60  # that window is over: this failure is the first of a new one
    fresh = _get(server, BAD)
    assert fresh.status_code == 401 and fresh.headers["x-ratelimit-remaining-failed-auth"] == "4"
    missing = _get(server, {})  # no key at all is an UnauthorizedException too
    assert missing.status_code == 401 and missing.headers["x-ratelimit-remaining-failed-auth"] == "3"


def _toolbox(server: EmulatorServer, sid: str, headers: dict[str, str]) -> int:
    return httpx.get(f"{server.url}/toolbox/{sid}/work-dir", headers=headers).status_code


def _remaining(server: EmulatorServer) -> str:
    """The failed-auth count left, read off a control-plane 401 (which counts one more failure)."""
    refused = _get(server, BAD)
    assert refused.status_code == 401
    return refused.headers["x-ratelimit-remaining-failed-auth"]


def test_the_toolbox_proxy_checks_keys_through_the_api_and_keeps_its_answers(
    server: EmulatorServer, clock: SteppedClock
) -> None:
    a, b = (httpx.post(server.url + "/api/sandbox", json={}, headers=GOOD).json()["id"] for _ in range(2))
    assert _toolbox(server, a, GOOD) == 200  # the proxy keeps this yes for 2 minutes

    # A wrong key on the toolbox counts against the client; the proxy keeps the no for 5 s, asking nothing.
    assert [_toolbox(server, a, BAD) for _ in range(3)] == [401] * 3
    assert _remaining(server) == "3"  # one toolbox failure and this one
    clock.now += 5
    assert _toolbox(server, a, BAD) == 401
    assert _remaining(server) == "1"

    # The 5th failure blocks the client until t=70: the yes kept for sandbox a still lets the right key in; for
    # sandbox b the proxy has to ask, gets the API's 429 and refuses.
    clock.now = 1010.0
    assert _get(server, BAD).status_code == 429
    assert _toolbox(server, a, GOOD) == 200
    assert _toolbox(server, b, GOOD) == 401
    clock.now = 1070.0
    assert _toolbox(server, b, GOOD) == 200  # kept until t=190

    # A block from t=100 to t=160 outlives the yes kept for a (until t=120): then the proxy asks again, and refuses.
    clock.now = 1100.0
    assert [_get(server, BAD).status_code for _ in range(LIMIT)] == [401] * (LIMIT - 1) + [429]
    clock.now = 1119.0
    assert _toolbox(server, a, GOOD) == 200
    clock.now = 1120.0
    assert _toolbox(server, a, GOOD) == 401
    assert _toolbox(server, b, GOOD) == 200
    clock.now = 1160.0
    assert _toolbox(server, a, GOOD) == 200


def test_the_sdk_sees_authentication_errors_then_a_rate_limit_error(
    server: EmulatorServer, clock: SteppedClock
) -> None:
    async def wrong_keys() -> DaytonaRateLimitError:
        async with AsyncDaytona(DaytonaConfig(api_url=server.url + "/api", api_key="k-wrong")) as wrong:
            for _ in range(LIMIT - 1):
                with pytest.raises(DaytonaAuthenticationError):
                    await wrong.get("some-sandbox")
            with pytest.raises(DaytonaRateLimitError) as info:
                await wrong.get("some-sandbox")
            return info.value

    error = asyncio.run(wrong_keys())
    assert error.status_code == 429
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    assert headers["retry-after"] == "60" and headers["x-ratelimit-remaining-failed-auth"] == "0"
    assert "ThrottlerException" in str(error)

    right = Daytona(DaytonaConfig(api_url=server.url + "/api", api_key=KEY))
    clock.now += 30
    with pytest.raises(DaytonaRateLimitError) as blocked:
        right.create()
    assert {k.lower(): v for k, v in (blocked.value.headers or {}).items()}["retry-after"] == "30"

    # The sync SDK's API client keeps urllib3's default Retry: a GET answered 429 with a plain Retry-After is sent
    # again after that wait, up to three times (the other throttlers' Retry-After-{name} is not read). The clock
    # stands still here, so the block never ends and each try is refused.
    clock.now += 29.5
    entries = len(server.emulator.journal.entries("daytona.sandbox.get"))
    began = time.monotonic()
    with pytest.raises(DaytonaRateLimitError):
        right.get("some-sandbox")
    assert time.monotonic() - began >= 3  # Retry-After: 1, slept three times
    assert len(server.emulator.journal.entries("daytona.sandbox.get")) - entries == 4
    clock.now += 0.5
    right.create().delete()


def test_the_throttler_is_off_unless_configured_and_a_limit_of_0_turns_it_off() -> None:
    assert FAILED_AUTH not in {spec.name for spec in EmulatedDaytona().throttlers}  # the API's env is empty
    clock = SteppedClock()
    for spec in (None, ThrottlerSpec(FAILED_AUTH, 0, TTL)):
        off = FailedAuth(spec, clock)
        assert not off.enabled and off.failed("ip") == (False, []) and off.blocked("ip") is None
    one = FailedAuth(ThrottlerSpec(FAILED_AUTH, 1, 0.5), clock)
    refused, headers = one.failed("ip")
    assert refused and dict(headers)["Retry-After"] == "1"  # a limit of 1: the first failure is the 429
    clock.now += 0.4
    assert dict(one.blocked("ip") or [])["Retry-After"] == "1"  # the block's 0.1 s left, rounded up
    clock.now += 0.1
    assert one.blocked("ip") is None

    cache = ProxyTokenCache(clock)
    cache.put("s", "t", False)
    assert cache.get("s", "t") is False and cache.get("s", "u") is None
    clock.now += ProxyTokenCache.INVALID_S
    assert cache.get("s", "t") is None
