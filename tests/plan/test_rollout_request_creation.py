"""Plan item "rollout request creation": the PENDING state builds the prompt as verl builds it.

verl 0.6.1's ``test_rollout_req_creation`` checked an ``AsyncRolloutRequest`` of the legacy SGLang rollout (gone in
0.8). Its 0.9.1 equivalent is ``ToolAgentLoop._handle_pending_state``: the chat template rendered with the tool
schemas, left-truncated to ``prompt_length``. The scripted server records the ids the model is handed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.utils.tokenizer import normalize_token_ids

from emulator.journal import Journal
from harness.rollout import (
    CODE_INTERPRETER_SCHEMA,
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    load_tools,
    run_trajectory,
)

MESSAGES = [
    {"role": "system", "content": "You are a careful math tutor."},
    {"role": "user", "content": "What is 17 * 23? Use the code interpreter."},
]
ANSWER = "17 * 23 = 391."


def _run(
    tool_path: Path, tokenizer: Any, *, prompt_length: int, extra_info: dict[str, Any] | None = None
) -> tuple[AgentLoopOutput, ScriptedServerManager]:
    async def main() -> tuple[AgentLoopOutput, ScriptedServerManager]:
        tools = load_tools(tool_path)
        server = ScriptedServerManager(tokenizer, [ANSWER], prompt_length=prompt_length, response_length=256)
        loop = build_tool_agent_loop(
            agent_loop_config(prompt_length=prompt_length, response_length=256), server, tokenizer, tools
        )
        try:
            output = await run_trajectory(loop, MESSAGES, extra_info=extra_info)
        finally:
            await close_tools(tools)
        return output, server

    return asyncio.run(main())


def _tools_block(text: str) -> list[Any]:
    body = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return [json.loads(line) for line in body.splitlines()]


def test_rollout_req_creation(tool_yaml: Callable[..., Path], tiny_tokenizer: Any, emulator_journal: Journal) -> None:
    output, server = _run(tool_yaml(), tiny_tokenizer, prompt_length=1024)
    assert len(server.calls) == 1
    prompt_ids = server.calls[0].prompt_ids

    # Built as verl builds it: the chat template with the tool schemas and the generation prompt.
    expected = normalize_token_ids(
        tiny_tokenizer.apply_chat_template(
            MESSAGES, tools=[CODE_INTERPRETER_SCHEMA], add_generation_prompt=True, tokenize=True
        )
    )
    assert prompt_ids == expected
    assert output.prompt_ids == prompt_ids

    text = tiny_tokenizer.decode(prompt_ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a careful math tutor.\n\n# Tools\n")
    assert _tools_block(text) == [CODE_INTERPRETER_SCHEMA]  # the schema, exactly, as the model reads it
    assert text.endswith(
        "<|im_start|>user\nWhat is 17 * 23? Use the code interpreter.<|im_end|>\n<|im_start|>assistant\n"
    )

    # No tool call in the answer: one assistant turn, all of it the model's (mask 1), nothing sent to the sandbox.
    assert tiny_tokenizer.decode(output.response_ids, skip_special_tokens=False) == ANSWER + "<|im_end|>"
    assert output.response_mask == [1] * len(output.response_ids)
    assert output.num_turns == 2
    assert emulator_journal.entries() == []


def test_rollout_req_creation_prompt_length_limit(tool_yaml: Callable[..., Path], tiny_tokenizer: Any) -> None:
    """A prompt longer than ``prompt_length`` is left-truncated to exactly ``prompt_length`` (the generation prompt
    and the question survive, the head of the system turn goes)."""
    full = normalize_token_ids(
        tiny_tokenizer.apply_chat_template(
            MESSAGES, tools=[CODE_INTERPRETER_SCHEMA], add_generation_prompt=True, tokenize=True
        )
    )
    limit = len(full) // 2
    output, server = _run(tool_yaml(), tiny_tokenizer, prompt_length=limit)
    assert server.calls[0].prompt_ids == full[-limit:]
    assert len(output.prompt_ids) == limit
    assert tiny_tokenizer.decode(output.prompt_ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n")


def test_rollout_req_creation_tool_selection(tool_yaml: Callable[..., Path], tiny_tokenizer: Any) -> None:
    """Per-sample ``extra_info.tool_selection`` (verl 0.9.1) filters the schemas put in the prompt."""
    _, server = _run(tool_yaml(), tiny_tokenizer, prompt_length=1024, extra_info={"tool_selection": ["other"]})
    text = tiny_tokenizer.decode(server.calls[0].prompt_ids, skip_special_tokens=False)
    assert "<tools>" not in text and "code_interpreter" not in text
    assert text == tiny_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
