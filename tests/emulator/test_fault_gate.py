"""The fault gate as a client sees it in process: what it journals, the keys it gives, the heads it writes."""

from __future__ import annotations

import asyncio
from typing import cast

import aiohttp
import httpx
import requests

from emulator.app import Emulator
from emulator.daytona import DEFAULT_API_KEY
from emulator.faults import FaultEngine
from emulator.faults.replay import ReplayEngine
from emulator.server import EmulatorServer

INTERPRETER = "daytona.interpreter.execute"


def _get(emulator: Emulator, path: str) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=emulator.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            return await client.get(path)

    return asyncio.run(main())


def test_a_request_whose_decision_failed_is_journalled_as_an_error() -> None:
    """A strict replay's miss (or any failing decision) raised before the journal heard of the request."""
    emulator = Emulator()
    replay = ReplayEngine([], strict=True, clock=emulator.clock)
    emulator.engine = emulator.gate.engine = cast(FaultEngine, replay)
    answer = _get(emulator, "/v1/ping")
    assert answer.status_code == 500
    [entry] = emulator.journal.entries()
    assert (entry.route, entry.path, entry.status, entry.outcome, entry.attempt) == (
        "sandbox_fusion.ping",
        "/v1/ping",
        500,
        "error",
        1,
    )
    assert entry.finished is not None


WS_PLAN = {"seed": 7, "rules": [{"id": "coin", "route": INTERPRETER, "probability": 0.5, "fault": 504}]}


def _ws_decisions(explicit_key: str | None = None) -> list[tuple[str, int, str]]:
    """(key, attempt, kind) of six interpreter WebSockets on one sandbox of a fresh emulator, then one on a sandbox
    the client named."""
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    with EmulatorServer(Emulator(faults=WS_PLAN)) as server:
        api = requests.Session()
        api.headers.update(headers)
        sandboxes = [api.post(server.url + "/api/sandbox", json={}, timeout=30).json()["id"]]
        sandboxes.append(api.post(server.url + "/api/sandbox", json={"name": "mine"}, timeout=30).json()["id"])

        async def connect(sandbox_id: str) -> None:
            url = server.url.replace("http", "ws", 1) + f"/toolbox/{sandbox_id}/process/interpreter/execute"
            sent = headers if explicit_key is None else {**headers, "X-Emulator-Key": explicit_key}
            async with aiohttp.ClientSession() as session:
                try:
                    async with session.ws_connect(url, headers=sent) as ws:
                        await ws.close()
                except aiohttp.WSServerHandshakeError as refused:
                    assert refused.status == 504

        async def main() -> None:
            for sandbox_id in [sandboxes[0]] * 6 + [sandboxes[1]]:
                await connect(sandbox_id)

        asyncio.run(main())
        for sandbox_id in sandboxes:
            api.delete(f"{server.url}/api/sandbox/{sandbox_id}", timeout=30)
        records = server.emulator.engine.log.records
    return [(r["key"], r["attempt"], r["kind"]) for r in records if r["route"] == INTERPRETER]


def test_two_fresh_emulators_with_one_plan_decide_alike_on_a_websocket() -> None:
    """A WebSocket's key was a hash of its path, which holds the sandbox's random id: two runs of one plan and seed
    decided differently, and a decision log never matched a new run. It is now keyed by the sandbox's creation
    ordinal (or the name its client gave it)."""
    first, second = _ws_decisions(), _ws_decisions()
    assert first == second
    assert [attempt for _, attempt, _ in first] == [1, 2, 3, 4, 5, 6, 1]
    assert {kind for _, _, kind in first} == {"pass", "status"}  # the coin fell both ways: the keys were compared
    assert first[-1][0] != first[0][0]
    assert {key for key, _, _ in _ws_decisions("pinned")} == {"pinned"}  # X-Emulator-Key still wins
