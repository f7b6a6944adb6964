"""The unit plan's agent-loop items against verl 0.7.1's OWN ``ToolAgentLoop`` and ``SandboxFusionTool``.

0.7.1's loop takes no tool objects: it reads ``multi_turn.tool_config_path`` and builds its tools itself (and so its
``ExecutionWorker`` Ray actor and, through it, the named ``TokenBucketWorker``). The model is the project's scripted
server manager, the tokenizer the tiny local one; the sandbox is the emulator, whose journal says what reached it.

One loop object serves a whole batch here. 0.7.1's ``AgentLoopWorker`` instantiates a loop per sample, which with
this tool means one new ``ExecutionWorker`` actor (a Ray worker process) per trajectory; on a 2-core machine a
hundred of those would measure Ray, not the tool.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from emulator.journal import Journal
from harness.rollout import ScriptBook, ScriptedServerManager, hermes_tool_call, mask_segments, observations
from harness.rollout.schemas import CODE_INTERPRETER_SCHEMA as SCHEMA

LoopFactory = Callable[..., Any]
RUN_CODE = "sandbox_fusion.run_code"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "repetition_penalty": 1.0, "logprobs": False}


def defect(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"verl 0.7.1 defect: {reason}")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from harness.rollout import tiny_tokenizer

    return tiny_tokenizer()


async def run(loop: Any, messages: list[dict[str, str]], **kwargs: Any) -> Any:
    return await loop.run(dict(SAMPLING), raw_prompt=messages, tools_kwargs=kwargs.pop("tools_kwargs", {}), **kwargs)


# --- request creation -----------------------------------------------------------------------------------------------

REQUEST_MESSAGES = [
    {"role": "system", "content": "You are a careful math tutor."},
    {"role": "user", "content": "What is 17 * 23? Use the code interpreter."},
]


def test_rollout_req_creation(make_loop: LoopFactory, tokenizer: Any, emulator_journal: Journal) -> None:
    from verl.utils.tokenizer import normalize_token_ids

    answer = "17 * 23 = 391."

    async def main() -> tuple[Any, ScriptedServerManager, Any]:
        server = ScriptedServerManager(tokenizer, [answer])
        loop = make_loop(server, tokenizer)
        return await run(loop, REQUEST_MESSAGES), server, loop

    output, server, loop = asyncio.run(main())
    [call] = server.calls
    expected = normalize_token_ids(
        tokenizer.apply_chat_template(REQUEST_MESSAGES, tools=[SCHEMA], add_generation_prompt=True, tokenize=True)
    )
    assert call.prompt_ids == expected  # the tool schema from 0.7.1's own tool object, rendered by the template
    assert loop.tool_schemas == [SCHEMA]
    assert output.prompt_ids == expected
    assert tokenizer.decode(output.response_ids, skip_special_tokens=False) == answer + "<|im_end|>"
    assert output.response_mask == [1] * len(output.response_ids)
    assert output.num_turns == 2
    assert emulator_journal.entries() == []


# --- over-size ------------------------------------------------------------------------------------------------------

LONG_TURN = "I will write a program that prints the squares one per line. " + hermes_tool_call(
    "code_interpreter", {"code": "for i in range(50):\n    print(i * i)"}
)


def test_over_size_case(make_loop: LoopFactory, tokenizer: Any, emulator_journal: Journal) -> None:
    """The model overruns ``response_length`` in one turn: cut to ``response_length``, terminated, no tool call."""
    response_length = 16
    full_ids = tokenizer.encode(LONG_TURN + "<|im_end|>", add_special_tokens=False)
    assert len(full_ids) > 3 * response_length

    async def main() -> tuple[Any, ScriptedServerManager, Any]:
        server = ScriptedServerManager(tokenizer, [LONG_TURN, "never reached"])
        loop = make_loop(server, tokenizer, response_length=response_length)
        return await run(loop, [{"role": "user", "content": "Print the first 50 squares."}]), server, loop

    output, server, loop = asyncio.run(main())
    assert len(server.calls) == 1
    assert output.response_ids == full_ids[:response_length]
    assert output.response_mask == [1] * response_length
    assert output.num_turns == 2
    assert emulator_journal.entries() == []
    assert loop.tools["code_interpreter"]._instance_dict == {}  # no instance was created


# --- basic tool call ------------------------------------------------------------------------------------------------

BASIC_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. Check your work with the code interpreter."},
    {"role": "user", "content": "What are the first 12 hex digits of sha256('plan'), and what does the check print?"},
]
CODE_1 = "import hashlib\nprint(hashlib.sha256(b'plan').hexdigest()[:12])"
CODE_2 = "import sys\nprint('checked')\nprint('exit 3 on purpose', file=sys.stderr)\nsys.exit(3)"
DIGEST = hashlib.sha256(b"plan").hexdigest()[:12]
BASIC_TURNS = [
    "Let me compute the digest. " + hermes_tool_call("code_interpreter", {"code": CODE_1}),
    "Now the check. " + hermes_tool_call("code_interpreter", {"code": CODE_2}),
    f"The digest starts with {DIGEST}; the check printed 'checked' and exited with 3.",
]
#: 0.7.1 shows stdout + stderr of a finished run, whatever the exit code (the project's tool keeps that default).
BASIC_OBSERVATIONS = [DIGEST + "\n", "checked\nexit 3 on purpose\n"]


def _basic(make_loop: LoopFactory, tokenizer: Any) -> tuple[Any, ScriptedServerManager]:
    async def main() -> tuple[Any, ScriptedServerManager]:
        server = ScriptedServerManager(tokenizer, BASIC_TURNS)
        loop = make_loop(server, tokenizer, prompt_length=2048)
        output = await run(loop, BASIC_MESSAGES)
        assert loop.tools["code_interpreter"]._instance_dict == {}  # released after each call
        return output, server

    return asyncio.run(main())


def test_tool_call_basic_case(make_loop: LoopFactory, tokenizer: Any, emulator_journal: Journal) -> None:
    output, server = _basic(make_loop, tokenizer)
    assert len(server.calls) == 3
    assert observations(output, tokenizer) == BASIC_OBSERVATIONS
    segments = mask_segments(output, tokenizer)
    assert [s.mask for s in segments] == [1, 0, 1, 0, 1]
    assert [s.text for s in segments if s.mask] == [t + "<|im_end|>" for t in BASIC_TURNS]
    # 0.7.1 renders a tool turn with the chat template and cuts the system prompt off: unlike 0.9.1's Qwen builder
    # there is no newline after the model's <|im_end|>, so the masked span starts with the next <|im_start|>.
    for segment, observation in zip([s for s in segments if not s.mask], BASIC_OBSERVATIONS, strict=True):
        assert segment.text == (
            f"<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
    sequence = output.prompt_ids + output.response_ids
    for call in server.calls:
        assert sequence[: len(call.prompt_ids)] == call.prompt_ids
    assert output.num_turns == 6
    entries = emulator_journal.entries(RUN_CODE)
    assert [(e.status, e.outcome, e.attempt, e.fault) for e in entries] == [(200, "ok", 1, None)] * 2
    assert entries[0].key != entries[1].key


@defect("a 429 reaches the model as the observation 'no stdout here' instead of being retried")
@pytest.mark.faults({"rules": [{"id": "throttle", "route": RUN_CODE, "requests": "1", "fault": {"status": 429}}]})
def test_tool_call_basic_case_throttled(make_loop: LoopFactory, tokenizer: Any, emulator_journal: Journal) -> None:
    """The same trajectory with the first sandbox request throttled by the gateway. Correct: retried, and the model
    sees the same two observations. 0.7.1: one request, never retried; the model reads 'no stdout here' as if its
    program had printed nothing, and the trajectory goes on."""
    output, _ = _basic(make_loop, tokenizer)
    statuses = [e.status for e in emulator_journal.entries(RUN_CODE)]
    shown = observations(output, tokenizer)
    assert statuses == [429, 200, 200], f"journal statuses {statuses}, observations {shown!r}"
    assert shown == BASIC_OBSERVATIONS


# --- batch ----------------------------------------------------------------------------------------------------------

BATCH = 100
RATE_LIMIT = 4


def _tag(i: int) -> str:
    return f"[task {i:03d}]"


def _hash_program(i: int) -> str:
    return f"import hashlib\nprint('task-{i}', hashlib.sha256(b'task-{i}').hexdigest()[:10])"


def _batch_script(i: int) -> list[str]:
    return [
        "Square it. " + hermes_tool_call("code_interpreter", {"code": f"print({i} * {i} + 7)"}),
        "Hash it. "
        + hermes_tool_call(
            "code_interpreter",
            {"code": f"import hashlib\nprint('task-{i}', hashlib.sha256(b'task-{i}').hexdigest()[:10])"},
        ),
        f"Done with {_tag(i)}.",
    ]


def _batch_expected(i: int) -> list[str]:
    return [f"{i * i + 7}\n", f"task-{i} {hashlib.sha256(f'task-{i}'.encode()).hexdigest()[:10]}\n"]


def test_tool_call_batch_case(make_loop: LoopFactory, tokenizer: Any, emulator_journal: Journal) -> None:
    """100 trajectories at once through one 0.7.1 loop and tool (``rate_limit: 4``, its Ray ``TokenBucketWorker``):
    every trajectory gets its own programs' outputs, the sandbox sees exactly 200 distinct first attempts, and the
    limit holds at the sandbox (the journal's true in-flight maximum)."""

    async def main() -> tuple[list[Any], ScriptedServerManager]:
        server = ScriptedServerManager(tokenizer, ScriptBook({_tag(i): _batch_script(i) for i in range(BATCH)}))
        loop = make_loop(server, tokenizer, tool_config={"rate_limit": RATE_LIMIT, "num_workers": 10})
        outputs = await asyncio.gather(
            *(run(loop, [{"role": "user", "content": f"{_tag(i)} Square {i}, then hash it."}]) for i in range(BATCH))
        )
        return list(outputs), server

    outputs, server = asyncio.run(main())
    for i, output in enumerate(outputs):
        assert observations(output, tokenizer) == _batch_expected(i), f"trajectory {i}"
        assert output.num_turns == 6
    assert len(server.calls) == 3 * BATCH
    entries = emulator_journal.entries(RUN_CODE)
    assert len(entries) == 2 * BATCH and len({e.key for e in entries}) == 2 * BATCH
    assert {(e.status, e.outcome, e.attempt, e.fault) for e in entries} == {(200, "ok", 1, None)}
    assert 1 < emulator_journal.max_in_flight(RUN_CODE) <= RATE_LIMIT
