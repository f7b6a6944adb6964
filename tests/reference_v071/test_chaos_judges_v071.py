"""The judges against verl 0.7.1's own ``SandboxFusionTool`` under the ``vefaas-gateway`` profile.

A normal passing test that asserts the judges DO flag 0.7.1's known defects: a gateway 429 (or a 504 after its two
linear retries) reaches the model as ``"no stdout here"``, and the reward of a call that printed its answer is lost.
The project's tool passes the same judges in the main environment (``tests/chaos/test_audit.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from emulator.server import EmulatorServer
from harness.chaos.audit import AuditedCall, audit_calls, audit_rewards, entries_since, journal_mark

CALLS = 60


@pytest.mark.faults("vefaas-gateway", seed=11)
def test_judges_flag_v071_defects(make_tools: Any, sandbox_emulator: EmulatorServer) -> None:
    journal = sandbox_emulator.emulator.journal
    (tool,) = make_tools({"rate_limit": 10})

    async def main() -> list[AuditedCall]:
        calls = []
        for i in range(CALLS):
            instance, _ = await tool.create()
            mark = journal_mark(journal)
            response, _, _ = await tool.execute(instance, {"code": f"print({i} * 3)"})
            await tool.release(instance)
            calls.append(AuditedCall(response.text, None, entries_since(journal, mark), f"call-{i}"))
        return calls

    calls = asyncio.run(main())
    unrecovered = [c for c in calls if c.entries and c.entries[-1].fault is not None]
    assert unrecovered, "the seed must make at least one gateway fault reach 0.7.1's tool unrecovered"
    report = audit_calls(calls, journal, infra_texts=["Sandbox unavailable: {reason}"])
    flagged = report.by_rule("fault-as-output")
    assert len(flagged) == len(unrecovered), report.render()
    assert all("no stdout here" in f.message for f in flagged)
    # The program printed its answer; a call that does not show it loses that trajectory's reward.
    scores = {c.trajectory: (float(c.observation == f"{i * 3}\n"), 1.0) for i, c in enumerate(calls)}
    rewards = audit_rewards(scores)
    assert {f.identity for f in rewards.by_rule("reward")} == {c.trajectory for c in unrecovered}
    assert rewards.reward_lost == len(unrecovered)
