"""Plan item "batch tool calls": 100 trajectories at once through one tool object, each with its own programs.

Every trajectory must get its own programs' outputs (no cross-talk between concurrent calls), the sandbox must
see exactly the expected calls, and the tool's ``rate_limit`` must hold: the emulator's journal gives the true
maximum of simultaneous requests, no timing guesswork.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable, Iterator
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
from harness.tools.sandbox_fusion import SandboxFusionTool

BATCH = 100
RATE_LIMIT = 4


def _tag(i: int) -> str:
    return f"[task {i:03d}]"


def _programs(i: int) -> tuple[str, str]:
    return (
        f"print({i} * {i} + 7)",
        f"import hashlib\nprint('task-{i}', hashlib.sha256(b'task-{i}').hexdigest()[:10])",
    )


def _expected(i: int) -> list[str]:
    return [f"{i * i + 7}\n", f"task-{i} {hashlib.sha256(f'task-{i}'.encode()).hexdigest()[:10]}\n"]


def _script(i: int) -> list[str]:
    first, second = _programs(i)
    return [
        "Square it. " + hermes_tool_call("code_interpreter", {"code": first}),
        "Hash it. " + hermes_tool_call("code_interpreter", {"code": second}),
        f"Done with {_tag(i)}.",
    ]


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.slow)])
def limiter_spec(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """``local``: the tool object's own limiter; ``ray``: the cluster-wide named Ray actor (a fresh name)."""
    if request.param == "local":
        yield {"backend": "local"}
        return
    session = request.getfixturevalue("ray_session")
    from harness.ratelimit.ray_backend import kill

    name = f"plan-batch-{uuid.uuid4().hex[:8]}"
    yield {"backend": "ray", "name": name}
    kill(name, namespace=session["namespace"])


def test_tool_call_batch_case(
    limiter_spec: dict[str, Any],
    tool_yaml: Callable[..., Path],
    tiny_tokenizer: Any,
    emulator_journal: Journal,
    record_property: Callable[[str, object], None],
) -> None:
    path = tool_yaml(rate_limit=RATE_LIMIT, num_workers=10, rate_limiter=limiter_spec)

    async def main() -> tuple[list[AgentLoopOutput], ScriptedServerManager, SandboxFusionTool, float, LimiterStats]:
        tools = load_tools(path)  # one tool object shared by every trajectory, as in an AgentLoopWorker
        book = ScriptBook({_tag(i): _script(i) for i in range(BATCH)})
        server = ScriptedServerManager(tiny_tokenizer, book, prompt_length=1024, response_length=1024)
        config = agent_loop_config(prompt_length=1024, response_length=1024)
        loops = [build_tool_agent_loop(config, server, tiny_tokenizer, tools) for _ in range(BATCH)]
        started = time.perf_counter()
        try:
            outputs = await asyncio.gather(
                *(
                    run_trajectory(loop, [{"role": "user", "content": f"{_tag(i)} Square {i}, then hash it."}])
                    for i, loop in enumerate(loops)
                )
            )
            elapsed = time.perf_counter() - started
            tool = tools[0]
            assert isinstance(tool, SandboxFusionTool) and tool._limiter is not None
            assert tool._limiter.backend == limiter_spec["backend"]
            stats = await tool._limiter.stats()
        finally:
            await close_tools(tools)
        return list(outputs), server, tool, elapsed, stats

    outputs, server, tool, elapsed, stats = asyncio.run(main())
    rate = BATCH / elapsed
    record_property("trajectories_per_s", round(rate, 1))
    print(
        f"\n{BATCH} trajectories in {elapsed:.2f} s: {rate:.1f} trajectories/s, {2 * BATCH / elapsed:.1f} tool calls/s"
    )

    # Each trajectory got its own programs' outputs, and finished all three turns.
    for i, output in enumerate(outputs):
        assert observations(output, tiny_tokenizer) == _expected(i), f"trajectory {i}"
        assert output.num_turns == 6
        assert tiny_tokenizer.decode(output.response_ids, skip_special_tokens=False).endswith(
            f"Done with {_tag(i)}.<|im_end|>"
        )
    assert len(server.calls) == 3 * BATCH
    assert isinstance(server.responder, ScriptBook)
    assert sorted(server.responder.bound.values()) == sorted(_tag(i) for i in range(BATCH))

    # The sandbox saw exactly the 200 expected calls: distinct programs, all first attempts, all answered.
    entries = emulator_journal.entries("sandbox_fusion.run_code")
    assert len(entries) == 2 * BATCH
    assert len({e.key for e in entries}) == 2 * BATCH
    assert {(e.status, e.outcome, e.attempt, e.fault) for e in entries} == {(200, "ok", 1, None)}

    # The tool's rate_limit held; and it was the binding constraint (100 trajectories wanted more at once).
    peak = emulator_journal.max_in_flight("sandbox_fusion.run_code")
    assert 1 < peak <= RATE_LIMIT
    assert (stats.max_held, stats.held, stats.acquires, stats.releases) == (RATE_LIMIT, 0, 2 * BATCH, 2 * BATCH)
    assert tool._instances == {}
