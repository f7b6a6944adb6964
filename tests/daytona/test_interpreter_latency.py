"""An injected latency on the interpreter WebSocket: the sandbox gets the code during the wait, runs it at the end.

The handshake is answered and the request read while the latency runs (from the upgrade request's arrival); the
code starts when it ends, so what a client sees above the latency is the run and the answer. An answer without a
run (an unknown context, a bad key) still comes only after the latency, and a client that leaves during the wait
never has its code run (its context lives on).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from daytona import AsyncDaytona, DaytonaConfig

from emulator.app import Emulator
from emulator.faults import ManualClock
from emulator.server import EmulatorServer

LATENCY = 1.0


def _plan(latency: float = LATENCY) -> dict[str, Any]:
    return {"rules": [{"route": "daytona.interpreter.execute", "latency": {"fixed": latency}}]}


def _ws_url(server: EmulatorServer, sandbox_id: str) -> str:
    return server.url.replace("http", "ws", 1) + f"/toolbox/{sandbox_id}/process/interpreter/execute"


async def _frames(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    frames = []
    async for message in ws:
        if message.type == aiohttp.WSMsgType.TEXT:
            frames.append(json.loads(message.data))
    return frames


def test_the_handshake_is_answered_during_the_wait_and_the_code_starts_at_its_end(
    server: EmulatorServer, api_url: str, api_key: str
) -> None:
    server.emulator.set_faults(_plan())

    async def scenario() -> tuple[float, float, float, list[dict[str, Any]]]:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            async with aiohttp.ClientSession() as session:
                asked = time.monotonic()
                headers = {"Authorization": f"Bearer {api_key}"}
                async with session.ws_connect(_ws_url(server, sandbox.id), headers=headers) as ws:
                    opened = time.monotonic()
                    await ws.send_str(json.dumps({"code": "import time\nprint(time.monotonic())"}))
                    frames = await _frames(ws)
                    answered = time.monotonic()
            await sandbox.delete()
        return asked, opened, answered, frames

    asked, opened, answered, frames = asyncio.run(scenario())
    assert opened - asked < LATENCY / 2  # not held for the latency
    stdout = "".join(f["text"] for f in frames if f["type"] == "stdout")
    started = float(stdout)
    assert started >= asked + LATENCY  # the code waited for the whole latency, counted from no earlier than the ask
    assert answered >= started
    assert frames[-1] == {"type": "control", "text": "completed", "name": "", "value": "", "traceback": ""}
    [entry] = server.emulator.journal.entries("daytona.interpreter.execute")
    assert entry.outcome == "ok" and entry.injected_latency == LATENCY
    # The upgrade request's arrival, on the client's clock: the latency runs from it, and the answer ends after both.
    assert entry.arrived is not None and entry.finished is not None
    assert asked <= entry.arrived <= opened and entry.arrived <= entry.started
    assert entry.arrived + LATENCY <= started <= entry.finished  # the code waited from the arrival on
    # (The journal ends the entry once the handler has returned, after the close went out: the client may read the
    # close before that, so ``answered`` is not compared with ``entry.finished``.)


def test_answers_without_a_run_still_come_after_the_latency(server: EmulatorServer, api_url: str, api_key: str) -> None:
    server.emulator.set_faults(_plan())

    async def scenario() -> tuple[float, list[dict[str, Any]], int | None, float, int]:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            url = _ws_url(server, sandbox.id)
            async with aiohttp.ClientSession() as session:
                asked = time.monotonic()
                headers = {"Authorization": f"Bearer {api_key}"}
                async with session.ws_connect(url, headers=headers) as ws:
                    await ws.send_str(json.dumps({"code": "print(1)", "contextId": "no-such-context"}))
                    frames = await _frames(ws)
                    refused = ws.close_code
                unknown_context = time.monotonic() - asked
                asked = time.monotonic()
                with pytest.raises(aiohttp.WSServerHandshakeError) as denied:
                    await session.ws_connect(url, headers={"Authorization": "Bearer wrong"})
                bad_key = time.monotonic() - asked
            await sandbox.delete()
        return unknown_context, frames, refused, bad_key, denied.value.status

    unknown_context, frames, refused, bad_key, status = asyncio.run(scenario())
    assert frames == [] and refused == 1008  # the daemon's "context not found", a policy violation
    assert unknown_context >= LATENCY
    assert status == 401 and bad_key >= LATENCY


def test_code_whose_client_leaves_during_the_wait_never_runs_and_its_context_lives_on(
    server: EmulatorServer, api_url: str, api_key: str
) -> None:
    server.emulator.set_faults(_plan(0.5))

    async def scenario() -> str:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            await sandbox.code_interpreter.run_code("x = 41")
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {api_key}"}
                async with session.ws_connect(_ws_url(server, sandbox.id), headers=headers) as ws:
                    await ws.send_str(json.dumps({"code": "ran = True\nx += 1"}))
                    await ws.close()  # gone long before the latency's end
            # In the same context, after the abandoned code's start time (this call has its own latency).
            result = await sandbox.code_interpreter.run_code("print(x, globals().get('ran'))")
            await sandbox.delete()
        return result.stdout

    assert asyncio.run(scenario()) == "41 None\n"
    outcomes = [e.outcome for e in server.emulator.journal.entries("daytona.interpreter.execute")]
    assert outcomes == ["ok", "cancelled", "ok"]


def test_the_run_timeout_counts_from_the_code_start_not_from_the_request(
    server: EmulatorServer, api_url: str, api_key: str
) -> None:
    server.emulator.set_faults(_plan())

    async def scenario() -> str:
        async with AsyncDaytona(DaytonaConfig(api_url=api_url, api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            # The latency alone is as long as the timeout: counted from the request, this run would time out.
            result = await sandbox.code_interpreter.run_code("import time\ntime.sleep(0.3)\nprint('done')", timeout=1)
            await sandbox.delete()
        return result.stdout

    assert asyncio.run(scenario()) == "done\n"


def test_on_a_virtual_clock_code_whose_client_leaves_during_the_wait_never_runs(api_key: str) -> None:
    clock = ManualClock()
    with EmulatorServer(Emulator(clock=clock)) as server:

        async def scenario() -> str:
            config = DaytonaConfig(api_url=server.url + "/api", api_key=api_key)
            async with AsyncDaytona(config) as daytona:
                sandbox = await daytona.create()
                await sandbox.code_interpreter.run_code("x = 41")
                server.emulator.set_faults(_plan(5.0))  # virtual seconds: nothing moves them but the test
                async with aiohttp.ClientSession() as session:
                    headers = {"Authorization": f"Bearer {api_key}"}
                    async with session.ws_connect(_ws_url(server, sandbox.id), headers=headers) as ws:
                        await ws.send_str(json.dumps({"code": "ran = True"}))
                        await ws.close()
                journal = server.emulator.journal
                left = await asyncio.to_thread(
                    journal.wait_for,
                    lambda j: j.counts("outcome", "daytona.interpreter.execute") == {"ok": 1, "cancelled": 1},
                    10.0,
                )
                assert left, journal.counts("outcome", "daytona.interpreter.execute")
                server.emulator.set_faults(None)
                clock.advance(10.0)  # past the wait: code that was still waiting would run now
                result = await sandbox.code_interpreter.run_code("print(x, globals().get('ran'))")
                await sandbox.delete()
            return result.stdout

        assert asyncio.run(scenario()) == "41 None\n"
