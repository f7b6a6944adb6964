"""A separate driver process for the multi-node tests: attaches to a running Ray cluster (``ray.init(address=...)``)
or uses Redis, runs ``tasks`` calls of ``hold`` seconds through the named limiter, and prints one JSON line with
the wall-clock interval each call held its slot and the limiter actor's id.

Usage: python _driver.py ray ADDRESS NAMESPACE NAME LIMIT TASKS HOLD BARRIER_DIR PARTIES
       python _driver.py redis-hold URL NAME LIMIT LEASE COUNT   (acquire COUNT, print "held", then sleep)
       python _driver.py ray-job ADDRESS NAME   (a job with a plain ray.init(): one call through NAME, then exit;
                                                 prints the job's namespace)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path


async def run_calls(limiter: object, tasks: int, hold: float) -> list[tuple[float, float]]:
    intervals: list[tuple[float, float]] = []

    async def call() -> None:
        async with limiter.slot():  # type: ignore[attr-defined]
            start = time.time()
            await asyncio.sleep(hold)
            intervals.append((start, time.time()))

    await asyncio.gather(*(call() for _ in range(tasks)))
    return intervals


def wait_barrier(barrier: Path, parties: int) -> None:
    """A file barrier: start the calls only when every driver is attached, so their loads overlap."""
    (barrier / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < parties and time.monotonic() < deadline:
        time.sleep(0.01)


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "ray":
        address, namespace, name, limit, tasks, hold, barrier, parties = argv[1:9]
        import ray

        from harness.ratelimit.base import LimiterConfig
        from harness.ratelimit.ray_backend import RayLimiter

        ray.init(address=address, namespace=namespace, log_to_driver=False)
        limiter = RayLimiter(LimiterConfig(name=name, limit=int(limit)))

        async def go() -> dict[str, object]:
            await limiter.open()
            wait_barrier(Path(barrier), int(parties))
            intervals = await run_calls(limiter, int(tasks), float(hold))
            await limiter.aclose()
            return {"intervals": intervals, "actor": limiter.actor._actor_id.hex()}

        print(json.dumps(asyncio.run(go())), flush=True)
        ray.shutdown()
    elif mode == "ray-job":
        address, name = argv[1:3]
        import ray

        from harness.ratelimit import open_limiter

        ray.init(address=address, log_to_driver=False)  # no namespace: an anonymous one, as a plain verl job

        async def one_call() -> None:
            limiter = open_limiter({"name": name, "limit": 2}, "ray")
            async with limiter.slot():
                pass
            await limiter.aclose()

        asyncio.run(one_call())
        print(json.dumps({"namespace": ray.get_runtime_context().namespace}), flush=True)
        ray.shutdown()
    elif mode == "redis-hold":
        url, name, limit, lease, count = argv[1:6]
        from harness.ratelimit.base import LimiterConfig
        from harness.ratelimit.redis_backend import RedisLimiter

        async def hold_forever() -> None:
            limiter = RedisLimiter(LimiterConfig(name=name, limit=int(limit), lease_s=float(lease)), url=url)
            for _ in range(int(count)):
                await limiter.acquire()
            print("held", flush=True)
            await asyncio.sleep(3600)

        asyncio.run(hold_forever())
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
