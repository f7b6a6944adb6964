"""harness.tools.daytona.DaytonaTool with the real daytona SDK against the emulated Daytona: both sandbox scopes,
state across turns, timeouts, retried throttling, and no leaked sandbox whatever happens."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import yaml

pytest.importorskip("daytona", reason="needs the [daytona] extra")
pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.tools.tool_registry import initialize_tools_from_config

from emulator.server import EmulatorServer
from harness.tools.daytona import (
    REVIVED_NOTES,
    TIMEOUT_OBSERVATION,
    WORKER_ENDED_OBSERVATION,
    DaytonaTool,
    normalize_code,
)
from harness.tools.observations import INFRA_FAULT_OBSERVATION

ROOT = Path(__file__).resolve().parents[2]
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.01, "max_delay": 0.05, "max_retry_after": 2}


class AgentData:
    """Stands in for verl's AgentData: what the tool reads is ``request_id``, and it must be weak-referenceable."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


def make_tool(server: EmulatorServer, **config: Any) -> DaytonaTool:
    base = {
        "type": "native",
        "api_url": server.url + "/api",
        "api_key": server.emulator.config.daytona.api_key,
        "retry": FAST_RETRY,
        # Pinned: the default (auto) would use a cluster-wide Ray limiter whenever an earlier test started Ray.
        "rate_limiter": {"backend": "local"},
    }
    return DaytonaTool({**base, **config})


def leaked(server: EmulatorServer) -> list[str]:
    return [record.id for record in server.emulator.daytona_report().leaked]


def run_calls(tool: DaytonaTool, calls: list[dict[str, Any]]) -> list[tuple[str | None, dict[str, Any]]]:
    """Each call a full create/execute/release cycle, as verl's agent loop does it."""

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        out = []
        try:
            for parameters in calls:
                instance_id, _ = await tool.create()
                try:
                    response, _, metrics = await tool.execute(instance_id, parameters)
                finally:
                    await tool.release(instance_id)
                out.append((response.text, metrics))
        finally:
            await tool.aclose()
        return out

    return asyncio.run(main())


def test_loads_from_yaml_and_runs_per_call(sandbox_emulator: EmulatorServer, tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "fixtures/tools/daytona_tool_config.yaml").read_text())
    config["tools"][0]["config"]["api_url"] = sandbox_emulator.url + "/api"
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(config))
    [tool] = initialize_tools_from_config(str(path))
    assert isinstance(tool, DaytonaTool) and tool.name == "code_interpreter"
    [(text, metrics)] = run_calls(tool, [{"code": "print(1 + 1)"}])
    assert text == "2\n" and metrics["status"] == "success"
    assert leaked(sandbox_emulator) == []
    assert len(sandbox_emulator.emulator.daytona_report().sandboxes) == 1


def test_errors_and_timeouts_are_program_outcomes(sandbox_emulator: EmulatorServer) -> None:
    tool = make_tool(sandbox_emulator)
    results = run_calls(
        tool, [{"code": "print('before')\nraise ValueError('boom')"}, {"code": "while True: pass", "timeout": 1}]
    )
    (error_text, error_metrics), (timeout_text, timeout_metrics) = results
    assert error_text is not None and error_text.startswith("before\n")
    assert "ValueError: boom" in error_text
    assert error_metrics["had_error"] and error_metrics["error_name"] == "ValueError"
    assert timeout_text == TIMEOUT_OBSERVATION.format(timeout=1)
    assert timeout_metrics["status"] == "timeout"
    assert leaked(sandbox_emulator) == []


def test_trajectory_scope_keeps_state_and_deletes_when_the_trajectory_ends(sandbox_emulator: EmulatorServer) -> None:
    tool = make_tool(sandbox_emulator, sandbox_scope="trajectory")

    async def main() -> list[str | None]:
        agent_data: Any = AgentData("trajectory-1")
        texts = []
        for code in ("x = 20", "x += 1", "print(x * 2)"):
            instance_id, _ = await tool.create()
            response, _, _ = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
            await tool.release(instance_id)
            texts.append(response.text)
        assert len(sandbox_emulator.emulator.daytona_report().sandboxes) == 1
        assert leaked(sandbox_emulator) != []  # alive while the trajectory lives
        del agent_data
        gc.collect()
        for _ in range(100):  # the deletion runs as a task on this loop: let it
            if not leaked(sandbox_emulator):
                break
            await asyncio.sleep(0.02)
        await tool.aclose()
        return texts

    assert asyncio.run(main()) == ["", "", "42\n"]
    assert leaked(sandbox_emulator) == []


def test_cancelled_trajectories_leak_nothing(sandbox_emulator: EmulatorServer) -> None:
    tool = make_tool(sandbox_emulator, sandbox_scope="trajectory")

    async def main() -> None:
        async def trajectory(i: int) -> None:
            agent_data: Any = AgentData(f"t{i}")
            instance_id, _ = await tool.create()
            parameters = {"code": "import time; time.sleep(5)", "timeout": 10}
            await tool.execute(instance_id, parameters, agent_data=agent_data)

        tasks = [asyncio.create_task(trajectory(i)) for i in range(6)]
        # Cancel while every trajectory's program is running: wait (no fixed delay) until the journal shows all six
        # interpreter executions in flight.
        journal = sandbox_emulator.emulator.journal
        deadline = asyncio.get_running_loop().time() + 30
        while journal.in_flight("daytona.interpreter.execute") < 6:
            assert asyncio.get_running_loop().time() < deadline, "the six programs never all started"
            await asyncio.sleep(0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await tool.aclose()

    asyncio.run(main())
    assert len(sandbox_emulator.emulator.daytona_report().sandboxes) == 6
    assert leaked(sandbox_emulator) == []


@pytest.mark.faults(
    {"rules": [{"id": "busy", "route": "daytona.sandbox.create", "attempts": "1", "fault": {"status": 503}}]}
)
def test_create_failures_are_retried(sandbox_emulator: EmulatorServer) -> None:
    [(text, metrics)] = run_calls(make_tool(sandbox_emulator), [{"code": "print('ok')"}])
    assert text == "ok\n" and metrics["status"] == "success"
    creates = sandbox_emulator.emulator.journal.entries("daytona.sandbox.create")
    assert [e.status for e in creates] == [503, 200]
    assert leaked(sandbox_emulator) == []


@pytest.mark.faults(
    {"rules": [{"id": "lost", "route": "daytona.sandbox.create", "attempts": "1", "fault": "truncate"}]}
)
def test_a_create_whose_answer_was_lost_is_adopted_not_repeated(sandbox_emulator: EmulatorServer) -> None:
    """The first create really creates the sandbox, but its answer is cut off: the tool cannot know. Before trying
    again it looks for a sandbox labelled with its instance id, finds it and uses it: no second create (which would
    clash on the name or leak the first), nothing left behind."""
    [(text, metrics)] = run_calls(make_tool(sandbox_emulator), [{"code": "print('ok')"}])
    assert text == "ok\n" and metrics["attempts"] == 1
    journal = sandbox_emulator.emulator.journal
    assert [e.fault for e in journal.entries("daytona.sandbox.create")] == ["truncate"]
    assert journal.entries("daytona.sandbox.list")  # it looked before re-creating
    assert len(sandbox_emulator.emulator.daytona_report().sandboxes) == 1
    assert leaked(sandbox_emulator) == []


@pytest.mark.faults(
    {"rules": [{"id": "attempt-1", "route": "daytona.interpreter.execute", "attempts": "1", "fault": {"status": 503}}]}
)
def test_execution_attempts_are_reported(sandbox_emulator: EmulatorServer) -> None:
    [(text, metrics)] = run_calls(make_tool(sandbox_emulator), [{"code": "print('ok')"}])
    assert text == "ok\n" and metrics["attempts"] == 2


@pytest.mark.faults({"rules": [{"id": "down", "route": "daytona.sandbox.create", "fault": {"status": 503}}]})
def test_spent_budget_is_an_infra_observation(sandbox_emulator: EmulatorServer) -> None:
    [(text, metrics)] = run_calls(make_tool(sandbox_emulator), [{"code": "print('ok')"}])
    assert text == INFRA_FAULT_OBSERVATION.format(reason="HTTP 503")
    assert metrics["status"] == "infra_fault" and metrics["attempts"] == FAST_RETRY["max_attempts"]
    assert len(sandbox_emulator.emulator.journal.entries("daytona.sandbox.create")) == FAST_RETRY["max_attempts"]
    assert leaked(sandbox_emulator) == []


def test_many_calls_respect_the_rate_limit(sandbox_emulator: EmulatorServer) -> None:
    tool = make_tool(sandbox_emulator, rate_limit=4)

    async def main() -> list[str | None]:
        async def one(i: int) -> str | None:
            instance_id, _ = await tool.create()
            response, _, _ = await tool.execute(instance_id, {"code": f"print({i})"})
            await tool.release(instance_id)
            return response.text

        texts = await asyncio.gather(*(one(i) for i in range(24)))
        await tool.aclose()
        return list(texts)

    assert asyncio.run(main()) == [f"{i}\n" for i in range(24)]
    assert sandbox_emulator.emulator.journal.max_in_flight("daytona") <= 4
    assert leaked(sandbox_emulator) == []


def test_cluster_wide_limiter_caps_two_tool_objects(sandbox_emulator: EmulatorServer, ray_session: Any) -> None:
    """Two tool objects (two rollout workers) share one Ray limiter: together never more than its limit in flight."""
    name = f"daytona-test-{uuid4().hex[:8]}"
    limiter = {"backend": "ray", "name": name, "limit": 3}
    tools = [make_tool(sandbox_emulator, rate_limit=3, rate_limiter=limiter) for _ in range(2)]

    async def main() -> list[str | None]:
        async def one(tool: DaytonaTool, i: int) -> str | None:
            instance_id, _ = await tool.create()
            response, _, _ = await tool.execute(instance_id, {"code": f"print({i})"})
            await tool.release(instance_id)
            return response.text

        texts = await asyncio.gather(*(one(tools[i % 2], i) for i in range(16)))
        for tool in tools:
            await tool.aclose()
        return list(texts)

    assert asyncio.run(main()) == [f"{i}\n" for i in range(16)]
    entries = sandbox_emulator.emulator.journal.entries("daytona")
    events = sorted([(e.started, 1) for e in entries] + [(e.finished or 0.0, -1) for e in entries])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    assert peak <= 3  # across both tool objects and every Daytona route
    assert leaked(sandbox_emulator) == []


def test_normalize_code() -> None:
    assert normalize_code("```python\nx = 2\nx * 21\n```") == "x = 2\nprint(x * 21)"
    assert normalize_code("print(1)") == "print(1)"
    assert normalize_code("for i in range(2):\n    print(i)") == "for i in range(2):\n    print(i)"


def test_bad_config_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    monkeypatch.delenv("DAYTONA_JWT_TOKEN", raising=False)
    with pytest.raises(ValueError, match="credentials"):
        DaytonaTool({"type": "native"})
    with pytest.raises(ValueError, match="python only"):
        DaytonaTool({"type": "native", "api_key": "k", "language": "typescript"})
    with pytest.raises(ValueError, match="sandbox_scope"):
        DaytonaTool({"type": "native", "api_key": "k", "sandbox_scope": "forever"})


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_create_that_timed_out_while_creating_is_adopted_or_swept(attempts: int) -> None:
    """The create times out on the tool's side while the sandbox is still creating. With a second attempt the tool
    finds it by its label and waits for it to start; with none it deletes it, and the API refuses to delete a sandbox
    between states (409) until the creation is done: the tool waits that out rather than leaving it behind."""
    from emulator.app import Emulator, EmulatorConfig
    from emulator.daytona.config import DaytonaConfig as EmulatedDaytona

    emulator = Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key="k", create_latency=2.0)))
    with EmulatorServer(emulator) as server:
        retry = {**FAST_RETRY, "max_attempts": attempts}
        tool = make_tool(server, create_timeout=1.5, retry=retry)
        [(text, _metrics)] = run_calls(tool, [{"code": "print('ok')"}])
        journal = server.emulator.journal
        assert len(journal.entries("daytona.sandbox.create")) == 1
        deletes = [e.status for e in journal.entries("daytona.sandbox.delete")]
        if attempts == 2:
            assert text == "ok\n"
            assert deletes == [200]  # released after the call
        else:
            assert text == INFRA_FAULT_OBSERVATION.format(reason="timeout")
            assert deletes[-1] == 200 and set(deletes[:-1]) == {409} and len(deletes) >= 2
        assert tool.undeleted == []
        assert leaked(server) == []


@pytest.mark.parametrize(
    "ending", ["import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "import os; os._exit(3)"]
)
def test_a_program_that_ends_its_interpreter_gets_its_outcome_once(
    sandbox_emulator: EmulatorServer, ending: str
) -> None:
    """The daemon closes the socket with 1001 ``worker process ended`` (the SDK's DaytonaConnectionError): the
    program's doing, shown once with what it printed, not retried as a lost connection."""
    tool = make_tool(sandbox_emulator, sandbox_scope="trajectory")

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        agent_data: Any = AgentData("ends-its-worker")
        out = []
        for code in ("x = 1", f"print('hi', flush=True)\n{ending}", "print('x' in globals())"):
            instance_id, _ = await tool.create()
            response, _, metrics = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
            await tool.release(instance_id)
            out.append((response.text, metrics))
        await tool.aclose()
        return out

    _, (text, metrics), (after, _) = asyncio.run(main())
    assert text == "hi\n" + WORKER_ENDED_OBSERVATION
    assert metrics["status"] == "runtime_error" and metrics["attempts"] == 1 and metrics["worker_ended"]
    assert metrics["infra_fault"] is None and metrics["stdout_chars"] == 3
    assert after == "False\n"  # a fresh interpreter process: the state is gone, as the observation said
    assert len(sandbox_emulator.emulator.journal.entries("daytona.interpreter.execute")) == 3
    assert leaked(sandbox_emulator) == []


@pytest.mark.parametrize(
    ("message", "program_outcome"),
    [
        ("Failed to run code: worker process ended (close code 1001)", True),
        ("Failed to run code: context shutdown (close code 1001)", False),  # the context was deleted: not the program
        ("Failed to run code: WebSocket connection closed unexpectedly (close code 1001)", False),
        ("Failed to run code: WebSocket connection closed unexpectedly (close code 1006)", False),
    ],
)
def test_only_the_workers_own_close_is_the_programs_outcome(message: str, program_outcome: bool) -> None:
    from daytona.common.errors import DaytonaConnectionError

    from harness.tools import daytona as module

    tool = make_tool_offline()

    async def make() -> None:
        raise DaytonaConnectionError(message)

    async def main() -> None:
        tool._bind_loop()
        try:
            expected = module._WorkerEnded if program_outcome else module._Infra
            with pytest.raises(expected):
                await tool._limited(make, program=True)
        finally:
            await tool.aclose()

    asyncio.run(main())


def make_tool_offline(**config: Any) -> DaytonaTool:
    """A tool whose API nothing answers (for what never reaches it)."""
    base = {"type": "native", "api_url": "http://127.0.0.1:9/api", "api_key": "k", "retry": FAST_RETRY}
    return DaytonaTool({**base, "rate_limiter": {"backend": "local"}, **config})


@pytest.mark.parametrize("state", ["error", "build_failed"])
def test_a_sandbox_that_ends_in_error_is_replaced_not_adopted(sandbox_emulator: EmulatorServer, state: str) -> None:
    """The create's sandbox ends in ``error``: the SDK raises (no status), the next attempt finds that sandbox by its
    label and must not adopt it (it never starts); it is deleted and a fresh one made."""
    sandbox_emulator.emulator.daytona.store.fail_next_creates(1, state, "runner out of disk")
    tool = make_tool(sandbox_emulator)
    [(text, metrics)] = run_calls(tool, [{"code": "print('ok')"}])
    assert (text, metrics["status"]) == ("ok\n", "success")
    journal = sandbox_emulator.emulator.journal
    assert [e.status for e in journal.entries("daytona.sandbox.create")] == [200, 200]
    assert len(journal.entries("daytona.sandbox.get")) <= 1  # no waiting on the errored one, attempt after attempt
    assert [e.status for e in journal.entries("daytona.sandbox.delete")] == [200, 200]  # the errored one, then ours
    assert tool.undeleted == [] and leaked(sandbox_emulator) == []


def test_sandboxes_that_keep_ending_in_error_give_the_sdks_reason(sandbox_emulator: EmulatorServer) -> None:
    sandbox_emulator.emulator.daytona.store.fail_next_creates(FAST_RETRY["max_attempts"], "error", "runner out of disk")
    tool = make_tool(sandbox_emulator)
    [(text, metrics)] = run_calls(tool, [{"code": "print('ok')"}])
    assert metrics["status"] == "infra_fault"
    assert "entered error state" in metrics["infra_fault"] and "runner out of disk" in metrics["infra_fault"]
    assert text == INFRA_FAULT_OBSERVATION.format(reason=metrics["infra_fault"])
    creates = sandbox_emulator.emulator.journal.entries("daytona.sandbox.create")
    assert len(creates) == FAST_RETRY["max_attempts"]
    assert tool.undeleted == [] and leaked(sandbox_emulator) == []


@pytest.mark.faults(
    {"rules": [{"id": "storm", "route": "daytona.sandbox.create", "requests": "1-4", "fault": {"status": 503}}]}
)
def test_a_trajectory_whose_create_failed_tries_again_next_turn(sandbox_emulator: EmulatorServer) -> None:
    """The first turn spends the budget on 503s; the storm is over by the second turn, which must create the sandbox
    rather than repeat the first turn's cached failure."""
    tool = make_tool(sandbox_emulator, sandbox_scope="trajectory")

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        agent_data: Any = AgentData("storm")
        out = []
        for code in ("print('turn1')", "x = 2", "print(x)"):
            instance_id, _ = await tool.create()
            response, _, metrics = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
            await tool.release(instance_id)
            out.append((response.text, metrics))
        await tool.aclose()
        return out

    (first, first_metrics), (_, second_metrics), (third, _) = asyncio.run(main())
    assert first == INFRA_FAULT_OBSERVATION.format(reason="HTTP 503")
    assert first_metrics["attempts"] == FAST_RETRY["max_attempts"]  # the create's attempts, not 0
    assert second_metrics["status"] == "success" and third == "2\n"
    creates = sandbox_emulator.emulator.journal.entries("daytona.sandbox.create")
    assert [e.status for e in creates] == [503] * 4 + [200]
    assert leaked(sandbox_emulator) == []


def test_a_trajectorys_stopped_or_deleted_sandbox_is_started_or_replaced(sandbox_emulator: EmulatorServer) -> None:
    """Auto-stop or auto-delete reached the trajectory's sandbox between turns: the turn's first attempt fails, the
    tool looks at the sandbox, starts it or makes a new one, and the model is told its variables are gone."""
    store = sandbox_emulator.emulator.daytona.store
    tool = make_tool(sandbox_emulator, sandbox_scope="trajectory")

    async def main() -> list[tuple[str | None, dict[str, Any]]]:
        agent_data: Any = AgentData("outlived")
        out = []
        for turn, code in enumerate(("x = 1", "print('x' in globals())", "print('after')")):
            if turn == 1:
                store.stop(out[0][1]["sandbox_id"])
            if turn == 2:
                store.delete(out[0][1]["sandbox_id"])
            instance_id, _ = await tool.create()
            response, _, metrics = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
            await tool.release(instance_id)
            out.append((response.text, metrics))
        del agent_data
        await tool.aclose()
        return out

    (_, first), (restarted, second), (replaced, third) = asyncio.run(main())
    assert restarted == REVIVED_NOTES["restarted"] + "False\n"
    assert second["sandbox_revived"] == "restarted" and second["attempts"] == 2
    assert second["sandbox_id"] == first["sandbox_id"]
    assert replaced == REVIVED_NOTES["replaced"] + "after\n"
    assert third["sandbox_revived"] == "replaced" and third["sandbox_id"] != first["sandbox_id"]
    creates = sandbox_emulator.emulator.journal.entries("daytona.sandbox.create")
    assert len(creates) == 2
    # The journal's leak report cannot see the test's own deletion: ask the store what is alive.
    assert tool.undeleted == [] and store.list() == []


def test_a_sandbox_already_gone_at_its_delete_is_not_undeleted(sandbox_emulator: EmulatorServer) -> None:
    """The SDK reads a 404 at delete as destroyed: nothing leaked, so nothing for ``undeleted``."""
    tool = make_tool(sandbox_emulator)

    async def main() -> None:
        instance_id, _ = await tool.create()
        response, _, metrics = await tool.execute(instance_id, {"code": "print(1)"})
        assert response.text == "1\n"
        sandbox_emulator.emulator.daytona.store.delete(metrics["sandbox_id"])  # auto-delete got there first
        await tool.release(instance_id)
        await tool.aclose()

    asyncio.run(main())
    assert [e.status for e in sandbox_emulator.emulator.journal.entries("daytona.sandbox.delete")] == [404]
    assert tool.undeleted == [] and sandbox_emulator.emulator.daytona.store.list() == []


@pytest.mark.faults(
    {
        "rules": [
            {"id": "hung", "route": "daytona.interpreter.execute", "attempts": "1", "fault": {"hang": {"seconds": 10}}}
        ]
    }
)
def test_a_run_with_no_answer_is_cut_off_as_a_service_fault(
    sandbox_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interpreter never answers the first attempt: past twice the timeout plus the slack the tool gives up on it
    as an infrastructure fault (retried), not a program timeout found out after the service's 10 s."""
    from harness.tools import daytona as module

    monkeypatch.setattr(module, "RUN_SLACK_S", 0.5)  # the bound for timeout 1: 2.5 s
    for attempts, expected in ((1, "infra_fault"), (2, "success")):
        sandbox_emulator.emulator.reset()
        tool = make_tool(sandbox_emulator, retry={**FAST_RETRY, "max_attempts": attempts})

        async def main(tool: DaytonaTool = tool) -> tuple[str | None, dict[str, Any], float]:
            loop = asyncio.get_running_loop()
            instance_id, _ = await tool.create()
            started = loop.time()
            response, _, metrics = await tool.execute(instance_id, {"code": "print('quick')", "timeout": 1})
            took = loop.time() - started
            await tool.release(instance_id)
            await tool.aclose()
            return response.text, metrics, took

        text, metrics, took = asyncio.run(main())
        assert metrics["status"] == expected and metrics["attempts"] == attempts
        assert 2.5 <= took < 8
        if expected == "infra_fault":
            assert text == INFRA_FAULT_OBSERVATION.format(reason="no answer from the interpreter within 2.5 s")
        else:
            assert text == "quick\n"


def test_a_timeout_inside_the_sdk_is_not_reported_as_the_run_deadline(
    sandbox_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TimeoutError the SDK's own client raises at once is a service fault in its own words, not "no answer
    within N s" (the deadline it did not reach)."""
    from daytona._async.code_interpreter import AsyncCodeInterpreter

    async def times_out(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise asyncio.TimeoutError("read timed out")

    monkeypatch.setattr(AsyncCodeInterpreter, "run_code", times_out)
    tool = make_tool(sandbox_emulator, retry={**FAST_RETRY, "max_attempts": 1})

    async def main() -> tuple[str | None, dict[str, Any]]:
        instance_id, _ = await tool.create()
        response, _, metrics = await tool.execute(instance_id, {"code": "print(1)", "timeout": 1})
        await tool.release(instance_id)
        await tool.aclose()
        return response.text, metrics

    text, metrics = asyncio.run(main())
    assert metrics["status"] == "infra_fault"
    reason = "the client timed out talking to the interpreter: read timed out"
    assert text == INFRA_FAULT_OBSERVATION.format(reason=reason)
