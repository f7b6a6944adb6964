"""Cluster behaviour: a killed holder's tickets come back after the lease (Ray worker actor, Redis client
process), and two separate driver processes attached to one Ray cluster share one limiter, never above its cap."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from harness.ratelimit import LimiterConfig, LimiterStats

DRIVER = Path(__file__).with_name("_driver.py")
ROOT = Path(__file__).resolve().parents[2]


async def wait_for_stats(limiter: Any, predicate: Any, timeout: float = 30.0) -> LimiterStats:
    deadline = time.monotonic() + timeout
    while True:
        stats: LimiterStats = await limiter.stats()
        if predicate(stats) or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.05)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = current = 0
    for _, delta in events:  # at equal times the exit (-1) sorts first: touching intervals do not overlap
        current += delta
        peak = max(peak, current)
    return peak


def test_killed_ray_worker_permits_are_reclaimed(ray_session: dict[str, str]) -> None:
    import ray

    from harness.ratelimit.ray_backend import RayLimiter, kill

    name = f"lease-{uuid.uuid4().hex[:8]}"
    config = LimiterConfig(name=name, limit=3, lease_s=1.0)

    @ray.remote(num_cpus=0)
    class Worker:
        """A rollout worker holding tickets (its client heartbeats while the process lives)."""

        def __init__(self) -> None:
            self.limiter = RayLimiter(config)
            self.tickets: list[Any] = []

        async def grab(self, n: int) -> int:
            for _ in range(n):
                self.tickets.append(await self.limiter.acquire())
            return len(self.tickets)

    async def main() -> tuple[LimiterStats, LimiterStats, LimiterStats]:
        worker = Worker.remote()  # type: ignore[attr-defined]
        assert await worker.grab.remote(2) == 2
        observer = RayLimiter(config)
        await asyncio.sleep(2 * config.lease_s)  # two leases long: heartbeats keep the tickets held
        alive = await observer.stats()
        ray.kill(worker, no_restart=True)
        reclaimed = await wait_for_stats(observer, lambda s: s.held == 0)
        for _ in range(3):  # all three slots are free again
            await observer.acquire()
        full = await observer.stats()
        await observer.aclose()
        return alive, reclaimed, full

    try:
        alive, reclaimed, full = asyncio.run(main())
    finally:
        kill(name)
    assert (alive.held, alive.reclaimed) == (2, 0)
    assert (reclaimed.held, reclaimed.reclaimed) == (0, 2)
    assert (full.held, full.max_held) == (3, 3)


def test_killed_redis_client_permits_are_reclaimed(redis_url: str) -> None:
    from harness.ratelimit.redis_backend import RedisLimiter

    name = f"lease-{uuid.uuid4().hex[:8]}"
    config = LimiterConfig(name=name, limit=3, lease_s=1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "redis-hold", redis_url, name, "3", "1.0", "2"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"

        async def main() -> tuple[LimiterStats, LimiterStats]:
            observer = RedisLimiter(config, url=redis_url)
            await asyncio.sleep(2 * config.lease_s)
            alive = await observer.stats()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            reclaimed = await wait_for_stats(observer, lambda s: s.held == 0)
            await observer.aclose()
            return alive, reclaimed

        alive, reclaimed = asyncio.run(main())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert (alive.held, alive.reclaimed) == (2, 0)
    assert (reclaimed.held, reclaimed.reclaimed) == (0, 2)


def test_two_driver_processes_share_one_limiter(ray_session: dict[str, str], tmp_path: Path) -> None:
    """verl's multi-node case: two drivers attached to one cluster, 6 calls each through a cap of 4."""
    from harness.ratelimit.ray_backend import RayLimiter, kill

    name = f"multi-{uuid.uuid4().hex[:8]}"
    cap, tasks, hold = 4, 6, 0.5
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["ray", ray_session["address"], ray_session["namespace"], name, str(cap), str(tasks), str(hold)]
    args += [str(tmp_path), "2"]
    procs = [
        subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    try:
        outputs = []
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, out
            outputs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])

        async def final() -> LimiterStats:
            limiter = RayLimiter(LimiterConfig(name=name, limit=cap))
            return await limiter.stats()

        stats = asyncio.run(final())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        kill(name)
    results = [lines[-1] for lines in outputs]
    assert results[0]["actor"] == results[1]["actor"]  # one named actor across both driver processes
    intervals = [tuple(iv) for result in results for iv in result["intervals"]]
    assert len(intervals) == 2 * tasks
    assert max_overlap(intervals) <= cap  # the global in-flight maximum, from both drivers' own records
    assert max_overlap(intervals) == cap  # the drivers start together (a barrier): the cap was reached, shared
    assert stats.max_held == cap
    assert (stats.acquires, stats.releases, stats.held, stats.waiting) == (2 * tasks, 2 * tasks, 0, 0)


def test_kill_returns_once_the_limiter_actor_is_dead(ray_session: dict[str, str]) -> None:
    """``ray.kill`` only asks; ``kill`` returns when the actor is gone, so the next call meets a dead actor and a new
    limiter of that name can be made at once (one made while the old one still lived would attach to it)."""
    import ray
    from ray.exceptions import RayActorError

    from harness.ratelimit.ray_backend import get_actor, kill

    config = LimiterConfig.from_mapping({"name": f"kill-{uuid.uuid4().hex[:8]}", "limit": 2})
    for _ in range(5):
        handle = get_actor(config)
        assert ray.get(handle.ping.remote(), timeout=30) == config.name
        assert kill(config.name)
        try:
            ray.get(handle.ping.remote(), timeout=30)
        except RayActorError:
            pass
        else:
            raise AssertionError("the killed actor still answered")
    assert kill(config.name) is False  # its name is free: nothing left to kill
