"""Both verl tools when their cluster-wide limiter fails: a Redis that is down is an infrastructure fault of the call
(retried, reported in the metrics, never an exception out of ``execute``), a Redis lost after a call ran never costs
the call's result, a Redis that comes back empty serves again, and a limiter that refuses the tool's config is a
fault that is not retried."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")
pytest.importorskip("redis")

from emulator.server import EmulatorServer
from harness.ratelimit import AsyncLimiter, LimiterConfig, Ticket
from harness.ratelimit.redis_backend import RedisLimiter
from harness.tools.sandbox_fusion import SandboxFusionTool

FAST_RETRY = {"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.02}


def sf_tool(url: str, redis_url: str, name: str, limit: int = 2) -> SandboxFusionTool:
    limiter = {"backend": "redis", "redis_url": redis_url, "name": name}
    config = {"sandbox_fusion_url": url, "retry": FAST_RETRY, "rate_limit": limit, "rate_limiter": limiter}
    return SandboxFusionTool(config)


async def call(tool: Any, code: str) -> tuple[str | None, dict[str, Any]]:
    instance_id, _ = await tool.create()
    try:
        response, _, metrics = await tool.execute(instance_id, {"code": code})
    finally:
        await tool.release(instance_id)
    return response.text, metrics


def test_a_redis_outage_is_an_infra_fault_and_its_return_serves_again(
    private_redis: Any, sandbox_fusion_url: str
) -> None:
    tool = sf_tool(sandbox_fusion_url, private_redis.url, f"outage-{uuid.uuid4().hex[:8]}")

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        try:
            before = await call(tool, "print(1)")
            private_redis.stop()
            during = await call(tool, "print(2)")
            private_redis.start()  # the same port, empty: the limiter's config and counters are gone
            after = await call(tool, "print(3)")
        finally:
            await tool.aclose()
        return [before, during, after]

    (text1, ok1), (text2, fault), (text3, ok3) = asyncio.run(main())
    assert (text1, ok1["status"]) == ("1\n", "success")
    assert fault["status"] == "infra_fault"
    assert fault["infra_fault"].startswith("rate limiter unavailable: ")
    assert fault["attempts"] == FAST_RETRY["max_attempts"]  # an outage may be brief: retried with backoff
    assert text2 is not None and "rate limiter unavailable" in text2
    assert (text3, ok3["status"]) == ("3\n", "success")


class _LosesRedisAfterGrant(RedisLimiter):
    """Grants a permit, then its Redis goes away: the release and the report both fail."""

    async def acquire(self) -> Ticket:
        ticket = await super().acquire()
        import redis.asyncio

        gone = redis.asyncio.Redis(host="127.0.0.1", port=1)  # nothing listens there
        self.client = self._control = gone
        return ticket


def test_a_redis_lost_after_the_grant_keeps_the_calls_result(
    redis_url: str, sandbox_fusion_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"lost-{uuid.uuid4().hex[:8]}"
    tool = sf_tool(sandbox_fusion_url, redis_url, name)

    def losing_limiter() -> AsyncLimiter:
        return _LosesRedisAfterGrant(LimiterConfig(name=name, limit=2), url=redis_url)

    tool._open_limiter = losing_limiter  # type: ignore[method-assign]

    async def main() -> tuple[str | None, dict[str, Any]]:
        try:
            return await call(tool, "print(6 * 7)")
        finally:
            await tool.aclose()

    with caplog.at_level(logging.WARNING, logger="harness.tools.permits"):
        text, metrics = asyncio.run(main())
    assert (text, metrics["status"], metrics["attempts"]) == ("42\n", "success", 1)
    assert "could not take a permit back (its lease will reclaim it)" in caplog.text


def test_a_limiter_that_refuses_the_config_is_not_retried(redis_url: str, sandbox_fusion_url: str) -> None:
    name = f"clash-{uuid.uuid4().hex[:8]}"
    first = sf_tool(sandbox_fusion_url, redis_url, name, limit=2)
    second = sf_tool(sandbox_fusion_url, redis_url, name, limit=5)  # another job sharing the name with another cap

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        try:
            return [await call(first, "print(1)"), await call(second, "print(2)")]
        finally:
            await first.aclose()
            await second.aclose()

    (text1, ok), (_, fault) = asyncio.run(main())
    assert (text1, ok["status"]) == ("1\n", "success")
    assert fault["status"] == "infra_fault" and fault["attempts"] == 1
    assert fault["infra_fault"].startswith("rate limiter misconfigured: ")
    assert "limit: existing 2, requested 5" in fault["infra_fault"]


def test_the_daytona_tool_reports_a_redis_outage_and_leaks_nothing(
    private_redis: Any, sandbox_emulator: EmulatorServer
) -> None:
    pytest.importorskip("daytona", reason="needs the [daytona] extra")
    from harness.tools.daytona import DaytonaTool

    limiter = {"backend": "redis", "redis_url": private_redis.url, "name": f"dt-{uuid.uuid4().hex[:8]}"}
    tool = DaytonaTool(
        {
            "api_url": sandbox_emulator.url + "/api",
            "api_key": sandbox_emulator.emulator.config.daytona.api_key,
            "retry": FAST_RETRY,
            "rate_limiter": limiter,
        }
    )

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        try:
            before = await call(tool, "print(1)")
            private_redis.stop()
            during = await call(tool, "print(2)")
        finally:
            await tool.aclose()
        return [before, during]

    (text1, ok), (text2, fault) = asyncio.run(main())
    assert (text1, ok["status"]) == ("1\n", "success")
    assert fault["status"] == "infra_fault" and fault["infra_fault"].startswith("rate limiter unavailable: ")
    assert text2 is not None and "rate limiter unavailable" in text2
    assert [record.id for record in sandbox_emulator.emulator.daytona_report().leaked] == []


def test_a_lost_ray_limiter_actor_is_replaced(ray_session: dict[str, str], sandbox_fusion_url: str) -> None:
    """The limiter's actor killed (its node lost): the call that meets it retries, and the limiter comes back."""
    from harness.ratelimit.ray_backend import kill

    name = f"ray-{uuid.uuid4().hex[:8]}"
    config = {"sandbox_fusion_url": sandbox_fusion_url, "retry": FAST_RETRY, "rate_limit": 2}
    tool = SandboxFusionTool({**config, "rate_limiter": {"backend": "ray", "name": name}})

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        try:
            before = await call(tool, "print(1)")
            assert kill(name)
            after = await call(tool, "print(2)")
            again = await call(tool, "print(3)")
        finally:
            await tool.aclose()
            kill(name)
        return [before, after, again]

    results = asyncio.run(main())
    assert [(text, metrics["status"]) for text, metrics in results] == [
        ("1\n", "success"),
        ("2\n", "success"),
        ("3\n", "success"),
    ]
    assert results[1][1]["attempts"] == 2  # the first attempt met the dead actor
    assert results[2][1]["attempts"] == 1
