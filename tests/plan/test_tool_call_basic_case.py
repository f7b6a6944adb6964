"""Plan item "basic tool call": a scripted three-turn trajectory with two tool calls, run for real on the emulator.

The model's turns are scripted; the observations are not: they are what the emulator's sandbox printed for the
code in each call, through ``SandboxFusionTool`` and verl's ``ToolAgentLoop`` (parsing, create/execute/release,
templating, masking). verl 0.6.1's version of this test never ran its body (its skip decorator swallowed it).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from emulator.journal import Journal
from harness.rollout import (
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    hermes_tool_call,
    load_tools,
    mask_segments,
    observations,
    run_trajectory,
)
from harness.tools.sandbox_fusion import SandboxFusionTool

MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. Check your work with the code interpreter."},
    {"role": "user", "content": "What are the first 12 hex digits of sha256('plan'), and what does the check print?"},
]
CODE_1 = "import hashlib\nprint(hashlib.sha256(b'plan').hexdigest()[:12])"
CODE_2 = "import sys\nprint('checked')\nprint('exit 3 on purpose', file=sys.stderr)\nsys.exit(3)"
TURNS = [
    "Let me compute the digest. " + hermes_tool_call("code_interpreter", {"code": CODE_1}),
    "Now the check. " + hermes_tool_call("code_interpreter", {"code": CODE_2}),
    "The digest starts with {digest}; the check printed 'checked' and exited with 3.",
]
DIGEST = hashlib.sha256(b"plan").hexdigest()[:12]
#: What the model must see: the real programs' stdout + stderr (verl 0.7.1's format, whatever the exit code).
EXPECTED_OBSERVATIONS = [DIGEST + "\n", "checked\nexit 3 on purpose\n"]


def _tool_turn(observation: str) -> str:
    """The masked span verl appends for one tool result with the Qwen builder: the newline after ``<|im_end|>``,
    the tool turn as the chat template renders it, and the next generation prompt."""
    return (
        "\n<|im_start|>user\n<tool_response>\n" + observation + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def _run(tool_path: Path, tokenizer: Any) -> tuple[AgentLoopOutput, ScriptedServerManager, SandboxFusionTool]:
    async def main() -> tuple[AgentLoopOutput, ScriptedServerManager, SandboxFusionTool]:
        tools = load_tools(tool_path)
        turns = [*TURNS[:2], TURNS[2].format(digest=DIGEST)]
        server = ScriptedServerManager(tokenizer, turns, prompt_length=2048, response_length=1024)
        loop = build_tool_agent_loop(
            agent_loop_config(prompt_length=2048, response_length=1024), server, tokenizer, tools
        )
        try:
            output = await run_trajectory(
                loop, MESSAGES, tools_kwargs={"code_interpreter": {"create_kwargs": {"ground_truth": DIGEST}}}
            )
        finally:
            await close_tools(tools)
        tool = tools[0]
        assert isinstance(tool, SandboxFusionTool)
        return output, server, tool

    return asyncio.run(main())


def test_tool_call_basic_case(tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal) -> None:
    output, server, tool = _run(tool_yaml(), tiny_tokenizer)

    # Three generations; the 2nd and 3rd prompts carry the real program outputs as tool responses.
    assert len(server.calls) == 3
    assert len(set(server.request_ids)) == 1
    assert "<tool_response>" not in tiny_tokenizer.decode(server.calls[0].prompt_ids)
    for call, observation in zip(server.calls[1:], EXPECTED_OBSERVATIONS, strict=True):
        prompt = tiny_tokenizer.decode(call.prompt_ids, skip_special_tokens=False)
        assert prompt.endswith(_tool_turn(observation))
    assert observations(output, tiny_tokenizer) == EXPECTED_OBSERVATIONS

    # response_mask: 1 exactly over the model's turns, 0 exactly over the two tool turns.
    segments = mask_segments(output, tiny_tokenizer)
    assert [s.mask for s in segments] == [1, 0, 1, 0, 1]
    model_turns = [s.text for s in segments if s.mask == 1]
    assert model_turns == [t + "<|im_end|>" for t in (TURNS[0], TURNS[1], TURNS[2].format(digest=DIGEST))]
    assert [s.text for s in segments if s.mask == 0] == [_tool_turn(o) for o in EXPECTED_OBSERVATIONS]
    assert sum(output.response_mask) == sum(len(c.output_ids) for c in server.calls)

    # The token stream is continuous: each prompt the model got is a prefix of the final sequence.
    sequence = output.prompt_ids + output.response_ids
    for call in server.calls:
        assert sequence[: len(call.prompt_ids)] == call.prompt_ids
    assert output.prompt_ids == server.calls[0].prompt_ids

    # Turns: prompt + 3 assistant + 2 tool turns.
    assert output.num_turns == 6
    assert output.extra_fields["tool_rewards"] == [0.0, 0.0]

    # The sandbox saw exactly two first attempts, one after the other, both answered.
    entries = emulator_journal.entries("sandbox_fusion.run_code")
    assert [(e.status, e.outcome, e.attempt, e.fault) for e in entries] == [(200, "ok", 1, None)] * 2
    assert entries[0].finished is not None and entries[0].finished <= entries[1].started
    assert len({e.key for e in entries}) == 2
    assert tool._instances == {}  # one create/release per call, nothing left behind
