"""The plan items that apply to ``harness.tools.daytona.DaytonaTool``, through verl's real ``ToolAgentLoop``.

Registration from verl-recipe's keys, the basic case in both sandbox scopes (``call``: a sandbox per tool call;
``trajectory``: one per trajectory, the interpreter keeping its variables across turns) and a batch, each checked
for the real outputs, exact masks and no leaked sandbox (the emulator's Daytona report). Then the request-creation
and over-size items (no sandbox is made for a turn that never runs a tool) and recovery: fault plans on the Daytona
routes (``daytona.sandbox.create``, ``daytona.interpreter.execute``) that the tool must retry without the model ever
seeing them, and a spent budget that shows exactly the tool's infrastructure observation.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")
pytest.importorskip("daytona", reason="needs the [daytona] extra")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.tokenizer import normalize_token_ids

from emulator.faults.bodies import DAYTONA_429_BODY, daytona_rate_limit_headers
from emulator.journal import Journal, JournalEntry
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
from harness.tools.observations import INFRA_FAULT_OBSERVATION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures/tools/daytona_tool_config.yaml"
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.005, "max_delay": 0.02, "max_retry_after": 1}
MAX_ATTEMPTS = FAST_RETRY["max_attempts"]
CREATE = "daytona.sandbox.create"
INTERPRETER = "daytona.interpreter.execute"


def _yaml(tmp_path: Path, daytona_config: Any, **config: Any) -> Path:
    config.setdefault("retry", FAST_RETRY)
    # Pinned to the per-tool-object limiter, as the Sandbox Fusion items: the default (auto) would switch to a
    # cluster-wide Ray limiter whenever an earlier test of the session started Ray.
    config.setdefault("rate_limiter", {"backend": "local"})
    path = write_tool_config(tmp_path / "daytona.yaml", base=EXAMPLE, **config)
    text = path.read_text()
    # The example points at a default local emulator; point it at this test's one.
    text = text.replace("http://127.0.0.1:8080/api", daytona_config.api_url)
    text = text.replace("dtn_emulator_default_key", daytona_config.api_key)
    path.write_text(text)
    return path


def _drive(
    path: Path, tokenizer: Any, scripts: Mapping[str, Sequence[str]], *, response_length: int = 1024
) -> tuple[list[AgentLoopOutput], ScriptedServerManager, DaytonaTool]:
    """All ``scripts`` at once, one ``ToolAgentLoop`` each, one shared tool (closed after: every sandbox deleted)."""

    async def main() -> tuple[list[AgentLoopOutput], ScriptedServerManager, DaytonaTool]:
        tools = load_tools(path)
        server = ScriptedServerManager(
            tokenizer, ScriptBook(scripts), prompt_length=1024, response_length=response_length
        )
        config = agent_loop_config(prompt_length=1024, response_length=response_length)
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
        tool = tools[0]
        assert isinstance(tool, DaytonaTool)
        return list(outputs), server, tool

    return asyncio.run(main())


def _run(path: Path, tokenizer: Any, scripts: Mapping[str, Sequence[str]]) -> list[AgentLoopOutput]:
    return _drive(path, tokenizer, scripts)[0]


def _max_overlap(entries: Iterable[JournalEntry]) -> int:
    """Most requests in flight at once across all the given entries (the journal's own maximum is per route)."""
    spans = [(e.started, e.finished if e.finished is not None else float("inf")) for e in entries]
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    best = current = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


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
    tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Also the limiter item for Daytona: every SDK call of the tool (creates, interpreter runs, deletes) holds one
    of ``rate_limit`` permits, so the Daytona routes together never see more than 4 requests at once."""
    batch = 20
    scripts = {
        f"[dt {i:02d}]": [
            hermes_tool_call("code_interpreter", {"code": f"n = {i}\nprint(n * 3)"}),
            hermes_tool_call("code_interpreter", {"code": "print(n + 100)"}),
            "Done.",
        ]
        for i in range(batch)
    }
    path = _yaml(tmp_path, daytona_config, sandbox_scope="trajectory", rate_limit=4)
    outputs, _, tool = _drive(path, tiny_tokenizer, scripts)
    for i, output in enumerate(outputs):
        assert observations(output, tiny_tokenizer) == [f"{i * 3}\n", f"{i + 100}\n"], f"trajectory {i}"
    report = daytona_leaks.report
    assert len(report.sandboxes) == batch  # one sandbox per trajectory
    assert report.leaked == []
    # The limiter: 20 creates, 40 interpreter runs, 20 deletes, never more than 4 in flight across those routes.
    entries = emulator_journal.entries("daytona")
    assert len(emulator_journal.entries(CREATE)) == batch and len(emulator_journal.entries(INTERPRETER)) == 2 * batch
    assert _max_overlap(entries) <= 4
    assert tool._limiter is not None and tool._limiter.held == 0
    assert 2 <= tool._limiter.max_held <= 4  # really concurrent, and capped


# ---------------------------------------------------------------------------------------- request creation

MESSAGES = [{"role": "system", "content": "You are a careful math tutor."}, {"role": "user", "content": "[q] 17 * 23?"}]


@pytest.mark.parametrize("scope", ["call", "trajectory"])
def test_rollout_req_creation_daytona(
    scope: str, tmp_path: Path, daytona_config: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Beyond the Sandbox Fusion item: the schema the model reads is the Daytona YAML's, loaded into a
    ``DaytonaTool``; and an answer without a tool call makes no sandbox in either scope (``trajectory`` creates its
    sandbox lazily, on the first call, not when the trajectory starts)."""
    path = _yaml(tmp_path, daytona_config, sandbox_scope=scope)

    async def main() -> tuple[AgentLoopOutput, ScriptedServerManager, Any]:
        tools = load_tools(path)
        server = ScriptedServerManager(tiny_tokenizer, ["391."], prompt_length=1024, response_length=256)
        loop = build_tool_agent_loop(
            agent_loop_config(prompt_length=1024, response_length=256), server, tiny_tokenizer, tools
        )
        try:
            output = await run_trajectory(loop, MESSAGES)
        finally:
            await close_tools(tools)
        return output, server, tools[0]

    output, server, tool = asyncio.run(main())
    assert isinstance(tool, DaytonaTool)
    schema = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert schema == CODE_INTERPRETER_SCHEMA
    [call] = server.calls
    expected = normalize_token_ids(
        tiny_tokenizer.apply_chat_template(MESSAGES, tools=[schema], add_generation_prompt=True, tokenize=True)
    )
    assert call.prompt_ids == expected == output.prompt_ids
    text = tiny_tokenizer.decode(call.prompt_ids, skip_special_tokens=False)
    block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in block.splitlines()] == [schema]
    assert text.endswith("<|im_start|>assistant\n")
    assert output.num_turns == 2 and set(output.response_mask) == {1}
    assert emulator_journal.entries("daytona") == []  # no sandbox created, listed or deleted
    assert tool._calls == {} and tool._trajectories == {}


# ---------------------------------------------------------------------------------------------- over-size

LONG_TURN = "I will write a program that prints the squares one per line. " + hermes_tool_call(
    "code_interpreter", {"code": "for i in range(50):\n    print(i * i)"}
)


@pytest.mark.parametrize("scope", ["call", "trajectory"])
def test_over_size_case_daytona(
    scope: str, tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """A first turn (with a well-formed tool call) reaching ``response_length=16``: terminated after one generation,
    cut to 16 tokens of the model's own text, and Daytona never touched: no sandbox created, no interpreter call."""
    full_ids = tiny_tokenizer.encode(LONG_TURN + "<|im_end|>", add_special_tokens=False)
    assert len(full_ids) > 3 * 16
    path = _yaml(tmp_path, daytona_config, sandbox_scope=scope)
    [output], server, tool = _drive(path, tiny_tokenizer, {"[big]": [LONG_TURN, "never reached"]}, response_length=16)
    assert len(server.calls) == 1
    assert output.response_ids == full_ids[:16]
    assert output.response_mask == [1] * 16
    assert output.num_turns == 2
    assert emulator_journal.entries(INTERPRETER) == []
    assert emulator_journal.entries("daytona") == []  # nor any other Daytona route
    assert daytona_leaks.report.sandboxes == []
    assert tool._calls == {} and tool._trajectories == {}


def test_over_size_case_daytona_observation_overflows(
    tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """The turn fits but its observation would not: the program runs once (one sandbox, one interpreter call), the
    observation is dropped whole, and the sandbox is deleted all the same."""
    turn = "Squares: " + hermes_tool_call("code_interpreter", {"code": "for i in range(50):\n    print(i * i)"})
    turn_ids = tiny_tokenizer.encode(turn + "<|im_end|>", add_special_tokens=False)
    path = _yaml(tmp_path, daytona_config, sandbox_scope="call")
    [output], _, _ = _drive(path, tiny_tokenizer, {"[sq]": [turn, "never reached"]}, response_length=len(turn_ids) + 8)
    assert output.response_ids == turn_ids
    assert [s.mask for s in mask_segments(output, tiny_tokenizer)] == [1]
    assert output.num_turns == 2
    [run] = emulator_journal.entries(INTERPRETER)
    assert (run.status, run.outcome, run.attempt) == (101, "ok", 1)
    report = daytona_leaks.report
    assert len(report.sandboxes) == 1 and report.leaked == []


# ---------------------------------------------------------------------------------------------- recovery

TRAJECTORIES = 6
RATE_LIMIT = 3
THROTTLED = {
    "status": 429,
    "headers": daytona_rate_limit_headers("sandbox-create", 300, 0, 1, 1),  # Retry-After-sandbox-create: 1
    "body": DAYTONA_429_BODY,
}
RECOVERABLE = {
    "create-503": (CREATE, {"status": 503}),
    "create-throttled-429": (CREATE, THROTTLED),  # on attempt 1; attempt 2 gets a 503 (see _plan)
    "interpreter-503": (INTERPRETER, {"status": 503}),
    "interpreter-reset": (INTERPRETER, "reset"),
}


def _plan(route: str, fault: Any, attempts: str) -> dict[str, Any]:
    if fault is THROTTLED:  # one throttled attempt (Retry-After-sandbox-create: 1 s), then a 503: ~2 s, not ~4 s
        rules = [
            {"id": "throttled", "route": route, "attempts": "1", "fault": fault},
            {"id": "busy", "route": route, "attempts": "2", "fault": {"status": 503}},
        ]
        return {"seed": 11, "rules": rules}
    return {"seed": 11, "rules": [{"id": "rotten", "route": route, "attempts": attempts, "fault": fault}]}


def _scripts() -> dict[str, list[str]]:
    return {
        f"[job {i}]": [
            hermes_tool_call("code_interpreter", {"code": f"print({i} + 1000)"}),
            hermes_tool_call("code_interpreter", {"code": f"import sys\nprint('job', {i}, file=sys.stderr)"}),
            f"Finished [job {i}].",
        ]
        for i in range(TRAJECTORIES)
    }


def _attempts_by_key(journal: Journal, route: str) -> dict[str, list[JournalEntry]]:
    by_key: dict[str, list[JournalEntry]] = defaultdict(list)
    for entry in journal.entries(route):
        by_key[entry.key].append(entry)
    return {k: sorted(v, key=lambda e: e.attempt) for k, v in by_key.items()}


def _assert_no_fault_text(text: str) -> None:
    for leak in ("Sandbox unavailable", "503", "429", "Throttler", "Too Many", "Unavailable", "timed out", "Error"):
        # "timed out": the tool's TIMEOUT_OBSERVATION, an infra fault must not pass for a program timeout either
        assert leak not in text, f"fault leaked into an observation: {leak!r} in {text!r}"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(name, marks=pytest.mark.faults(_plan(route, fault, "1-2")), id=name)
        for name, (route, fault) in RECOVERABLE.items()
    ],
)
def test_recovery_from_failing_executions_daytona(
    case: str, tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Attempts 1 and 2 of every create (or every sandbox's interpreter run) fail; the third succeeds. ``call`` scope,
    so each tool call has its own sandbox and its own interpreter key. 6 trajectories x 2 calls, ``rate_limit: 3``."""
    faulted, _ = RECOVERABLE[case]
    clean = INTERPRETER if faulted == CREATE else CREATE
    path = _yaml(tmp_path, daytona_config, sandbox_scope="call", rate_limit=RATE_LIMIT)
    outputs, _, tool = _drive(path, tiny_tokenizer, _scripts())
    for i, output in enumerate(outputs):
        seen = observations(output, tiny_tokenizer)
        assert seen == [f"{i + 1000}\n", f"job {i}\n"], f"trajectory {i}"
        for text in seen:
            _assert_no_fault_text(text)
        assert output.num_turns == 6
    # The retries, in the journal: per call (one key each), attempts 1 and 2 faulted, attempt 3 answered.
    attempts = _attempts_by_key(emulator_journal, faulted)
    assert len(attempts) == 2 * TRAJECTORIES
    ok_status = 200 if faulted == CREATE else 101
    for key, tries in attempts.items():
        assert [(e.attempt, e.fault is not None) for e in tries] == [(1, True), (2, True), (3, False)], key
        assert tries[-1].status == ok_status
        if case == "create-throttled-429":  # the 429 carried the throttler's headers; its Retry-After was obeyed
            assert (tries[0].status, tries[1].status) == (429, 503), key
            assert tries[1].started - tries[0].started >= 0.95, key
    assert [e.attempt for e in emulator_journal.entries(clean)] == [1] * 2 * TRAJECTORIES
    assert all(e.fault is None for e in emulator_journal.entries(clean))
    # Nothing leaked: one sandbox per call (a refused create made none), every one deleted; the limiter is whole.
    report = daytona_leaks.report
    assert len(report.sandboxes) == 2 * TRAJECTORIES and report.leaked == []
    assert tool.undeleted == []
    assert _max_overlap(emulator_journal.entries("daytona")) <= RATE_LIMIT
    assert tool._limiter is not None and tool._limiter.held == 0 and tool._limiter.max_held <= RATE_LIMIT


#: route, and the reason the observation names. The SDK reports a refused WebSocket handshake as a bare
#: ``DaytonaError``; the tool reads the status from the error's cause, so the interpreter case names ``HTTP 503`` too.
BUDGET_SPENT = {"create-503": (CREATE, "HTTP 503"), "interpreter-503": (INTERPRETER, "HTTP 503")}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(name, marks=pytest.mark.faults(_plan(route, {"status": 503}, "1-")), id=name)
        for name, (route, _) in BUDGET_SPENT.items()
    ],
)
def test_recovery_budget_spent_shows_infra_observation_daytona(
    case: str, tmp_path: Path, daytona_config: Any, daytona_leaks: Any, tiny_tokenizer: Any, emulator_journal: Journal
) -> None:
    """Every attempt 503s: the loop completes and the model sees exactly the tool's infrastructure observation for
    both calls (not a timeout, not an empty output); the journal shows the whole budget per call and no more."""
    faulted, reason = BUDGET_SPENT[case]
    path = _yaml(tmp_path, daytona_config, sandbox_scope="call", rate_limit=RATE_LIMIT)
    outputs, _, tool = _drive(path, tiny_tokenizer, _scripts())
    infra = INFRA_FAULT_OBSERVATION.format(reason=reason)
    for output in outputs:
        assert observations(output, tiny_tokenizer) == [infra, infra]
        assert output.num_turns == 6
    attempts = _attempts_by_key(emulator_journal, faulted)
    assert len(attempts) == 2 * TRAJECTORIES
    for tries in attempts.values():
        assert [(e.attempt, e.fault, e.status) for e in tries] == [
            (a, "status", 503) for a in range(1, MAX_ATTEMPTS + 1)
        ]
    report = daytona_leaks.report
    if faulted == CREATE:  # no sandbox ever made, and no program ever ran
        assert report.sandboxes == [] and emulator_journal.entries(INTERPRETER) == []
    else:  # a sandbox per call, each deleted although its program never ran
        assert len(report.sandboxes) == 2 * TRAJECTORIES
    assert report.leaked == [] and tool.undeleted == []
    assert tool._limiter is not None and tool._limiter.held == 0
