"""Invariant monitors: a limiter that over-admits, jumps the queue or over-releases is caught; the project's
``local`` limiter in front of the emulator passes the same checks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from emulator.server import EmulatorServer
from harness.chaos.invariants import arrival_order, check_fifo, check_max_in_flight, check_permit_balance, grant_order
from harness.chaos.judges import ChaosJudge
from harness.ratelimit import LimiterConfig, open_limiter
from harness.ratelimit.base import LimiterStats

RUN_CODE = "sandbox_fusion.run_code"
SLOW = {"rules": [{"id": "slow", "route": RUN_CODE, "latency": 0.05}]}
LIMIT = 3


async def post(session: aiohttp.ClientSession, url: str, key: str) -> None:
    body = {"code": f"print({key!r})", "language": "python"}
    async with session.post(url, json=body, headers={"X-Emulator-Key": key}) as response:
        await response.read()


async def through(url: str, keys: list[str], gate: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]) -> None:
    """Each key is one call; ``gate(call)`` runs it under the limiter being judged. Calls queue in key order."""
    async with aiohttp.ClientSession() as session:
        tasks = []
        for key in keys:

            async def call(key: str = key) -> None:
                await post(session, url, key)

            tasks.append(asyncio.create_task(gate(call)))
            await asyncio.sleep(0)  # each task reaches the limiter before the next is made: a known request order
        await asyncio.gather(*tasks)


class OverAdmitting:
    """A broken limiter: one permit too many, as verl 0.7.1's semaphore ends up after one release without an
    acquire."""

    def __init__(self, limit: int) -> None:
        self.sem = asyncio.Semaphore(limit + 1)

    async def __call__(self, call: Callable[[], Awaitable[None]]) -> None:
        async with self.sem:
            await call()


class Lifo:
    """A broken limiter: admits the newest waiter first."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self.waiters: list[asyncio.Future[None]] = []

    async def __call__(self, call: Callable[[], Awaitable[None]]) -> None:
        if self.free > 0:
            self.free -= 1
        else:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            await fut
        try:
            await call()
        finally:
            if self.waiters:
                self.waiters.pop().set_result(None)  # newest first
            else:
                self.free += 1


KEYS = [f"k{i:02d}" for i in range(12)]


@pytest.mark.faults(SLOW)
def test_over_admitting_limiter_is_caught(sandbox_emulator: EmulatorServer) -> None:
    asyncio.run(through(sandbox_emulator.run_code_url, KEYS, OverAdmitting(LIMIT)))
    report = check_max_in_flight(sandbox_emulator.emulator.journal, {RUN_CODE: LIMIT})
    (finding,) = report.by_rule("max-in-flight")
    assert finding.figures == {"peak": LIMIT + 1, "limit": LIMIT}
    with pytest.raises(AssertionError, match="4 requests in flight"):
        report.assert_ok()


@pytest.mark.faults(SLOW)
def test_lifo_limiter_is_caught(sandbox_emulator: EmulatorServer) -> None:
    asyncio.run(through(sandbox_emulator.run_code_url, KEYS, Lifo(LIMIT)))
    report = check_fifo(arrival_order(sandbox_emulator.emulator.journal), KEYS, max_overtaken=LIMIT - 1)
    assert report.by_rule("fifo"), report.render()
    assert check_max_in_flight(sandbox_emulator.emulator.journal, {RUN_CODE: LIMIT}).ok


@pytest.mark.faults(SLOW)
def test_local_limiter_passes(sandbox_emulator: EmulatorServer) -> None:
    limiter = open_limiter(LimiterConfig(name="judged", limit=LIMIT))
    stats: list[LimiterStats] = []

    async def gate(call: Callable[[], Awaitable[None]]) -> None:
        async with limiter.slot():
            await call()

    async def main() -> None:
        await through(sandbox_emulator.run_code_url, KEYS, gate)
        stats.append(await limiter.stats())
        await limiter.aclose()

    asyncio.run(main())
    journal = sandbox_emulator.emulator.journal
    check_max_in_flight(journal, {RUN_CODE: LIMIT}).assert_ok()
    check_fifo(arrival_order(journal), KEYS, max_overtaken=LIMIT - 1).assert_ok()
    check_permit_balance(stats[0]).assert_ok()
    assert stats[0].acquires == len(KEYS)
    judge = ChaosJudge.of(sandbox_emulator.emulator)
    judge.assert_invariants(limits={RUN_CODE: LIMIT}, limiter_stats=stats[0])


def test_grant_order_from_a_limiter_log() -> None:
    events: list[tuple[float, str, str, int]] = [(0.0, "grant", "a", 1), (0.1, "release", "a", 0)]
    events += [(0.2, "grant", "c", 1), (0.3, "grant", "b", 2)]
    assert grant_order(events) == ["a", "c", "b"]
    report = check_fifo(grant_order(events), ["a", "b", "c"])
    (finding,) = report.by_rule("fifo")
    assert finding.identity == "b"


BALANCED = LimiterStats("l", "local", limit=2, cap=2, max_held=2, acquires=5, releases=5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"late_releases": 1}, "over-release"),
        ({"max_held": 3}, "3 permits held at once"),
        ({"releases": 4, "held": 1}, "acquires 5 != releases 4"),
        ({"waiting": 2}, "2 waiting"),
    ],
)
def test_permit_balance_violations(change: dict[str, Any], message: str) -> None:
    check_permit_balance(BALANCED).assert_ok()
    report = check_permit_balance(replace(BALANCED, **change))
    assert any(message in f.message for f in report.findings), report.render()


def test_reclaimed_permits_balance() -> None:
    """A holder that died: its permit was reclaimed, not released; the books still balance."""
    check_permit_balance(replace(BALANCED, releases=4, reclaimed=1)).assert_ok()


def test_withdrawn_permits_balance() -> None:
    """A permit granted to a waiter whose caller had given up goes back as withdrawn: the books still balance."""
    check_permit_balance(replace(BALANCED, releases=4, withdrawn=1)).assert_ok()
    report = check_permit_balance(replace(BALANCED, releases=3, withdrawn=1))
    assert any("withdrawn 1" in f.message for f in report.findings), report.render()


def test_a_correct_limiter_whose_grant_was_withdrawn_balances() -> None:
    """The grant to a waiter that is cancelled in the same instant is withdrawn by the limiter (cancel-safe)."""

    async def run() -> LimiterStats:
        limiter = open_limiter(LimiterConfig(name="withdraw", limit=1))
        first = await limiter.acquire()
        second = asyncio.create_task(limiter.acquire())
        for _ in range(100):  # a few turns of the loop until the second caller waits in the queue
            if (await limiter.stats()).waiting:
                break
            await asyncio.sleep(0)
        assert (await limiter.stats()).waiting == 1
        await limiter.release(first)  # the waiter is granted ...
        second.cancel()  # ... and its caller gives up before it ran
        with contextlib.suppress(asyncio.CancelledError):
            await second
        stats = await limiter.stats()
        await limiter.aclose()
        return stats

    stats = asyncio.run(run())
    assert stats.withdrawn == 1, stats
    check_permit_balance(stats).assert_ok()


def test_permit_balance_refuses_what_is_not_stats() -> None:
    """``limiter.stats()`` not awaited, or the method itself, would read as all zeros and pass."""

    async def stats() -> LimiterStats:
        return BALANCED

    pending = stats()
    with pytest.raises(TypeError, match="not awaited"):
        check_permit_balance(pending)
    pending.close()
    with pytest.raises(TypeError, match="not awaited or not called"):
        check_permit_balance(stats)
    with pytest.raises(TypeError, match="lacks"):
        check_permit_balance({"name": "l"})


def test_invariants_with_nothing_to_check_fail() -> None:
    """A misspelled route has no entries, and FIFO with no admitted id compares nothing: neither may pass."""
    report = check_max_in_flight([], {"sandbox_fusion.runcode": 0})
    assert not report.ok and "nothing was checked" in report.findings[0].message
    fifo = check_fifo([], ["a", "b", "c"])
    assert not fifo.ok and "nothing to check" in fifo.findings[0].message
    assert not check_fifo(["a"], []).ok
