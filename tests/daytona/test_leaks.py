"""Leak checks: a sandbox a test forgot to delete is reported with the label that names its creator."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import httpx
from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaConfig, DaytonaError

from emulator.daytona import code_digest, interpreter_runs, sandbox_report
from emulator.server import EmulatorServer

EXECUTE = "daytona.interpreter.execute"


def test_forgotten_sandbox_is_reported_by_creator_label(api_url: str, api_key: str, server: EmulatorServer) -> None:
    async def careless_rollouts() -> None:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            boxes = await asyncio.gather(
                *(
                    daytona.create(CreateSandboxFromSnapshotParams(labels={"instance_id": f"traj-{i}"}))
                    for i in range(4)
                )
            )
            for box in boxes:
                if box.labels["instance_id"] != "traj-2":  # trajectory 2 forgets its release()
                    await box.delete()

    asyncio.run(careless_rollouts())
    report = server.emulator.daytona_report()
    assert [s.creator("instance_id") for s in report.leaked] == ["traj-2"]
    assert report.leaked_by("instance_id") == {"traj-2": [report.leaked[0].id]}
    assert report.max_alive == 4
    assert "instance_id=traj-2" in report.describe("instance_id")

    # The same report from the journal served over HTTP (e.g. from another process).
    entries = httpx.get(server.url + "/_emulator/journal", params={"route": "daytona.sandbox"}).json()
    assert [s.id for s in sandbox_report(entries).leaked] == [s.id for s in report.leaked]
    create = next(e for e in entries if e["route"] == "daytona.sandbox.create")
    assert create["detail"]["labels"]["instance_id"].startswith("traj-")
    assert create["detail"]["sandbox_id"]


def test_no_leak_when_everything_is_deleted(api_url: str, api_key: str, server: EmulatorServer) -> None:
    async def tidy() -> None:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            box = await daytona.create()
            await box.delete()

    asyncio.run(tidy())
    assert server.emulator.daytona_report().leaked == []
    assert server.emulator.daytona_report().describe("instance_id") == "no leaked sandboxes"


def test_interpreter_runs_count_each_program_that_ran(api_url: str, api_key: str, server: EmulatorServer) -> None:
    """A refused handshake is not a run; a run cut by its time limit is; identical programs share one digest."""
    server.emulator.set_faults({"rules": [{"route": "daytona.interpreter.execute", "requests": "2", "fault": 503}]})
    ok, loop = "print(1)", "while True:\n    pass"

    async def runs() -> list[str]:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            box = await daytona.create()
            seen = []
            for code in (ok, ok, ok, loop):  # the second is refused with a 503
                try:
                    result = await box.code_interpreter.run_code(code, timeout=1)
                    seen.append(result.stdout)
                except DaytonaError as exc:
                    seen.append(type(exc).__name__)
            await box.delete()
            return seen

    seen = asyncio.run(runs())
    assert seen[0] == seen[2] == "1\n" and seen[1] != "1\n" and seen[3] == "DaytonaTimeoutError"
    entries = server.emulator.journal.entries("daytona.interpreter.execute")
    assert interpreter_runs(entries) == Counter({code_digest(ok): 2, code_digest(loop): 1})
    wire = httpx.get(server.url + "/_emulator/journal", params={"route": "daytona.interpreter"}).json()
    assert interpreter_runs(wire) == interpreter_runs(entries)


def test_a_run_whose_client_left_ends_quietly_when_its_sandbox_goes(
    api_url: str, api_key: str, server: EmulatorServer
) -> None:
    """The client gives up on a running program, then deletes the sandbox (as a pool does on Ctrl-C): the run ends
    with nobody to tell, journaled as cancelled, not as an error of the emulator's own."""
    journal = server.emulator.journal

    async def leave_early() -> None:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            box = await daytona.create()
            run = asyncio.ensure_future(box.code_interpreter.run_code("while True:\n    pass", timeout=30))
            assert await asyncio.to_thread(journal.wait_for, lambda j: j.in_flight(EXECUTE) == 1, 10)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            await box.delete()
            assert await asyncio.to_thread(journal.wait_for, lambda j: j.in_flight(EXECUTE) == 0, 10)

    asyncio.run(leave_early())
    (entry,) = journal.entries(EXECUTE)
    assert entry.outcome == "cancelled" and entry.status != 500
