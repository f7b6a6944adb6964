"""The in-process limiter's guarantees: FIFO, bounded, cancel-safe (hypothesis drives random schedules)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ratelimit import ConcurrencyLimiter, LimiterError


def test_fifo_admission() -> None:
    async def main() -> list[int]:
        limiter = ConcurrencyLimiter(1)
        first = await limiter.acquire()
        order: list[int] = []

        async def waiter(i: int) -> None:
            async with limiter.slot():
                order.append(i)

        tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
        await asyncio.sleep(0)  # let every waiter queue up, in creation order
        limiter.release(first)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_release_is_bounded() -> None:
    async def main() -> None:
        limiter = ConcurrencyLimiter(2)
        other = ConcurrencyLimiter(2)
        permit = await limiter.acquire()
        limiter.release(permit)
        with pytest.raises(LimiterError):
            limiter.release(permit)
        foreign = await other.acquire()
        with pytest.raises(LimiterError):
            limiter.release(foreign)
        assert limiter.held == 0

    asyncio.run(main())


def test_bad_limit() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(LimiterError):
            ConcurrencyLimiter(bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 4),
    plan=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=20),
)
def test_never_over_the_limit_and_nothing_lost_under_cancellation(limit: int, plan: list[tuple[int, bool]]) -> None:
    """Random hold times and cancellations: never more than ``limit`` holders, and all capacity comes back."""

    async def main() -> ConcurrencyLimiter:
        limiter = ConcurrencyLimiter(limit)

        async def worker(hold: int) -> None:
            async with limiter.slot():
                assert limiter.held <= limit
                for _ in range(hold):
                    await asyncio.sleep(0)

        tasks = [asyncio.create_task(worker(hold)) for hold, _ in plan]
        await asyncio.sleep(0)
        for task, (_, cancel) in zip(tasks, plan, strict=True):
            if cancel:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return limiter

    limiter = asyncio.run(main())
    assert limiter.held == 0 and limiter.waiting == 0
    assert limiter.max_held <= limit
