"""The project's tools under a synchronised 429 wave: every first attempt refused at once with the same Retry-After.

A client that waits ``max(backoff, Retry-After)`` sends every retry back at the same instant; the tools wait the
hint plus a random share of the backoff, so the compliance oracle's jitter rule (and its Retry-After rule) must
pass. Runs on virtual time, with the emulator in the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from harness.chaos.inloop import InLoopEmulator, in_loop_emulator
from harness.chaos.judges import ChaosJudge
from harness.chaos.vtime import run_virtual

CALLS = 16
RETRY = {"max_attempts": 3, "base_delay": 0.5, "max_delay": 2.0, "max_retry_after": 30}


def _run(plan: dict[str, Any], make_tool: Any, code: str) -> tuple[list[str | None], ChaosJudge]:
    async def main() -> tuple[list[str | None], ChaosJudge]:
        async with in_loop_emulator(plan) as emu:
            tool = make_tool(emu)

            async def one(i: int) -> str | None:
                instance_id, _ = await tool.create()
                try:
                    response, _, _ = await tool.execute(instance_id, {"code": code.format(i=i)})
                finally:
                    await tool.release(instance_id)
                return response.text

            try:
                texts = await asyncio.gather(*(one(i) for i in range(CALLS)))
            finally:
                await tool.aclose()
            return list(texts), ChaosJudge.of(emu.emulator)

    return run_virtual(main())


def test_sandbox_fusion_tool_spreads_its_retries() -> None:
    from harness.tools.sandbox_fusion import SandboxFusionTool

    plan = {
        "seed": 5,
        "rules": [
            {
                "id": "wave",
                "route": "sandbox_fusion.run_code",
                "attempts": "1",
                "fault": {"status": 429, "retry_after": 1},
            }
        ],
    }

    def make(emu: InLoopEmulator) -> SandboxFusionTool:
        config = {"sandbox_fusion_url": emu.run_code_url, "rate_limit": CALLS, "retry": RETRY}
        return SandboxFusionTool({**config, "rate_limiter": {"backend": "local"}})

    texts, judge = _run(plan, make, "print({i})")
    assert texts == [f"{i}\n" for i in range(CALLS)]
    report = judge.compliance(max_attempts=RETRY["max_attempts"])
    assert report.checked["retry-after"] == CALLS and report.checked["jitter"] >= 1
    report.assert_compliant()


def test_daytona_tool_spreads_its_retries() -> None:
    pytest.importorskip("daytona", reason="needs the [daytona] extra")
    from harness.tools.daytona import DaytonaTool

    plan = {
        "seed": 5,
        "rules": [
            {
                "id": "wave",
                "route": "daytona.sandbox.create",
                "attempts": "1",
                "fault": {"status": 429, "retry_after": 1},
            }
        ],
    }

    def make(emu: InLoopEmulator) -> DaytonaTool:
        config = {"api_url": emu.daytona_api_url, "api_key": emu.daytona_api_key, "rate_limit": CALLS, "retry": RETRY}
        return DaytonaTool({"type": "native", **config, "rate_limiter": {"backend": "local"}})

    texts, judge = _run(plan, make, "print({i})")
    assert texts == [f"{i}\n" for i in range(CALLS)]
    report = judge.compliance(max_attempts=RETRY["max_attempts"])
    assert report.checked["retry-after"] >= CALLS
    report.assert_compliant()
    judge.assert_invariants()  # and no sandbox left behind
