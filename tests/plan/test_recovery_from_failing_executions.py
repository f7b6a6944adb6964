"""Plan item "rotten execution": sandbox calls that fail do not break the loop nor lie to the model.

Fault plans make the emulator fail the first attempts of every call (gateway 504, connection reset, 429, a null
``stdout``, Sandbox Fusion's ``SandboxError`` answer). The tool retries; the trajectory completes; the model sees
the real program output, never the fault. When every attempt fails, the model sees only the tool's documented
infrastructure observation. The journal shows each retry (same body, attempt 2, 3, ...), and the tool's limiter
gets every permit back (the tool-level half of verl's ``test_rotten_execution``).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from emulator.journal import Journal
from harness.ratelimit import LimiterStats
from harness.rollout import (
    ScriptBook,
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    hermes_tool_call,
    load_tools,
    observations,
    run_trajectory,
)
from harness.tools.observations import INFRA_FAULT_OBSERVATION, NO_STDOUT
from harness.tools.sandbox_fusion import SandboxFusionTool

RUN_CODE = "sandbox_fusion.run_code"
TRAJECTORIES = 8
MAX_ATTEMPTS = 4  # conftest.FAST_RETRY


def _plan(fault: Any, attempts: str) -> dict[str, Any]:
    return {"seed": 7, "rules": [{"id": "rotten", "route": RUN_CODE, "attempts": attempts, "fault": fault}]}


def _tag(i: int) -> str:
    return f"[job {i}]"


def _script(i: int) -> list[str]:
    return [
        hermes_tool_call("code_interpreter", {"code": f"print({i} + 1000)"}),
        hermes_tool_call("code_interpreter", {"code": f"import sys\nprint('job', {i}, file=sys.stderr)"}),
        f"Finished {_tag(i)}.",
    ]


def _expected(i: int) -> list[str]:
    return [f"{i + 1000}\n", f"job {i}\n"]


def _run_batch(tool_path: Path, tokenizer: Any) -> tuple[list[AgentLoopOutput], SandboxFusionTool, LimiterStats]:
    async def main() -> tuple[list[AgentLoopOutput], SandboxFusionTool, LimiterStats]:
        tools = load_tools(tool_path)
        server = ScriptedServerManager(
            tokenizer,
            ScriptBook({_tag(i): _script(i) for i in range(TRAJECTORIES)}),
            prompt_length=1024,
            response_length=1024,
        )
        config = agent_loop_config(prompt_length=1024, response_length=1024)
        try:
            outputs = await asyncio.gather(
                *(
                    run_trajectory(
                        build_tool_agent_loop(config, server, tokenizer, tools),
                        [{"role": "user", "content": f"{_tag(i)} Run the two programs."}],
                    )
                    for i in range(TRAJECTORIES)
                )
            )
            tool = tools[0]
            assert isinstance(tool, SandboxFusionTool) and tool._limiter is not None
            stats = await tool._limiter.stats()
        finally:
            await close_tools(tools)
        return list(outputs), tool, stats

    return asyncio.run(main())


def _attempts_by_key(journal: Journal) -> dict[str, list[tuple[int, str | None, int | None]]]:
    by_key: dict[str, list[tuple[int, str | None, int | None]]] = defaultdict(list)
    for entry in journal.entries(RUN_CODE):
        by_key[entry.key].append((entry.attempt, entry.fault, entry.status))
    return {k: sorted(v) for k, v in by_key.items()}


def _assert_no_fault_text(text: str) -> None:
    for leak in (NO_STDOUT, "Sandbox unavailable", "SandboxError", "Gateway", "<html", "504", "429", "null", "None"):
        assert leak not in text, f"fault leaked into an observation: {leak!r} in {text!r}"


FAULTS = {
    "gateway-504": {"status": 504},
    "reset": "reset",
    "throttled-429": {"status": 429, "retry_after": 0},
    "null-stdout": "null_stdout",
    "sandbox-error": "sandbox_error",
}


@pytest.mark.parametrize(
    "fault",
    [pytest.param(name, marks=pytest.mark.faults(_plan(spec, "1-2")), id=name) for name, spec in FAULTS.items()],
)
def test_recovery_from_failing_executions(
    fault: str, tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Attempts 1 and 2 of every call fail, attempt 3 succeeds: every trajectory completes with the real outputs."""
    outputs, tool, stats = _run_batch(tool_yaml(rate_limit=3), tiny_tokenizer)
    for i, output in enumerate(outputs):
        seen = observations(output, tiny_tokenizer)
        assert seen == _expected(i), f"trajectory {i}"
        for text in seen:
            _assert_no_fault_text(text)
        assert output.num_turns == 6
    # Each of the 16 calls: two faulted attempts, then one answered, all with the same body (the same key).
    attempts = _attempts_by_key(emulator_journal)
    assert len(attempts) == 2 * TRAJECTORIES
    for key, tries in attempts.items():
        assert [(a, f is not None) for a, f, _ in tries] == [(1, True), (2, True), (3, False)], key
        assert tries[-1][2] == 200
    assert emulator_journal.max_in_flight(RUN_CODE) <= 3  # retries stay under the rate limit
    assert (stats.held, stats.acquires) == (0, stats.releases)  # every failed attempt gave its permit back
    assert tool._instances == {}


@pytest.mark.faults(_plan({"status": 504}, "1-"))
def test_recovery_budget_spent_shows_infra_observation(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Every attempt fails: the loop still completes, and the model sees the documented infrastructure observation,
    not ``no stdout here`` (what verl 0.7.1 showed) and not the gateway page."""
    outputs, _, stats = _run_batch(tool_yaml(rate_limit=3), tiny_tokenizer)
    infra = INFRA_FAULT_OBSERVATION.format(reason="HTTP 504")
    for output in outputs:
        assert observations(output, tiny_tokenizer) == [infra, infra]
        assert output.num_turns == 6
    attempts = _attempts_by_key(emulator_journal)
    assert len(attempts) == 2 * TRAJECTORIES
    for tries in attempts.values():
        assert tries == [(a, "status", 504) for a in range(1, MAX_ATTEMPTS + 1)]  # the whole budget, no more
    assert (stats.held, stats.acquires, stats.releases) == (0, 4 * 2 * TRAJECTORIES, 4 * 2 * TRAJECTORIES)
