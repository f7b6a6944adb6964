"""The client-compliance oracle: each rule catches a tiny deliberately bad client and passes its well-behaved twin.

The clients talk HTTP to an emulator; only the journal (and the engine's decision log) is judged. The retrying
clients run on virtual time with the emulator in their loop (``run_many``): the delays the oracle reads are exactly
the clients' own, so a burst and a retry wave are judged at the oracle's 50 ms and 10 ms windows without the machine's
scheduling ever splitting or merging them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from emulator.server import EmulatorServer
from harness.chaos.compliance import ComplianceRules, chains, check_compliance
from harness.chaos.inloop import in_loop_emulator
from harness.chaos.judges import ChaosJudge, journal_entries
from harness.chaos.vtime import run_virtual

RUN_CODE = "sandbox_fusion.run_code"
EXECUTE = "daytona.interpreter.execute"
RETRY_AFTER_PLAN = {
    "rules": [
        {
            "id": "gw-429",
            "route": RUN_CODE,
            "attempts": "1",
            "fault": {"status": 429, "headers": {"Retry-After": "0.2"}},
        }
    ]
}
BURST_PLAN = {"rules": [{"id": "gw-503", "route": RUN_CODE, "attempts": "1", "fault": 503}]}
STORM_PLAN = {"rules": [{"id": "storm", "route": RUN_CODE, "attempts": "1-9", "fault": 503}]}

Delay = Callable[[int, float | None], float]


async def run_client(url: str, key: str, delay: Delay, max_tries: int = 20) -> int:
    """POST one program until it succeeds; ``delay(attempt, retry_after)`` says how long to wait after a failure."""
    async with aiohttp.ClientSession() as session:
        for attempt in range(1, max_tries + 1):
            body = {"code": f"print({key!r})", "language": "python"}
            async with session.post(url, json=body, headers={"X-Emulator-Key": key}) as response:
                await response.read()
                if response.status == 200:
                    return attempt
                header = response.headers.get("Retry-After")
            await asyncio.sleep(delay(attempt, float(header) if header else None))
    return max_tries


def run_many(plan: dict[str, Any], keys: list[str], delay: Delay, max_tries: int = 20) -> tuple[list[int], ChaosJudge]:
    """One client per key, all at once, against a fresh emulator under ``plan`` served in a virtual-time loop: the
    tries each client made, and a judge of the journal."""

    async def main() -> tuple[list[int], ChaosJudge]:
        async with in_loop_emulator(plan) as emu:
            tries = await asyncio.gather(*(run_client(emu.run_code_url, k, delay, max_tries) for k in keys))
            return list(tries), ChaosJudge.of(emu.emulator)

    return run_virtual(main())


def judge(server: EmulatorServer, **rules: Any) -> Any:
    return ChaosJudge.of(server.emulator).compliance(**rules)


def test_ignoring_retry_after_is_caught() -> None:
    _, judged = run_many(RETRY_AFTER_PLAN, ["a", "b"], lambda attempt, ra: 0.0)
    report = judged.compliance()
    findings = report.by_rule("retry-after")
    assert len(findings) == 2, report.render()
    assert all(f.figures["required"] == pytest.approx(0.2) and f.figures["waited"] < 0.2 for f in findings)
    assert findings[0].attempt == 2 and "Retry-After" in findings[0].message
    with pytest.raises(AssertionError, match=r"\[retry-after\].*asked for 0.2s"):
        report.assert_compliant()


def test_waiting_retry_after_passes() -> None:
    _, judged = run_many(RETRY_AFTER_PLAN, ["a", "b"], lambda attempt, ra: ra or 0.0)
    report = judged.compliance(skip=("jitter",))
    report.assert_compliant()
    assert report.checked["retry-after"] == 2
    assert all(waited >= required for _, _, required, waited in report.waits)


def test_fixed_delay_retry_wave_is_caught() -> None:
    _, judged = run_many(BURST_PLAN, [f"k{i}" for i in range(8)], lambda attempt, ra: 0.1)
    report = judged.compliance()
    (finding,) = report.by_rule("jitter")
    assert finding.figures["wave"] == finding.figures["retries"] == 8, report.render()


def test_retry_after_floor_without_jitter_above_it_is_caught() -> None:
    """Jitter below a Retry-After floor collapses onto the floor: every retry lands at the same delay."""
    rng = random.Random(3)
    _, judged = run_many(BURST_PLAN, [f"k{i}" for i in range(8)], lambda a, ra: max(rng.uniform(0, 0.05), 0.15))
    (finding,) = judged.compliance().by_rule("jitter")
    assert finding.figures["wave"] == 8


def test_full_jitter_passes() -> None:
    rng = random.Random(7)
    _, judged = run_many(BURST_PLAN, [f"k{i}" for i in range(8)], lambda attempt, ra: rng.uniform(0.0, 0.4))
    report = judged.compliance()
    assert report.checked.get("jitter") == 1, report.render()  # the burst was seen and judged
    report.assert_compliant()


def test_unlimited_retries_are_caught() -> None:
    (tries,), judged = run_many(STORM_PLAN, ["x"], lambda attempt, ra: 0.001)
    assert tries == 10
    report = judged.compliance(max_attempts=4)
    (finding,) = report.by_rule("retry-budget")
    assert finding.figures == {"tries": 10, "budget": 4} and finding.attempt == 5
    assert judged.compliance(max_attempts=10).ok


def test_retry_ratio_budget() -> None:
    _, judged = run_many(STORM_PLAN, ["x", "y"], lambda attempt, ra: 0.001)
    report = judged.compliance(max_attempts=None, max_retry_ratio=2.0)
    (finding,) = report.by_rule("retry-budget")
    assert finding.figures == {"retries": 18, "calls": 2}


LOST_CREATE = {
    "rules": [{"id": "lost-create", "route": "daytona.sandbox.create", "attempts": "1", "fault": "truncate"}]
}


def _daytona(server: EmulatorServer) -> tuple[str, dict[str, str]]:
    return server.url + "/api", {"Authorization": f"Bearer {server.emulator.config.daytona.api_key}"}


async def _create(session: aiohttp.ClientSession, api: str, headers: dict[str, str], owner: str) -> str | None:
    try:
        async with session.post(f"{api}/sandbox", json={"labels": {"instance_id": owner}}, headers=headers) as r:
            return str((await r.json())["id"])
    except (aiohttp.ClientError, ValueError):
        return None


async def _owned(session: aiohttp.ClientSession, api: str, headers: dict[str, str], owner: str) -> list[str]:
    async with session.get(f"{api}/sandbox", headers=headers) as r:
        items = await r.json()
    items = items.get("items", items) if isinstance(items, dict) else items
    return [str(s["id"]) for s in items if (s.get("labels") or {}).get("instance_id") == owner]


async def _delete_all(session: aiohttp.ClientSession, api: str, headers: dict[str, str], ids: list[str]) -> None:
    for sid in ids:
        async with session.delete(f"{api}/sandbox/{sid}", headers=headers) as r:
            await r.read()


@pytest.mark.faults(LOST_CREATE)
def test_blind_recreate_is_caught(sandbox_emulator: EmulatorServer) -> None:
    api, headers = _daytona(sandbox_emulator)

    async def blind() -> None:
        async with aiohttp.ClientSession() as session:
            first = await _create(session, api, headers, "traj-1")
            assert first is None  # the answer was truncated
            second = await _create(session, api, headers, "traj-1")
            assert second is not None
            await _delete_all(session, api, headers, [second])

    asyncio.run(blind())
    report = judge(sandbox_emulator)
    (finding,) = report.by_rule("blind-recreate")
    assert finding.identity == "instance_id=traj-1"
    assert ChaosJudge.of(sandbox_emulator.emulator).invariants().by_rule("leaks")  # and the first one leaked


@pytest.mark.faults(LOST_CREATE)
def test_looking_before_recreating_passes(sandbox_emulator: EmulatorServer) -> None:
    api, headers = _daytona(sandbox_emulator)

    async def careful() -> None:
        async with aiohttp.ClientSession() as session:
            if await _create(session, api, headers, "traj-1") is None:
                owned = await _owned(session, api, headers, "traj-1")
                assert len(owned) == 1
                await _delete_all(session, api, headers, owned)

    asyncio.run(careful())
    report = judge(sandbox_emulator)
    assert report.checked["blind-recreate"] == 1
    report.assert_compliant()
    ChaosJudge.of(sandbox_emulator.emulator).assert_invariants()


def test_rules_reject_bad_settings() -> None:
    with pytest.raises(ValueError, match="unknown compliance rule"):
        ComplianceRules(skip=("jiter",))
    with pytest.raises(ValueError, match="max_wave_fraction"):
        ComplianceRules(max_wave_fraction=0)


def test_judges_read_journal_dicts() -> None:
    """The journal over HTTP is a list of dicts: the oracle reads it the same way."""
    told = {"seq": 1, "route": RUN_CODE, "method": "POST", "path": "/run_code", "key": "k", "attempt": 1}
    told |= {"started": 0.0, "finished": 0.1, "status": 429, "detail": {"retry_after": {"Retry-After": 1.0}}}
    retry = {"seq": 2, "route": RUN_CODE, "method": "POST", "path": "/run_code", "key": "k", "attempt": 2}
    retry |= {"started": 0.5, "finished": 0.6, "status": 200}
    report = check_compliance([told, retry])
    (finding,) = report.by_rule("retry-after")
    assert finding.figures["waited"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="lacks"):
        check_compliance([{"route": RUN_CODE}])


def _run(seq: int, status: int | None, digest: str | None, fault: str | None = None) -> dict[str, Any]:
    """An interpreter run in one sandbox as the journal has it: every run there shares the WebSocket's key."""
    entry: dict[str, Any] = {"seq": seq, "route": EXECUTE, "method": "GET", "path": "/toolbox/s/execute", "key": "ws"}
    entry |= {"attempt": seq, "started": float(seq), "finished": seq + 0.1, "status": status, "fault": fault}
    outcome = "ok" if status == 101 else "fault" if status else "reset"
    entry |= {"outcome": outcome, "detail": {"code_digest": digest} if digest else {}}
    return entry


def test_interpreter_runs_of_different_programs_are_not_one_retry_chain() -> None:
    """Five programs, one turn each, in one sandbox: five calls, not a chain of five tries."""
    runs = [_run(n, 101, f"program-{n}") for n in range(1, 6)]
    assert [len(c) for c in chains(journal_entries(runs)).values()] == [1] * 5
    check_compliance(runs, ComplianceRules(max_attempts=1)).assert_compliant()


def test_a_retry_is_still_a_retry() -> None:
    """A refused handshake (no program read) then the run: one call of two tries. A try after a success starts a new
    call, and so does a try of another program after a failure."""
    runs = [_run(1, 502, None, "status"), _run(2, 101, "a"), _run(3, 101, "a"), _run(4, None, "b"), _run(5, 101, "b")]
    runs += [_run(6, None, "c"), _run(7, 101, "d")]
    found = chains(journal_entries(runs))
    assert [[e.seq for e in c] for c in found.values()] == [[1, 2], [3], [4, 5], [6], [7]]
    assert list(found)[1].endswith(" call 2")
    report = check_compliance(runs, ComplianceRules(max_attempts=1))
    assert [f.rule for f in report.findings] == ["retry-budget", "retry-budget"]


def test_the_daytona_sdk_running_five_programs_is_compliant(
    daytona_config: Any, sandbox_emulator: EmulatorServer
) -> None:
    """The reviewer's case: no fault, no retry; the judge saw a retry chain of five."""

    async def five_programs() -> None:
        from daytona import AsyncDaytona

        async with AsyncDaytona(daytona_config) as daytona:
            box = await daytona.create()
            for n in range(5):
                assert (await box.code_interpreter.run_code(f"print({n})")).stdout == f"{n}\n"
            await box.delete()

    asyncio.run(five_programs())
    ChaosJudge.of(sandbox_emulator.emulator).compliance(max_attempts=1, skip=("jitter",)).assert_compliant()
