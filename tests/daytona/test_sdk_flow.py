"""The whole SDK flow against the emulator, async and sync, for one sandbox and for 128 at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid

import pytest
from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaConfig,
    DaytonaNotFoundError,
    ListSandboxesQuery,
    Sandbox,
    SandboxState,
)

from emulator.server import EmulatorServer


async def _flow_async(daytona: AsyncDaytona, sandbox: AsyncSandbox, index: int, group: str) -> None:
    result = await sandbox.process.code_run("print(1+1)")
    assert (result.exit_code, result.result) == (0, "2\n")
    result = await sandbox.process.exec(f"echo sb{index} $GROUP && exit 3")
    assert result.exit_code == 3
    assert result.result == f"sb{index} {group}\n"
    first = await sandbox.code_interpreter.run_code(f"x = {index}\nprint('set')")
    assert first.stdout == "set\n" and first.error is None
    second = await sandbox.code_interpreter.run_code("print(x * 2)")
    assert second.stdout == f"{index * 2}\n" and second.error is None
    payload = f"payload {index}".encode()
    await sandbox.fs.upload_file(payload, "data/in.txt")
    assert await sandbox.fs.download_file("data/in.txt") == payload
    seen = await sandbox.process.exec("cat data/in.txt")
    assert seen.result == payload.decode()


async def _scenario_async(api_url: str, api_key: str, count: int) -> None:
    group = uuid.uuid4().hex[:8]
    async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
        params = [
            CreateSandboxFromSnapshotParams(
                labels={"group": group, "creator": f"test-{i}"}, env_vars={"GROUP": group}, auto_stop_interval=15
            )
            for i in range(count)
        ]
        sandboxes = await asyncio.gather(*(daytona.create(p, timeout=60) for p in params))
        assert all(s.state == SandboxState.STARTED for s in sandboxes)
        await asyncio.gather(*(_flow_async(daytona, s, i, group) for i, s in enumerate(sandboxes)))

        listed = [s.id async for s in daytona.list(ListSandboxesQuery(labels={"group": group}, limit=50))]
        assert sorted(listed) == sorted(s.id for s in sandboxes)
        one = [s.id async for s in daytona.list(ListSandboxesQuery(labels={"group": group, "creator": "test-0"}))]
        assert one == [sandboxes[0].id]

        await asyncio.gather(*(s.stop() for s in sandboxes))
        assert all(s.state == SandboxState.STOPPED for s in sandboxes)
        await asyncio.gather(*(s.start() for s in sandboxes))
        assert all(s.state == SandboxState.STARTED for s in sandboxes)
        # Files survive a stop/start; interpreter state does not (the processes stopped).
        again = await asyncio.gather(*(s.fs.download_file("data/in.txt") for s in sandboxes))
        assert again == [f"payload {i}".encode() for i in range(count)]

        await asyncio.gather(*(s.delete() for s in sandboxes))
        with pytest.raises(DaytonaNotFoundError):
            await daytona.get(sandboxes[0].id)


def _flow_sync(daytona: Daytona, sandbox: Sandbox, index: int) -> None:
    result = sandbox.process.code_run("print(1+1)")
    assert (result.exit_code, result.result) == (0, "2\n")
    result = sandbox.process.exec("echo hi && exit 3")
    assert (result.exit_code, result.result) == (3, "hi\n")
    assert sandbox.code_interpreter.run_code(f"y = {index}").error is None
    assert sandbox.code_interpreter.run_code("print(y + 1)").stdout == f"{index + 1}\n"
    sandbox.fs.upload_file(b"sync bytes", "/tmp/s.txt")
    assert sandbox.fs.download_file("/tmp/s.txt") == b"sync bytes"
    sandbox.stop()
    assert sandbox.state == SandboxState.STOPPED
    sandbox.start()
    assert sandbox.state == SandboxState.STARTED
    sandbox.delete()


def _scenario_sync(api_url: str, api_key: str, count: int) -> None:
    group = uuid.uuid4().hex[:8]
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(count, 32)) as pool:
        params = CreateSandboxFromSnapshotParams(labels={"group": group})
        sandboxes = list(pool.map(lambda _: daytona.create(params, timeout=60), range(count)))
        listed = list(daytona.list(ListSandboxesQuery(labels={"group": group})))
        assert sorted(s.id for s in listed) == sorted(s.id for s in sandboxes)
        list(pool.map(lambda pair: _flow_sync(daytona, pair[1], pair[0]), enumerate(sandboxes)))
    assert list(daytona.list(ListSandboxesQuery(labels={"group": group}))) == []


def test_async_one_sandbox(api_url: str, api_key: str) -> None:
    asyncio.run(_scenario_async(api_url, api_key, 1))


def test_sync_one_sandbox(api_url: str, api_key: str) -> None:
    _scenario_sync(api_url, api_key, 1)


def test_async_128_sandboxes(api_url: str, api_key: str, server: EmulatorServer) -> None:
    asyncio.run(_scenario_async(api_url, api_key, 128))
    report = server.emulator.daytona_report()
    assert report.max_alive == 128
    assert report.leaked == []


def test_sync_128_sandboxes(api_url: str, api_key: str) -> None:
    _scenario_sync(api_url, api_key, 128)


def test_configured_by_environment(server: EmulatorServer, api_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_URL", server.url)  # without /api: both prefixes are served
    monkeypatch.setenv("DAYTONA_API_KEY", api_key)

    async def scenario() -> None:
        async with AsyncDaytona() as daytona:
            sandbox = await daytona.create()
            assert (await sandbox.process.code_run("print(6*7)")).result == "42\n"
            await sandbox.delete()

    asyncio.run(scenario())
    daytona = Daytona()
    sandbox = daytona.create()
    assert sandbox.process.exec("pwd").result.strip() == sandbox.get_user_home_dir()
    daytona.delete(sandbox)
