"""Hypothesis search over the Sandbox Fusion tool against the in-process emulator: generated fault schedules
(statuses, resets, truncation, malformed and SandboxError bodies, null stdout, latency) and calls. No
infrastructure fault may reach the model as program output; the real output is shown whenever the retry budget
covers the first clean attempt; attempts stay within the budget. Violations are saved as regressions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from verl.tools.schemas import ToolResponse

from emulator.server import EmulatorServer
from harness.chaos.regressions import REGRESSIONS_DIR, Regression
from harness.chaos.search import ToolScenario, register_scenario, replay, search_machine, tool_ops, tool_setup
from harness.tools.observations import NO_STDOUT
from harness.tools.sandbox_fusion import SandboxFusionTool


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer() as running:
        yield running


def test_sandbox_fusion_tool_search(server: EmulatorServer) -> None:
    machine = search_machine(
        "tool-sandbox-fusion", lambda: ToolScenario(server), tool_setup(), tool_ops(), regression_dir=REGRESSIONS_DIR
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=200, stateful_step_count=6, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )


class _ShowsFaultsAsNoStdout(SandboxFusionTool):
    """A deliberately broken tool with verl 0.7.1's habit: a spent retry budget reads as "no stdout here"."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        response, reward, metrics = await super().execute(instance_id, parameters, **kwargs)
        if metrics.get("status") == "infra_fault":
            response = ToolResponse(text=NO_STDOUT)
        return response, reward, metrics


register_scenario("tool-sandbox-fusion", "toy-no-stdout", lambda: ToolScenario(tool_class=_ShowsFaultsAsNoStdout))


def test_search_catches_a_tool_that_shows_faults_as_program_output(server: EmulatorServer, tmp_path: Path) -> None:
    machine = search_machine(
        "tool-sandbox-fusion",
        lambda: ToolScenario(server, tool_class=_ShowsFaultsAsNoStdout),
        tool_setup(),
        tool_ops(),
        found_with="toy-no-stdout",
        regression_dir=tmp_path,
    )
    with pytest.raises(AssertionError, match="fault-as-output"):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=150,
                stateful_step_count=6,
                derandomize=True,
                phases=[Phase.generate],
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    saved = Regression.from_file(tmp_path / "tool-sandbox-fusion-toy-no-stdout-fault-as-output.json")
    # Not shrunk here (each example is real HTTP; the limiter test shows the shrinking): the saved schedule ends
    # with the call that showed the fault, and replays to the same violation.
    assert saved.ops[0]["op"] == "setup" and saved.ops[-1]["op"] == "call"
    violation = replay(saved, "toy-no-stdout")
    assert violation is not None and violation.invariant == "fault-as-output"
    assert replay(saved, "real") is None
