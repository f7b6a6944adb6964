"""Plan item "over-size case": a turn that reaches ``response_length`` ends the trajectory; no tool runs.

verl 0.6.1's ``test_over_size_case`` mocked an engine ``finish_reason`` of ``length``. In 0.9.1's ``ToolAgentLoop``
the check is ``len(response_mask) >= response_length`` right after a generation, before any tool call is parsed,
and the output is cut to ``response_length``. The turn below contains a well-formed tool call: it must not run.
"""

from __future__ import annotations

import asyncio
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
    run_trajectory,
)
from harness.tools.sandbox_fusion import SandboxFusionTool

MESSAGES = [{"role": "user", "content": "Print the first 50 squares."}]
LONG_TURN = "I will write a program that prints the squares one per line. " + hermes_tool_call(
    "code_interpreter", {"code": "for i in range(50):\n    print(i * i)"}
)
RESPONSE_LENGTH = 16


def _run(
    tool_path: Path,
    tokenizer: Any,
    turns: list[str],
    *,
    response_length: int,
    server_caps: bool,
    max_assistant_turns: int | None = None,
) -> tuple[AgentLoopOutput, ScriptedServerManager, SandboxFusionTool]:
    async def main() -> tuple[AgentLoopOutput, ScriptedServerManager, SandboxFusionTool]:
        tools = load_tools(tool_path)
        server = ScriptedServerManager(
            tokenizer,
            turns,
            prompt_length=1024 if server_caps else None,
            response_length=response_length if server_caps else None,
        )
        config = agent_loop_config(response_length=response_length, max_assistant_turns=max_assistant_turns)
        loop = build_tool_agent_loop(config, server, tokenizer, tools)
        try:
            output = await run_trajectory(loop, MESSAGES)
        finally:
            await close_tools(tools)
        tool = tools[0]
        assert isinstance(tool, SandboxFusionTool)
        return output, server, tool

    return asyncio.run(main())


@pytest.mark.parametrize("server_caps", [False, True], ids=["model-overruns", "server-caps-like-vllm"])
def test_over_size_case(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal, server_caps: bool
) -> None:
    """``model-overruns``: the server returns the whole long turn and the loop must cut it; ``server-caps``: the
    server stops at ``response_length`` new tokens as verl's vLLM server does. Either way: terminated after one
    generation, response exactly ``response_length`` tokens of the model's own text, no sandbox call."""
    full_ids = tiny_tokenizer.encode(LONG_TURN + "<|im_end|>", add_special_tokens=False)
    assert len(full_ids) > 3 * RESPONSE_LENGTH  # the scripted turn really is over-size
    output, server, tool = _run(
        tool_yaml(),
        tiny_tokenizer,
        [LONG_TURN, "never reached"],
        response_length=RESPONSE_LENGTH,
        server_caps=server_caps,
    )
    assert len(server.calls) == 1
    assert output.response_ids == full_ids[:RESPONSE_LENGTH]
    assert len(output.response_ids) == len(output.response_mask) == RESPONSE_LENGTH
    assert output.response_mask == [1] * RESPONSE_LENGTH
    assert output.num_turns == 2  # the prompt and one assistant turn
    assert emulator_journal.entries() == []  # no HTTP call reached the sandbox
    assert tool._instances == {}  # and no tool instance was ever created


def test_over_size_case_max_assistant_turns(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """verl 0.6.1's variant: ``max_assistant_turns=1`` ends the trajectory after the first turn, tool call unrun."""
    output, server, _ = _run(
        tool_yaml(), tiny_tokenizer, [LONG_TURN], response_length=1024, server_caps=True, max_assistant_turns=1
    )
    assert len(server.calls) == 1
    assert tiny_tokenizer.decode(output.response_ids, skip_special_tokens=False) == LONG_TURN + "<|im_end|>"
    assert set(output.response_mask) == {1}
    assert output.num_turns == 2
    assert emulator_journal.entries() == []


def test_over_size_case_observation_overflows(
    tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """The turn fits, but turn + observation would pass ``response_length``: the tool runs (one HTTP call), the
    observation is dropped rather than cut mid-way, and the trajectory ends with only the model's turn."""
    turn = "Squares: " + hermes_tool_call("code_interpreter", {"code": "for i in range(50):\n    print(i * i)"})
    turn_ids = tiny_tokenizer.encode(turn + "<|im_end|>", add_special_tokens=False)
    response_length = len(turn_ids) + 8  # far less than the 50-line observation
    output, server, _ = _run(
        tool_yaml(), tiny_tokenizer, [turn, "never reached"], response_length=response_length, server_caps=True
    )
    assert len(server.calls) == 1
    assert output.response_ids == turn_ids
    assert [s.mask for s in mask_segments(output, tiny_tokenizer)] == [1]
    assert output.num_turns == 2  # the tool turn was not counted: it never entered the context
    [entry] = emulator_journal.entries("sandbox_fusion.run_code")
    assert (entry.status, entry.outcome, entry.attempt) == (200, "ok", 1)
