"""The redis client under load and under failures: more callers at once than a connection pool holds, a withdraw or
a release that fails on the way (retried: the request is never left to be granted to nobody, the ticket never
lost), a release whose answer was lost (sent again: no "released twice"), a release whose caller is cancelled."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from harness.ratelimit import LimiterConfig, LimiterStats
from harness.ratelimit.redis_backend import RedisLimiter

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")


class FlakyRedis(fakeredis.FakeAsyncRedis):  # type: ignore[misc]
    """fakeredis whose script calls fail as planned, per operation: ``drop`` (fails before reaching Redis), ``lose``
    (runs, then its answer is lost), ``gate`` (waits for ``gate`` before running; ``entered`` is set first)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plans: dict[str, list[str]] = {}
        self.done: dict[str, asyncio.Event] = {}
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def evalsha(self, sha: str, numkeys: int, *args: Any) -> Any:
        op = str(args[numkeys])
        plan = self.plans.get(op) or []
        mode = plan.pop(0) if plan else None
        if mode == "drop":
            raise RedisConnectionError(f"{op}: connection dropped")
        if mode == "gate":
            self.entered.set()
            await self.gate.wait()
        result = await super().evalsha(sha, numkeys, *args)
        if mode == "lose":
            raise RedisConnectionError(f"{op}: answer lost")
        self.done.setdefault(op, asyncio.Event()).set()
        return result


def _limiter(client: Any, limit: int = 1) -> RedisLimiter:
    return RedisLimiter(LimiterConfig(name=f"r-{uuid.uuid4().hex[:8]}", limit=limit), client=client)


def test_more_concurrent_callers_than_connections(redis_url: str) -> None:
    """150 callers at once in one process (redis-py's default pool refused the 101st); every one gets its turn."""
    n = 150

    async def main() -> tuple[list[BaseException | None], LimiterStats]:
        limiter = RedisLimiter(LimiterConfig(name=f"pool-{uuid.uuid4().hex[:8]}", limit=4), url=redis_url)

        async def call() -> None:
            async with limiter.slot():
                await asyncio.sleep(0)

        results = await asyncio.gather(*(call() for _ in range(n)), return_exceptions=True)
        stats = await limiter.stats()
        await limiter.aclose()
        return results, stats

    results, stats = asyncio.run(main())
    assert [r for r in results if r is not None] == []
    assert (stats.acquires, stats.releases, stats.held, stats.waiting, stats.max_held) == (n, n, 0, 0, 4)


def test_a_failed_withdraw_is_retried() -> None:
    """A cancelled waiter whose withdraw fails twice on the way: retried, so its request is not granted later to
    nobody (it held the slot until its lease ran out)."""

    async def main() -> tuple[LimiterStats, str]:
        client = FlakyRedis()
        limiter = _limiter(client)
        first = await limiter.acquire()
        enqueued = client.done["enqueue"]
        enqueued.clear()
        waiter = asyncio.create_task(limiter.acquire())
        await asyncio.wait_for(enqueued.wait(), 10)
        client.plans["withdraw"] = ["drop", "drop"]
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.wait_for(client.done.setdefault("withdraw", asyncio.Event()).wait(), 10)
        await limiter.release(first)
        stats = await limiter.stats()
        other = RedisLimiter(limiter.config, client=client)
        ticket = await asyncio.wait_for(other.acquire(), 10)  # at once; the orphan held it for a lease (60 s)
        state = "held" if other.held == 1 else "?"
        await other.release(ticket)
        await limiter.aclose()
        await other.aclose()
        return stats, state

    stats, state = asyncio.run(main())
    assert (stats.held, stats.waiting, stats.acquires, stats.releases) == (0, 0, 1, 1)
    assert state == "held"


@pytest.mark.parametrize("plan", [["drop"], ["lose"], ["drop", "lose"]])
def test_a_failed_release_is_retried(plan: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """A release that fails on the way, or runs and loses its answer, raises to its caller at once and is sent again
    in the background: the slot comes back once, and the repeat is not taken for a double release."""

    async def main() -> LimiterStats:
        client = FlakyRedis()
        limiter = _limiter(client)
        ticket = await limiter.acquire()
        client.plans["release"] = list(plan)
        with pytest.raises(RedisConnectionError):
            await limiter.release(ticket)
        await asyncio.wait_for(client.done.setdefault("release", asyncio.Event()).wait(), 10)
        stats = await limiter.stats()
        await limiter.aclose()
        return stats

    with caplog.at_level(logging.WARNING, logger="harness.ratelimit.redis_backend"):
        stats = asyncio.run(main())
    assert (stats.held, stats.acquires, stats.releases) == (0, 1, 1)
    assert caplog.text == ""  # no "released twice", no "failed for a lease"


def test_a_release_finishes_when_its_caller_is_cancelled() -> None:
    """The caller is cancelled while its release is on the way (the ticket is already off the client's books): the
    release still reaches Redis."""

    async def main() -> LimiterStats:
        client = FlakyRedis()
        limiter = _limiter(client)
        ticket = await limiter.acquire()
        client.plans["release"] = ["gate"]
        releasing = asyncio.create_task(limiter.release(ticket))
        await client.entered.wait()
        releasing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await releasing
        client.gate.set()
        await asyncio.wait_for(client.done.setdefault("release", asyncio.Event()).wait(), 10)
        stats = await limiter.stats()
        await limiter.aclose()
        return stats

    stats = asyncio.run(main())
    assert (stats.held, stats.releases) == (0, 1)
