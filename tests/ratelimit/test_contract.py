"""The limiter contract, run on every backend (local, ray, fakeredis, a real redis-server): caps and waves, FIFO,
bounded releases, cancel safety, rotten executions, config disagreement, adaptive shrink/grow, rate per second.

Assertions read event order (a journal recorded in the test) and the limiter's own counters, never wall-clock
thresholds (except lower bounds a limiter cannot beat)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from typing import Any

import pytest

from harness.ratelimit import LimiterConfigError, LimiterError, LimiterStats, Ticket


async def settle(limiter: Any, *, held: int = 0, waiting: int = 0, timeout: float = 20.0) -> LimiterStats:
    """Poll the limiter's stats until ``held``/``waiting`` reach the wanted values (withdrawals are asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        stats: LimiterStats = await limiter.stats()
        if (stats.held, stats.waiting) == (held, waiting) or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.02)


def balanced(stats: LimiterStats) -> bool:
    return stats.acquires == stats.releases + stats.withdrawn + stats.reclaimed + stats.held


def _inside(events: list[tuple[str, int]]) -> int:
    """Holders inside their slot now, by the test's journal of entries and exits."""
    return sum(1 if kind == "enter" else -1 for kind, _ in events)


#: How long the first holders of ``test_cap_and_waves`` wait for the cap to fill before the test fails.
FULL_TIMEOUT_S = 30.0


def test_cap_and_waves(make_limiter: Any) -> None:
    """7 equal tasks through a cap of 3 go in 3 waves: the k-th admission waits for k-2 exits."""
    cap, n = 3, 7

    async def main() -> tuple[list[tuple[str, int]], LimiterStats]:
        limiter = make_limiter(limit=cap)
        events: list[tuple[str, int]] = []
        full = asyncio.Event()

        async def task(i: int) -> None:
            async with limiter.slot():
                events.append(("enter", i))
                if _inside(events) >= cap:
                    full.set()
                # The first holders keep their slots until `cap` are inside, so the cap is reached however slowly
                # the backend grants (a Ray round trip can outlast a short hold); a limiter that never admits `cap`
                # at once fails here.
                try:
                    await asyncio.wait_for(full.wait(), FULL_TIMEOUT_S)
                except asyncio.TimeoutError:
                    raise AssertionError(f"{_inside(events)} of {cap} slots held after {FULL_TIMEOUT_S} s") from None
                await asyncio.sleep(0.05)
                events.append(("exit", i))

        await asyncio.gather(*(task(i) for i in range(n)))
        stats = await limiter.stats()
        await limiter.aclose()
        return events, stats

    events, stats = asyncio.run(main())
    in_flight = peak = exits = entries = 0
    for kind, _ in events:
        if kind == "enter":
            assert exits >= entries - cap + 1, f"admission {entries} before {entries - cap + 1} exits: {events}"
            entries += 1
            in_flight += 1
            peak = max(peak, in_flight)
        else:
            exits += 1
            in_flight -= 1
    assert peak == cap
    waves = 1 + sum(
        1 for i, (kind, _) in enumerate(events) if kind == "enter" and i >= cap and events[i - 1][0] == "exit"
    )
    assert waves >= math.ceil(n / cap)
    assert (stats.max_held, stats.acquires, stats.releases, stats.held, stats.waiting) == (cap, n, n, 0, 0)


def test_fifo_admission(make_limiter: Any) -> None:
    async def main() -> list[int]:
        limiter = make_limiter(limit=1)
        first = await limiter.acquire()
        order: list[int] = []

        async def waiter(i: int) -> None:
            async with limiter.slot():
                order.append(i)

        tasks = []
        for i in range(6):
            tasks.append(asyncio.create_task(waiter(i)))
            assert (await settle(limiter, held=1, waiting=i + 1)).waiting == i + 1
        await limiter.release(first)
        await asyncio.gather(*tasks)
        await limiter.aclose()
        return order

    assert asyncio.run(main()) == list(range(6))


def test_release_is_bounded(make_limiter: Any) -> None:
    """A second release and a release of a ticket never issued raise; neither adds capacity."""

    async def main() -> LimiterStats:
        limiter = make_limiter(limit=2)
        ticket = await limiter.acquire()
        await limiter.release(ticket)
        with pytest.raises(LimiterError):
            await limiter.release(ticket)
        forged = Ticket(limiter.name, "never-issued", ticket.holder)
        with pytest.raises(LimiterError):
            await limiter.release(forged)
        held = [await limiter.acquire(), await limiter.acquire()]
        third = asyncio.create_task(limiter.acquire())
        stats = await settle(limiter, held=2, waiting=1)
        assert (stats.held, stats.waiting) == (2, 1)  # still capped at 2: the bad releases added nothing
        for t in held:
            await limiter.release(t)
        await limiter.release(await third)
        stats = await limiter.stats()
        await limiter.aclose()
        return stats

    stats = asyncio.run(main())
    assert (stats.held, stats.acquires, stats.releases, stats.max_held) == (0, 4, 4, 2)


def test_cancelled_acquires_do_not_leak(make_limiter: Any) -> None:
    """Cancel waiters (the head included), then cancel at random moments: all capacity comes back, once."""

    async def main() -> LimiterStats:
        limiter = make_limiter(limit=1)
        first = await limiter.acquire()
        order: list[int] = []

        async def waiter(i: int) -> None:
            async with limiter.slot():
                order.append(i)

        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(waiter(i)))
            await settle(limiter, held=1, waiting=i + 1)
        for i in (0, 2, 3):
            tasks[i].cancel()
        await settle(limiter, held=1, waiting=2)
        await limiter.release(first)
        await asyncio.gather(*tasks, return_exceptions=True)
        assert order == [1, 4]

        rng = random.Random(7)

        async def impatient() -> None:
            try:
                ticket = await asyncio.wait_for(limiter.acquire(), rng.uniform(0.0, 0.03))
            except asyncio.TimeoutError:
                return
            await asyncio.sleep(rng.uniform(0, 0.01))
            await limiter.release(ticket)

        await asyncio.gather(*(impatient() for _ in range(40)))
        stats = await settle(limiter, held=0, waiting=0)
        ticket = await asyncio.wait_for(limiter.acquire(), 10)  # capacity is really back
        await limiter.release(ticket)
        await limiter.aclose()
        return stats

    stats = asyncio.run(main())
    assert (stats.held, stats.waiting) == (0, 0), stats
    assert stats.max_held == 1
    assert balanced(stats)


def test_acquire_after_an_absorbed_cancellation(make_limiter: Any) -> None:
    """A task that caught one cancellation earlier (without ``uncancel``) still acquires: only a cancellation of
    this acquire may end it. Its ``cancelling()`` stays 1, which the redis client once took for a swallowed one."""

    async def worker(limiter: Any) -> int:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # absorbed, as a library's cleanup step may do
            await asyncio.sleep(0)
        assert getattr(task, "cancelling", lambda: 1)() == 1  # Task.cancelling() is new in 3.11; the rest runs on 3.10
        async with limiter.slot():
            return int(limiter.held)

    async def main() -> tuple[int, LimiterStats]:
        limiter = make_limiter(limit=2)
        held = await asyncio.create_task(worker(limiter))
        stats = await limiter.stats()
        await limiter.aclose()
        return held, stats

    held, stats = asyncio.run(main())
    assert held == 1
    assert (stats.acquires, stats.releases, stats.withdrawn, stats.held) == (1, 1, 0, 0)


def test_rotten_execution_releases(make_limiter: Any) -> None:
    """A call that raises inside its slot still gives the slot back; counts return to zero."""

    async def main() -> tuple[list[Any], LimiterStats]:
        limiter = make_limiter(limit=6)

        async def call(i: int) -> int:
            async with limiter.slot():
                await asyncio.sleep(0.01)
                if i == 10:
                    raise ValueError("rotten")
                return i

        results = await asyncio.gather(*(call(i) for i in range(20)), return_exceptions=True)
        stats = await limiter.stats()
        await limiter.aclose()
        return results, stats

    results, stats = asyncio.run(main())
    assert isinstance(results[10], ValueError)
    assert [r for i, r in enumerate(results) if i != 10] == [i for i in range(20) if i != 10]
    assert (stats.held, stats.waiting, stats.acquires, stats.releases) == (0, 0, 20, 20)
    assert stats.max_held <= 6


def test_config_disagreement_is_an_error(make_limiter: Any, backend: str) -> None:
    if backend == "local":
        pytest.skip("local limiters are per object: there is no shared config to disagree with")

    async def main() -> None:
        first = make_limiter(limit=2)
        await first.release(await first.acquire())
        same = make_limiter(limit=2)
        await same.release(await same.acquire())  # equal config: the same limiter
        other = make_limiter(limit=3)
        with pytest.raises(LimiterConfigError, match="limit: existing 2, requested 3"):
            await other.acquire()
        stats = await first.stats()
        assert (stats.limit, stats.acquires) == (2, 2)
        for limiter in (first, same, other):
            await limiter.aclose()

    asyncio.run(main())


def test_adaptive_shrinks_on_429_and_grows_back(make_limiter: Any) -> None:
    async def main() -> list[int]:
        limiter = make_limiter(limit=4, adaptive={"min_limit": 1, "cooldown_s": 0, "increase_every": 2})
        caps = [(await limiter.stats()).cap]
        for _ in range(3):
            await limiter.report("throttled")
            caps.append((await limiter.stats()).cap)
        # The shrunken cap is enforced: with cap 1 a second caller waits.
        ticket = await limiter.acquire()
        second = asyncio.create_task(limiter.acquire())
        assert (await settle(limiter, held=1, waiting=1)).waiting == 1
        await limiter.release(ticket)
        await limiter.release(await second)
        for _ in range(8):
            await limiter.report("ok")
            caps.append((await limiter.stats()).cap)
        stats = await limiter.stats()
        assert stats.throttled == 3
        await limiter.aclose()
        return caps

    assert asyncio.run(main()) == [4, 2, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def test_adaptive_cooldown_and_non_adaptive_report(make_limiter: Any) -> None:
    async def main() -> tuple[int, int]:
        limiter = make_limiter(limit=8, adaptive={"cooldown_s": 60})
        for _ in range(5):  # a burst of 429s within the cooldown halves the cap once
            await limiter.report("throttled")
        cap = (await limiter.stats()).cap
        plain = make_limiter(name=limiter.name + "-plain", limit=3)
        await plain.report("throttled")  # a no-op without adaptive mode
        plain_cap = (await plain.stats()).cap
        with pytest.raises(LimiterError):
            await plain.report("bogus")
        for lim in (limiter, plain):
            await lim.aclose()
        return cap, plain_cap

    assert asyncio.run(main()) == (4, 3)


def test_rate_per_second(make_limiter: Any) -> None:
    """A token bucket of 20/s, burst 1: 6 starts need at least 5 refills (0.25 s), however fast the callers."""

    async def main() -> tuple[float, LimiterStats]:
        limiter = make_limiter(limit=10, rate_per_second=20, burst=1)
        started = time.monotonic()
        for _ in range(6):
            await limiter.release(await limiter.acquire())
        elapsed = time.monotonic() - started
        stats = await limiter.stats()
        await limiter.aclose()
        return elapsed, stats

    elapsed, stats = asyncio.run(main())
    assert elapsed >= 0.24
    assert (stats.acquires, stats.held) == (6, 0)
