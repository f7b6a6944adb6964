"""The plan items that apply to ``harness.tools.daytona.DaytonaTool``, through verl's real ``ToolAgentLoop``.

Registration from verl-recipe's keys, the basic case in both sandbox scopes (``call``: a sandbox per tool call;
``trajectory``: one per trajectory, the interpreter keeping its variables across turns) and a batch, each checked
for the real outputs, exact masks and no leaked sandbox (the emulator's Daytona report).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")
pytest.importorskip("daytona", reason="needs the [daytona] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.tools.tool_registry import initialize_tools_from_config

from harness.rollout import (
    CODE_INTERPRETER_SCHEMA,
    ScriptBook,
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    hermes_tool_call,
    load_tools,
    mask_segments,
    observations,
    run_trajectory,
    write_tool_config,
)
from harness.tools.daytona import DaytonaTool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures/tools/daytona_tool_config.yaml"
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.005, "max_delay": 0.02, "max_retry_after": 1}


def _yaml(tmp_path: Path, daytona_config: Any, **config: Any) -> Path:
    config.setdefault("retry", FAST_RETRY)
    path = write_tool_config(tmp_path / "daytona.yaml", base=EXAMPLE, **config)
    text = path.read_text()
    # The example points at a default local emulator; point it at this test's one.
    text = text.replace("http://127.0.0.1:8080/api", daytona_config.api_url)
    text = text.replace("dtn_emulator_default_key", daytona_config.api_key)
    path.write_text(text)
    return path


def _run(path: Path, tokenizer: Any, scripts: Mapping[str, Sequence[str]]) -> list[AgentLoopOutput]:
    async def main() -> list[AgentLoopOutput]:
        tools = load_tools(path)
        server = ScriptedServerManager(tokenizer, ScriptBook(scripts), prompt_length=1024, response_length=1024)
        config = agent_loop_config(prompt_length=1024, response_length=1024)
        try:
            outputs = await asyncio.gather(
                *(
                    run_trajectory(
                        build_tool_agent_loop(config, server, tokenizer, tools),
                        [{"role": "user", "content": f"{tag} Run the programs."}],
                    )
                    for tag in scripts
                )
            )
        finally:
            await close_tools(tools)
        return list(outputs)

    return asyncio.run(main())


def test_tools_registration_daytona(tmp_path: Path, daytona_config: Any) -> None:
    [tool] = initialize_tools_from_config(str(_yaml(tmp_path, daytona_config, rate_limit=5)))
    assert isinstance(tool, DaytonaTool)
    assert tool.name == "code_interpreter"
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == CODE_INTERPRETER_SCHEMA


@pytest.mark.parametrize("scope", ["call", "trajectory"])
def test_tool_call_basic_case_daytona(
    scope: str, tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any
) -> None:
    if scope == "trajectory":  # the second call reads a variable the first one set: same interpreter
        programs, expected = ["x = 41\nprint('set')", "print(x + 1)"], ["set\n", "42\n"]
    else:
        programs, expected = ["print(6 * 7)", "import sys\nprint('e', file=sys.stderr)"], ["42\n", "e\n"]
    turns = [hermes_tool_call("code_interpreter", {"code": p}) for p in programs] + ["Done."]
    [output] = _run(_yaml(tmp_path, daytona_config, sandbox_scope=scope), tiny_tokenizer, {"[basic]": turns})
    assert observations(output, tiny_tokenizer) == expected
    assert [s.mask for s in mask_segments(output, tiny_tokenizer)] == [1, 0, 1, 0, 1]
    assert output.num_turns == 6
    report = daytona_leaks.report
    assert len(report.sandboxes) == (2 if scope == "call" else 1)
    assert report.leaked == []


def test_tool_call_batch_case_daytona(
    tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any
) -> None:
    batch = 20
    scripts = {
        f"[dt {i:02d}]": [
            hermes_tool_call("code_interpreter", {"code": f"n = {i}\nprint(n * 3)"}),
            hermes_tool_call("code_interpreter", {"code": "print(n + 100)"}),
            "Done.",
        ]
        for i in range(batch)
    }
    outputs = _run(_yaml(tmp_path, daytona_config, sandbox_scope="trajectory", rate_limit=4), tiny_tokenizer, scripts)
    for i, output in enumerate(outputs):
        assert observations(output, tiny_tokenizer) == [f"{i * 3}\n", f"{i + 100}\n"], f"trajectory {i}"
    report = daytona_leaks.report
    assert len(report.sandboxes) == batch  # one sandbox per trajectory
    assert report.leaked == []
