"""SandboxFusionTool with the cluster-wide limiter plugged in: old verl 0.7.1 keys give a Ray-wide cap when Ray is
up (else the documented per-object fallback), ``rate_limiter`` picks redis or local explicitly, adaptive mode
shrinks on the sandbox's 429s. The emulator's journal gives the true in-flight maximum."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from emulator.journal import Journal

pytest.importorskip("verl", reason="needs the [verl] extra")

from harness.ratelimit import LocalLimiter
from harness.tools.sandbox_fusion import SandboxFusionTool, limiter_settings

RUN_CODE = "sandbox_fusion.run_code"
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.01, "max_delay": 0.05}


def make_tool(url: str, **config: Any) -> SandboxFusionTool:
    return SandboxFusionTool({"sandbox_fusion_url": url, "type": "native", "retry": FAST_RETRY, **config})


async def run_calls(tools: list[SandboxFusionTool], per_tool: int, sleep: float = 0.2) -> list[str | None]:
    async def one(tool: SandboxFusionTool, i: int) -> str | None:
        instance_id, _ = await tool.create()
        response, _, _ = await tool.execute(instance_id, {"code": f"import time; time.sleep({sleep}); print({i})"})
        await tool.release(instance_id)
        return response.text

    texts = await asyncio.gather(*(one(tool, i) for tool in tools for i in range(per_tool)))
    for tool in tools:
        await tool.aclose()
    return list(texts)


def test_old_keys_give_a_cluster_wide_cap_under_ray(
    ray_session: dict[str, str], sandbox_fusion_url: str, emulator_journal: Journal
) -> None:
    """Two tool objects (two rollout workers) with verl 0.7.1's keys share one cap of 2."""
    name = f"sf-{uuid.uuid4().hex[:8]}"
    limiter = {"name": name}
    tools = [make_tool(sandbox_fusion_url, rate_limit=2, num_workers=8, rate_limiter=limiter) for _ in range(2)]
    texts = asyncio.run(run_calls(tools, 4))
    assert sorted(t or "" for t in texts) == sorted(f"{i}\n" for i in range(4) for _ in range(2))
    assert emulator_journal.max_in_flight(RUN_CODE) == 2
    from harness.ratelimit.ray_backend import kill

    assert kill(name)
    # Without a name: the default is one limiter per rate_limit value, shared the same way.
    backend, config, _ = limiter_settings({"rate_limit": 7}, 7)
    assert (backend, config.name, config.limit) == ("auto", "sandbox-fusion-7", 7)


def test_default_names_part_tools_whose_limiter_settings_differ() -> None:
    """Without a ``name``, tools with the same ``rate_limit`` share ``sandbox-fusion-<limit>`` only when nothing else
    is set; other settings get a name of their own (equal settings, equal names), not a config clash on one name."""

    def name(spec: dict[str, Any]) -> str:
        return limiter_settings({"rate_limit": 4, "rate_limiter": spec}, 4)[1].name

    assert name({}) == name({"backend": "ray"}) == name({"limit": 4}) == "sandbox-fusion-4"
    adaptive, paced = name({"adaptive": True}), name({"rate_per_second": 5})
    assert len({"sandbox-fusion-4", adaptive, paced, name({"rate_per_second": 6})}) == 4
    assert adaptive.startswith("sandbox-fusion-4-") and paced == name({"rate_per_second": 5.0, "backend": "local"})
    assert name({"name": "mine", "adaptive": True}) == "mine"


def test_local_fallback_without_ray(
    sandbox_fusion_url: str,
    emulator_journal: Journal,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No Ray in the process: ``rate_limit`` caps each tool object (logged once), as the docs say."""
    import harness.tools.sandbox_fusion as sf

    monkeypatch.setattr(sf, "ray_ready", lambda: False)
    monkeypatch.setattr(sf, "_warned_local_fallback", False)
    tool = make_tool(sandbox_fusion_url, rate_limit=2, num_workers=8)

    async def main() -> tuple[Any, list[str | None]]:
        tool._bind_loop()
        limiter = tool._limiter
        return limiter, await run_calls([tool], 5)

    with caplog.at_level(logging.WARNING):
        limiter, texts = asyncio.run(main())
    assert isinstance(limiter, LocalLimiter)
    assert texts == [f"{i}\n" for i in range(5)]
    assert emulator_journal.max_in_flight(RUN_CODE) == 2
    assert "Ray is not initialised" in caplog.text


def test_redis_backend_shares_the_cap(redis_url: str, sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    limiter = {"backend": "redis", "redis_url": redis_url, "name": f"sf-{uuid.uuid4().hex[:8]}"}
    tools = [make_tool(sandbox_fusion_url, rate_limit=3, num_workers=8, rate_limiter=limiter) for _ in range(2)]
    texts = asyncio.run(run_calls(tools, 4))
    assert len(texts) == 8 and all(t and t.endswith("\n") for t in texts)
    assert emulator_journal.max_in_flight(RUN_CODE) == 3


@pytest.mark.faults({"rules": [{"id": "throttle", "route": RUN_CODE, "attempts": "1", "fault": {"status": 429}}]})
def test_adaptive_limiter_shrinks_on_429(sandbox_fusion_url: str) -> None:
    adaptive = {"min_limit": 1, "cooldown_s": 0}
    tool = make_tool(sandbox_fusion_url, rate_limit=4, rate_limiter={"backend": "local", "adaptive": adaptive})

    async def main() -> tuple[Any, Any]:
        instance_id, _ = await tool.create()
        response, _, metrics = await tool.execute(instance_id, {"code": "print(1)"})
        assert response.text == "1\n" and metrics["attempts"] == 2
        assert tool._limiter is not None
        stats = await tool._limiter.stats()
        await tool.aclose()
        return stats, metrics

    stats, _ = asyncio.run(main())
    assert (stats.throttled, stats.cap) == (1, 2)  # one 429 halved the cap; the retry's 200 is one "ok" of two


def test_bad_limiter_config_is_a_clear_error() -> None:
    url = "http://x/run_code"
    with pytest.raises(ValueError, match="rate_limiter"):
        SandboxFusionTool({"sandbox_fusion_url": url, "rate_limiter": {"backend": "zookeeper"}})
    with pytest.raises(ValueError, match="redis_url"):
        SandboxFusionTool({"sandbox_fusion_url": url, "rate_limiter": {"backend": "redis"}})
    with pytest.raises(ValueError, match="unknown limiter config keys"):
        SandboxFusionTool({"sandbox_fusion_url": url, "rate_limiter": {"colour": "red"}})
    with pytest.raises(ValueError, match="rate_per_second"):
        SandboxFusionTool({"sandbox_fusion_url": url, "rate_limiter": {"rate_per_second": -1}})


def test_a_limiter_that_cannot_open_yet_is_tried_again_by_the_next_call(
    sandbox_fusion_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call's limiter fails to open (Ray not up yet, say): that call fails, and the next one opens it,
    rather than running, with every later call, under no cap at all."""
    from harness.tools import sandbox_fusion

    opened: list[str] = []

    def flaky_open(backend: str, config: Any, options: dict[str, Any]) -> LocalLimiter:
        opened.append(backend)
        if len(opened) == 1:
            raise RuntimeError("Ray is not initialised")
        return LocalLimiter(config)

    monkeypatch.setattr(sandbox_fusion, "open_tool_limiter", flaky_open)
    tool = make_tool(sandbox_fusion_url, rate_limiter={"backend": "ray"})

    async def two_calls() -> str | None:
        instance_id, _ = await tool.create()
        with pytest.raises(RuntimeError, match="not initialised"):
            await tool.execute(instance_id, {"code": "print(1)"})
        response, _, _ = await tool.execute(instance_id, {"code": "print(2)"})
        assert isinstance(tool._limiter, LocalLimiter)
        await tool.aclose()
        return response.text

    assert asyncio.run(two_calls()) == "2\n"
    assert opened == ["ray", "ray"]
