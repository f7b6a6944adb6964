"""The ray backend's actor and client: releases and heartbeats are served however many acquires wait; where the actor
lives and who can find it; what a client does when the actor that granted its permits is gone."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from harness.ratelimit import LimiterConfig, LimiterStats


@pytest.fixture
def ray_backend(ray_session: dict[str, str]) -> Any:
    from harness.ratelimit import ray_backend

    return ray_backend


def test_release_is_served_while_acquires_fill_their_group(ray_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The acquire group scaled down from 10,000 to 2: four waiting acquires fill it (two more queue in Ray), and the
    holder's release still runs at once (in one shared group it queued behind acquires only it could finish)."""
    monkeypatch.setattr(ray_backend, "RemoteLimiterActor", ray_backend.remote_actor_class(acquire_concurrency=2))
    config = LimiterConfig(name=f"groups-{uuid.uuid4().hex[:8]}", limit=1)

    async def main() -> LimiterStats:
        holder, other = ray_backend.RayLimiter(config), ray_backend.RayLimiter(config)
        ticket = await holder.acquire()
        await other.open()

        async def waiter() -> None:
            await other.release(await other.acquire())

        waiters = [asyncio.create_task(waiter()) for _ in range(4)]
        await asyncio.sleep(0)  # each waiter has sent its acquire (the client sends before its first await)
        await asyncio.wait_for(holder.release(ticket), 30)
        await asyncio.wait_for(asyncio.gather(*waiters), 30)
        stats: LimiterStats = await holder.stats()
        await holder.aclose()
        await other.aclose()
        return stats

    try:
        stats = asyncio.run(main())
    finally:
        ray_backend.kill(config.name)
    assert (stats.acquires, stats.releases, stats.reclaimed, stats.max_held, stats.held) == (5, 5, 0, 1, 0)
