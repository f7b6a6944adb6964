"""The ray backend's actor and client: releases and heartbeats are served however many acquires wait; where the actor
lives and who can find it; what a client does when the actor that granted its permits is gone."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.ratelimit import LimiterConfig, LimiterStats

DRIVER = Path(__file__).with_name("_driver.py")
ROOT = Path(__file__).resolve().parents[2]


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


def test_a_job_without_a_namespace_leaves_an_actor_others_can_kill(ray_backend: Any) -> None:
    """A job with a plain ``ray.init()`` (an anonymous namespace) makes the detached actor in the fixed default
    namespace, not in its own, where it outlived the job out of everyone's reach; ``kill(name)`` from another job
    (the test's own, named namespace, where its own limiters live) finds it there too."""
    import ray

    name = f"job-{uuid.uuid4().hex[:8]}"
    address = ray.get_runtime_context().gcs_address
    job = subprocess.run(
        [sys.executable, str(DRIVER), "ray-job", address, name],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert job.returncode == 0, job.stderr
    job_namespace = json.loads(job.stdout.splitlines()[-1])["namespace"]
    assert job_namespace not in (ray_backend.DEFAULT_NAMESPACE, ray.get_runtime_context().namespace)
    assert "anonymous namespace" not in job.stderr
    handle = ray.get_actor(ray_backend.actor_name(name), namespace=ray_backend.DEFAULT_NAMESPACE)
    assert ray.get(handle.ping.remote(), timeout=30) == name  # detached: it outlived its job
    assert ray_backend.kill(name) is True
    assert ray_backend.kill(name) is False


def test_permits_of_a_dead_actor_are_released_quietly(ray_backend: Any) -> None:
    """The actor dies (killed, its node lost) while a client holds two permits: releasing them is a quiet no-op (not
    ``ActorDiedError`` then "never granted" from its successor), and the heartbeat does not make a new actor."""
    import ray

    config = LimiterConfig(name=f"dead-{uuid.uuid4().hex[:8]}", limit=2)

    async def main() -> tuple[int, int, bool, LimiterStats]:
        client = ray_backend.RayLimiter(config)
        first, second = await client.acquire(), await client.acquire()
        assert await client._heartbeat_once() == 1
        assert ray_backend.kill(config.name)
        await client.release(first)  # meets the dead actor: nothing to give back
        beats = await client._heartbeat_once()
        try:
            ray.get_actor(ray_backend.actor_name(config.name), namespace=ray_backend.default_namespace())
            recreated = True
        except ValueError:
            recreated = False
        successor = ray_backend.RayLimiter(config)
        fresh = await successor.acquire()  # a new actor, with the whole cap
        await client.release(second)  # granted by the dead one: not sent to the successor
        held = client.held
        stats: LimiterStats = await successor.stats()
        await successor.release(fresh)
        await client.aclose()
        await successor.aclose()
        return beats, held, recreated, stats

    try:
        beats, held, recreated, stats = asyncio.run(main())
    finally:
        ray_backend.kill(config.name)
    assert (beats, held, recreated) == (0, 0, False)
    assert (stats.acquires, stats.releases, stats.held) == (1, 0, 1)


def test_the_actor_is_looked_up_off_the_event_loop(ray_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Making or finding the named actor waits on Ray's control store: a coroutine does it in a thread, so the
    caller's event loop (every other rollout of the worker) is not held up meanwhile."""
    import threading

    threads: list[threading.Thread] = []
    real = ray_backend.get_actor

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(ray_backend, "get_actor", recording)
    config = LimiterConfig(name=f"attach-{uuid.uuid4().hex[:8]}", limit=1)

    async def main() -> threading.Thread:
        client = ray_backend.RayLimiter(config)
        async with client.slot():
            pass
        await client.aclose()
        return threading.current_thread()

    try:
        loop_thread = asyncio.run(main())
    finally:
        ray_backend.kill(config.name)
    assert len(threads) == 1
    assert threads[0] is not loop_thread
