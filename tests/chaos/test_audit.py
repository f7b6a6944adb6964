"""The reward-impact audit: a tool that shows a gateway fault as program output is flagged; the project's
``SandboxFusionTool`` under the same faults is not (it retries, and when the budget is spent says so)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from emulator.server import EmulatorServer
from harness.chaos.audit import AuditedCall, audit_calls, audit_rewards, entries_since, journal_mark
from harness.chaos.judges import ChaosJudge
from harness.tools.observations import INFRA_FAULT_OBSERVATION
from harness.tools.sandbox_fusion import SandboxFusionTool

RUN_CODE = "sandbox_fusion.run_code"
# A gateway in front of Sandbox Fusion: the first four requests get 504 (the first program, run alone, never gets
# through its four tries), then first tries of some programs get 429 (Retry-After 0.2 s) or 504.
GATEWAY = {
    "rules": [
        {"id": "gw-dead", "route": RUN_CODE, "requests": "1-4", "fault": 504},
        {"id": "gw-429", "route": RUN_CODE, "attempts": "1", "probability": 0.5, "fault": {"status": 429}},
        {"id": "gw-504", "route": RUN_CODE, "attempts": "1", "probability": 0.5, "fault": 504},
    ]
}
PROGRAMS = ["print('dead')"] + [f"print({i} * 7)" for i in range(6)]


def _ra_headers(plan: dict[str, Any]) -> dict[str, Any]:
    rules = [dict(r) for r in plan["rules"]]
    rules[1]["fault"] = {"status": 429, "headers": {"Retry-After": "0.2"}}
    return {"rules": rules}


async def naive_call(session: aiohttp.ClientSession, url: str, code: str) -> str:
    """verl 0.7.1's shape: one try, and anything but a finished run reads as "no stdout here"."""
    body = {"code": code, "language": "python"}
    async with session.post(url, json=body, headers={"X-Emulator-Key": code}) as response:
        if response.status != 200:
            return "no stdout here"
        return str((await response.json())["run_result"]["stdout"])


@pytest.mark.faults(GATEWAY, seed=5)
def test_fault_shown_as_program_output_is_flagged(sandbox_emulator: EmulatorServer) -> None:
    journal = sandbox_emulator.emulator.journal

    async def main() -> list[AuditedCall]:
        calls = []
        async with aiohttp.ClientSession() as session:
            for code in PROGRAMS:
                mark = journal_mark(journal)
                text = await naive_call(session, sandbox_emulator.run_code_url, code)
                calls.append(AuditedCall(text, None, entries_since(journal, mark), code))
        return calls

    calls = asyncio.run(main())
    report = audit_calls(calls, journal)
    flagged = report.by_rule("fault-as-output")
    faulted = [c for c in calls if c.entries[-1].fault is not None]
    assert faulted and len(flagged) == len(faulted), report.render()
    assert all("no stdout here" in f.message and "gw-" in f.message for f in flagged)
    assert report.faults_injected == len(faulted) and not report.by_rule("unlabelled")
    # without per-call entries the count-level check still sees it
    blind = audit_calls([AuditedCall(c.observation) for c in calls], journal)
    assert blind.by_rule("fault-as-output") and blind.unrecovered == len(faulted)


@pytest.mark.faults(_ra_headers(GATEWAY), seed=5)
def test_project_tool_passes_the_audit(sandbox_emulator: EmulatorServer) -> None:
    journal = sandbox_emulator.emulator.journal
    tool = SandboxFusionTool(
        {
            "sandbox_fusion_url": sandbox_emulator.run_code_url,
            "enable_global_rate_limit": False,
            "retry": {"base_delay": 0.05, "max_delay": 0.2},
        }
    )

    async def main() -> list[AuditedCall]:
        calls = []
        for code in PROGRAMS:
            instance, _ = await tool.create()
            mark = journal_mark(journal)
            response, _, metrics = await tool.execute(instance, {"code": code})
            calls.append(AuditedCall(response.text, metrics.get("infra_fault"), entries_since(journal, mark), code))
            await tool.release(instance)
        await tool.aclose()
        return calls

    calls = asyncio.run(main())
    report = audit_calls(calls, journal)
    report.assert_ok()
    assert report.checked["fault-as-output"] == len(PROGRAMS) and report.faults_injected >= 4
    dead = calls[0]
    assert dead.observation is not None and dead.observation.startswith(INFRA_FAULT_OBSERVATION.split("{")[0])
    assert [c.observation for c in calls[1:]] == [f"{i * 7}\n" for i in range(6)]
    judge = ChaosJudge.of(sandbox_emulator.emulator)
    compliance = judge.compliance(max_attempts=4)
    compliance.assert_compliant()
    assert compliance.checked.get("retry-after", 0) >= 1  # at least one 429 asked for 0.2 s and was honoured


def test_reward_changes_are_flagged_unless_declared() -> None:
    scores = {"t1": (1.0, 1.0), "t2": (0.0, 1.0), "t3": (0.0, None)}
    report = audit_rewards(scores)
    (finding,) = report.by_rule("reward")
    assert finding.identity == "t2" and report.reward_lost == 1.0
    assert report.checked["reward"] == 2
    audit_rewards(scores, expect_reward_loss=True).assert_ok()
    audit_rewards(scores, allow=["t2"]).assert_ok()


def test_hidden_fault_is_flagged() -> None:
    """The tool knew it was an infrastructure fault but showed something else."""
    report = audit_calls([AuditedCall("0\n", "HTTP 504")], infra_texts=[INFRA_FAULT_OBSERVATION])
    (finding,) = report.by_rule("fault-hidden")
    assert "HTTP 504" in finding.message


def _interpreter_run(seq: int, status: int | None, digest: str) -> dict[str, Any]:
    """An interpreter run in one sandbox, as the journal has it (every run there shares the WebSocket's key)."""
    entry: dict[str, Any] = {"seq": seq, "route": "daytona.interpreter.execute", "method": "GET", "key": "ws"}
    entry |= {"path": "/toolbox/s/process/interpreter/execute", "attempt": seq, "started": float(seq)}
    entry |= {"finished": seq + 0.1, "status": status, "outcome": "ok" if status else "reset"}
    return entry | {"detail": {"code_digest": digest}}


def test_a_later_program_is_not_the_recovery_of_an_earlier_one() -> None:
    """The first program's run was cut off and the tool hid it; the second program ran. The journal-level count must
    not take the second for a retry of the first."""
    journal = [_interpreter_run(1, None, "first"), _interpreter_run(2, 101, "second")]
    report = audit_calls([AuditedCall("no stdout here"), AuditedCall("1\n")], journal)
    assert report.unrecovered == 1 and report.by_rule("fault-as-output"), report.render()
    retried = [_interpreter_run(1, None, "first"), _interpreter_run(2, 101, "first")]
    assert audit_calls([AuditedCall("42\n")], retried).ok  # a real retry of the same program recovered


def test_a_session_command_is_audited_as_a_program() -> None:
    """A command run in a toolbox session is a program: a fault there that the tool hid is flagged."""
    entry: dict[str, Any] = {"seq": 1, "route": "daytona.toolbox.session.exec", "method": "POST", "key": "k"}
    entry |= {"path": "/toolbox/s/process/session/s1/exec", "attempt": 1, "started": 0.0, "finished": 0.1}
    entry |= {"status": 502, "outcome": "fault", "fault": "status", "detail": {"rule": "gw"}}
    report = audit_calls([AuditedCall("no stdout here")], [entry])
    assert report.unrecovered == 1 and report.by_rule("fault-as-output"), report.render()
