"""A real rollout dump to validate: GSM8K-style problems run through verl's ``ToolAgentLoop`` with the project's
``SandboxFusionTool`` on the in-process emulator, dumped with ``harness.rollout.dump`` as the runner will.

The model's turns are scripted; everything else is real: the tool parser, the sandbox runs (observations are what
the programs printed), the truncation of long observations, an infrastructure fault the tool gives up on, a call
left unanswered at the turn limit. ``tool_calls`` come from a thin recording wrapper around the tool.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TOOL_YAML = ROOT / "fixtures/tools/sandbox_fusion_tool_config.yaml"
FAST_RETRY = {"max_attempts": 3, "base_delay": 0.001, "max_delay": 0.005, "max_retry_after": 1}
SYSTEM = "You are a math expert. Use the code interpreter, then give the final answer after '####'."


def _call(code: str) -> str:
    from harness.rollout import hermes_tool_call

    return hermes_tool_call("code_interpreter", {"code": code})


@dataclass
class Problem:
    """One scripted trajectory: the question, the model's turns, the ground truth, and loop settings."""

    tag: str
    question: str
    turns: list[str]
    gts: str
    loop: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, Any] | None = None  # fault plan in force while this trajectory runs


def problems() -> list[Problem]:
    return [
        Problem(
            "p1",
            "Natalia sold clips to 48 of her friends in April, and then half as many in May. How many in all?",
            ["Let me add them. " + _call("print(48 + 48 // 2)"), "She sold 72 clips.\n#### 72"],
            "72",
        ),
        Problem(
            "p2",
            "What is 2 + 3? Print a long line too.",
            [
                "First a long line. " + _call("print('x' * 300)"),
                "Now the sum. " + _call("print(2 + 3)"),
                "The sum is 5.\n#### 5",
            ],
            "6",  # the model is wrong: score 0
            loop={"max_tool_response_length": 64, "tool_response_truncate_side": "middle"},
        ),
        Problem(
            "p3",
            "Compute 4 + 6 two ways.",
            ["Two checks at once. " + _call("print('ten =', 4 + 6)") + "\n" + _call("print(sum([4, 6]))"), "#### 10"],
            "10",
            loop={"max_parallel_calls": 2, "max_tool_response_length": 8, "tool_response_truncate_side": "left"},
        ),
        Problem("p4", "What is 1 + 2?", ["Easy: 1 + 2 = 3.\n#### 3"], "3"),
        Problem(
            "p5",
            "What is 10 - 7?",
            ["Let me run it. " + _call("print(10 - 7)"), "The sandbox failed; by hand 10 - 7 = 3.\n#### 3"],
            "3",
            faults={"rules": [{"id": "down", "route": "sandbox_fusion.run_code", "fault": {"status": 504}}]},
        ),
        Problem(
            "p6",
            "What is 6 * 7?",
            ["Run it. " + _call("print(6 * 7, 'is the product')"), "Once more. " + _call("print(7 * 6)")],
            "42",
            # the second call is never answered (turn limit); "right" keeps the head of the first observation
            loop={"max_assistant_turns": 2, "max_tool_response_length": 10, "tool_response_truncate_side": "right"},
        ),
    ]


class RecordingTool:
    """Wraps a verl tool; files what each call returned (before verl truncates it) under the request id."""

    def __init__(self, inner: Any) -> None:
        from verl.tools.base_tool import BaseTool

        class _Recorder(BaseTool):  # type: ignore[misc]
            async def create(self, instance_id: str | None = None, **kwargs: Any) -> Any:
                return await inner.create(instance_id, **kwargs)

            async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
                # The slot is taken before the call runs: verl starts parallel calls in the model's order, but they
                # finish in any order, and tool_calls must follow the calls in the output.
                record: dict[str, Any] = {"name": self.name, "arguments": dict(parameters)}
                outer.calls[kwargs["agent_data"].request_id].append(record)
                response, reward, metrics = await inner.execute(instance_id, parameters, **kwargs)
                record["observation"] = response.text
                record["infra_fault"] = metrics.get("infra_fault")
                record["attempts"] = int(metrics.get("attempts", 1))
                return response, reward, metrics

            async def release(self, instance_id: str, **kwargs: Any) -> None:
                await inner.release(instance_id, **kwargs)

        outer = self
        self.calls: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self.tool = _Recorder(inner.config, inner.tool_schema)


def run_problem(problem: Problem, tool_path: Path, tokenizer: Any, emulator: Any) -> dict[str, Any]:
    """Run one problem through verl's ToolAgentLoop; return its dump fields (verl's and the runner's extras)."""
    from verl.utils.reward_score.gsm8k import compute_score

    from harness.rollout import (
        ScriptedServerManager,
        agent_loop_config,
        build_tool_agent_loop,
        close_tools,
        load_tools,
        run_trajectory,
    )
    from harness.rollout.dump import decode_sample

    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"[{problem.tag}] {problem.question}"},
    ]

    async def main() -> tuple[Any, list[str], RecordingTool]:
        tools = load_tools(tool_path)
        recorder = RecordingTool(tools[0])
        server = ScriptedServerManager(tokenizer, problem.turns, prompt_length=2048, response_length=1024)
        config = agent_loop_config(prompt_length=2048, response_length=1024, **problem.loop)
        loop = build_tool_agent_loop(config, server, tokenizer, [recorder.tool])
        try:
            output = await run_trajectory(loop, messages)
        finally:
            await close_tools(tools)
        return output, server.request_ids, recorder

    emulator.set_faults(problem.faults)
    try:
        output, request_ids, recorder = asyncio.run(main())
    finally:
        emulator.set_faults(None)
    prompt, response = decode_sample(tokenizer, output.prompt_ids, output.response_ids)
    score = float(compute_score(response, problem.gts))
    request_id = request_ids[0]
    return {
        "input": prompt,
        "output": response,
        "gts": problem.gts,
        "score": score,
        "acc": score,
        "request_id": request_id,
        "num_turns": output.num_turns,
        "tool_calls": recorder.calls.get(request_id, []),
    }


def build_dump(directory: Path, tool_path: Path, tokenizer: Any, emulator: Any, step: int = 1) -> list[dict[str, Any]]:
    """Run every problem and write them as step ``step`` of a dump in ``directory``; returns the entries."""
    from harness.rollout.dump import build_entries, write_step

    samples = [run_problem(problem, tool_path, tokenizer, emulator) for problem in problems()]
    columns = {key: [s[key] for s in samples] for key in ("acc", "request_id", "num_turns", "tool_calls")}
    entries = build_entries(
        [s["input"] for s in samples],
        [s["output"] for s in samples],
        [s["gts"] for s in samples],
        [s["score"] for s in samples],
        step,
        columns,
    )
    write_step(directory, step, entries)
    return entries


def write_tool_yaml(path: Path, url: str) -> Path:
    from harness.rollout import write_tool_config

    return write_tool_config(path, base=EXAMPLE_TOOL_YAML, url=url, retry=FAST_RETRY, rate_limiter={"backend": "local"})


@pytest.fixture
def dump_builder(tmp_path: Path, tiny_tokenizer: Any) -> Callable[[Path, Any, int], list[dict[str, Any]]]:
    """``dump_builder(directory, emulator_server, step)``: run the problems on that emulator, dump them; entries."""

    def build(directory: Path, server: Any, step: int) -> list[dict[str, Any]]:
        tool_path = write_tool_yaml(tmp_path / "tools.yaml", server.run_code_url)
        return build_dump(directory, tool_path, tiny_tokenizer, server.emulator, step)

    return build


@pytest.fixture
def problem_count() -> int:
    return len(problems())


@pytest.fixture(scope="module")
def good_dump(tmp_path_factory: pytest.TempPathFactory, sandbox_emulator_session: Any) -> Iterator[Path]:
    """A dump directory (``1.jsonl``) of the problems above, built once per module on the session emulator."""
    pytest.importorskip("verl", reason="needs the [verl] extra")
    from harness.rollout import tiny_tokenizer

    root = tmp_path_factory.mktemp("good_dump")
    emulator = sandbox_emulator_session.emulator
    emulator.reset()
    try:
        tool_path = write_tool_yaml(root / "tools.yaml", sandbox_emulator_session.run_code_url)
        build_dump(root / "dump", tool_path, tiny_tokenizer(), emulator)
    finally:
        emulator.set_faults(None)
        emulator.reset()
    yield root / "dump"


@pytest.fixture
def good_entries(good_dump: Path) -> list[dict[str, Any]]:
    """A fresh copy of the good dump's entries, to mutate."""
    lines = (good_dump / "1.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture
def mutated(tmp_path: Path) -> Callable[[list[dict[str, Any]]], Path]:
    """``mutated(entries)``: write ``entries`` as step 1 of a new dump directory; returns the directory."""
    from harness.rollout.dump import write_step

    def write(entries: list[dict[str, Any]], step: int = 1) -> Path:
        directory = tmp_path / "mutated"
        write_step(directory, step, entries)
        return directory

    return write
