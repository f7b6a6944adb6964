"""Bundled problems through verl's real ToolAgentLoop, the project's SandboxFusionTool and the in-process emulator,
scored with verl's GSM8K reward: each trajectory earns exactly what the offline run says a perfect sandbox gives,
and an unavailable sandbox earns 0 (the policy never falls back to the reference)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.utils.reward_score import gsm8k

from emulator.journal import Journal
from harness.gsm8k import Problem, ScriptedGSM8KPolicy, final_turn, plan, run_offline, to_verl_row
from harness.gsm8k.policy import offline_observations
from harness.rollout import (
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    load_tools,
    observations,
    run_trajectory,
)

#: Bundled problems by index and the variant each plays: a 6-step problem stepwise (5 calls), the problem whose
#: last step is prose, a decimal answer, a negative answer, and a retry.
CASES = {40: "stepwise", 52: "single", 4: "retry", 37: "stepwise", 17: "single", 43: "retry"}
PROMPT_LENGTH = 4096
RESPONSE_LENGTH = 8192


def _rollout(
    tool_path: Path, tokenizer: Any, problems: list[Problem]
) -> tuple[list[AgentLoopOutput], ScriptedServerManager, ScriptedGSM8KPolicy]:
    async def main() -> tuple[list[AgentLoopOutput], ScriptedServerManager, ScriptedGSM8KPolicy]:
        tools = load_tools(tool_path)
        policy = _VariantPolicy(problems)
        server = ScriptedServerManager(tokenizer, policy, prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH)
        loop = build_tool_agent_loop(
            agent_loop_config(
                prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH, max_tool_response_length=4096
            ),
            server,
            tokenizer,
            tools,
        )
        try:
            outputs = await asyncio.gather(
                *(
                    run_trajectory(
                        loop,
                        row["prompt"],
                        tools_kwargs=row["extra_info"]["tools_kwargs"],
                        extra_info=row["extra_info"],
                    )
                    for row in (to_verl_row(p) for p in problems)
                )
            )
        finally:
            await close_tools(tools)
        return list(outputs), server, policy

    return asyncio.run(main())


class _VariantPolicy(ScriptedGSM8KPolicy):
    """The policy with the variant fixed per problem (CASES) instead of the seeded mix."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self._by_question = {p.question: CASES[p.index] for p in problems}

    def __call__(self, request: Any) -> str:
        if request.turn == 0:
            self.variant = next(v for q, v in self._by_question.items() if q in request.prompt_text)
        return super().__call__(request)


def _response_text(output: AgentLoopOutput, tokenizer: Any) -> str:
    """The response as verl's reward manager decodes it."""
    return str(tokenizer.decode(output.response_ids, skip_special_tokens=True))


def test_bundled_problems_through_the_real_agent_loop(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal, bundled: list[Problem]
) -> None:
    problems = [bundled[i] for i in CASES]
    outputs, server, policy = _rollout(tool_yaml(), tiny_tokenizer, problems)

    calls = 0
    for output, problem in zip(outputs, problems, strict=True):
        variant = CASES[problem.index]
        [request_id] = [r for r in server.request_ids if policy.problem_of(r) == problem]
        assert policy.variant_of(request_id) == variant
        steps = plan(problem, variant)
        calls += len(steps)
        assert len(server.calls_for(request_id)) == len(steps) + 1

        seen = observations(output, tiny_tokenizer)
        expected = offline_observations(problem, variant)
        assert len(seen) == len(steps)
        if variant == "retry":
            # A real traceback from the sandbox, which the policy quoted before sending the fix.
            assert "NameError: name 'answer' is not defined" in seen[0]
            first_reply = tiny_tokenizer.decode(server.calls_for(request_id)[1].output_ids, skip_special_tokens=True)
            assert first_reply.startswith("The program failed with `NameError: name 'answer' is not defined`")
            assert seen[1:] == expected[1:]
        else:
            assert seen == expected

        text = _response_text(output, tiny_tokenizer)
        offline_text = final_turn(problem, expected[-1])
        assert text.endswith(offline_text)
        assert text.endswith(f"#### {run_offline(problem, variant)}")
        assert gsm8k.compute_score(text, problem.ground_truth) == gsm8k.compute_score(
            offline_text, problem.ground_truth
        )
        assert gsm8k.compute_score(text, problem.ground_truth) == 1.0

    entries = emulator_journal.entries("sandbox_fusion.run_code")
    assert len(entries) == calls
    assert all((e.status, e.attempt, e.fault) == (200, 1, None) for e in entries)


@pytest.mark.faults({"rules": [{"id": "down", "route": "sandbox_fusion.run_code", "fault": {"status": 503}}]})
def test_unavailable_sandbox_scores_zero(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal, bundled: list[Problem]
) -> None:
    problems = [bundled[i] for i in (40, 4, 17)]
    outputs, _, _ = _rollout(tool_yaml(), tiny_tokenizer, problems)
    for output, problem in zip(outputs, problems, strict=True):
        seen = observations(output, tiny_tokenizer)
        assert seen and all(o.startswith("Sandbox unavailable: ") for o in seen)
        text = _response_text(output, tiny_tokenizer)
        assert text.endswith("#### ")
        assert gsm8k.compute_score(text, problem.ground_truth) == 0
    assert {e.status for e in emulator_journal.entries("sandbox_fusion.run_code")} == {503}
