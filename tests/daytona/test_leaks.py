"""Leak checks: a sandbox a test forgot to delete is reported with the label that names its creator."""

from __future__ import annotations

import asyncio

import httpx
from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaConfig

from emulator.daytona import sandbox_report
from emulator.server import EmulatorServer


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
