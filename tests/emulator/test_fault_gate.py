"""The fault gate as a client sees it in process: what it journals, the keys it gives, the heads it writes."""

from __future__ import annotations

import asyncio
import socket
import uuid
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


def test_a_replay_miss_is_answered_with_its_message_alone() -> None:
    """A replay run against other tests than the log's: a short 500 naming the missing decision on every route (the
    real server's traceback body is for its own failures), so a client or a test log shows the reason at once."""
    emulator = Emulator()
    replay = ReplayEngine([], strict=True, clock=emulator.clock)
    emulator.engine = emulator.gate.engine = cast(FaultEngine, replay)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=emulator.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            code = {"code": "print(1)", "language": "python"}
            headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
            return [
                await client.post("/run_code", json=code),
                await client.get("/v1/ping"),
                await client.post("/api/sandbox", json={}, headers=headers),
            ]

    for answer in asyncio.run(main()):
        assert answer.status_code == 500
        assert list(answer.json()) == ["detail"]
        assert answer.json()["detail"].startswith("no logged decision for route=")


WS_PLAN = {"seed": 7, "rules": [{"id": "coin", "route": INTERPRETER, "probability": 0.5, "fault": 504}]}


def _ws_decisions(explicit_key: str | None = None) -> list[tuple[str, int, str]]:
    """(key, attempt, kind) of six interpreter WebSockets on one sandbox of a fresh emulator, then one on a second
    sandbox, which its client named with a random part (as DaytonaTool names its sandboxes)."""
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    with EmulatorServer(Emulator(faults=WS_PLAN)) as server:
        api = requests.Session()
        api.headers.update(headers)
        sandboxes = [api.post(server.url + "/api/sandbox", json={}, timeout=30).json()["id"]]
        name = f"mine-{uuid.uuid4().hex[:6]}"
        sandboxes.append(api.post(server.url + "/api/sandbox", json={"name": name}, timeout=30).json()["id"])

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
    ordinal, even where the client named the sandbox (names carry random parts too)."""
    first, second = _ws_decisions(), _ws_decisions()
    assert first == second
    assert [attempt for _, attempt, _ in first] == [1, 2, 3, 4, 5, 6, 1]
    assert {kind for _, _, kind in first} == {"pass", "status"}  # the coin fell both ways: the keys were compared
    assert first[-1][0] != first[0][0]
    assert {key for key, _, _ in _ws_decisions("pinned")} == {"pinned"}  # X-Emulator-Key still wins


def _raw_get(server: EmulatorServer, path: str) -> bytes:
    """Everything the server sends for one GET, until it closes the connection."""
    with socket.create_connection((server.url.split("//")[1].split(":")[0], server.port), timeout=10) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {DEFAULT_API_KEY}\r\n\r\n".encode("latin-1")
        )
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_truncated_answer_has_the_head_of_any_other() -> None:
    """The truncated head said "OK" whatever its status, had no date, and lost the decision's rate-limit headers."""
    plan = {
        "rules": [{"route": "daytona.sandbox.get", "fault": {"truncate": {"keep_fraction": 0.5}}}],
        "limits": [
            {"name": "w", "route": "daytona.sandbox.get", "max_requests": 5, "per": 60, "headers_style": "daytona"}
        ],
    }
    with EmulatorServer(Emulator(faults=plan)) as server:
        raw = _raw_get(server, "/api/sandbox/nope")
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines)}
    assert status_line == "HTTP/1.1 404 Not Found"
    assert headers["x-ratelimit-limit-w"] == "5" and headers["x-ratelimit-remaining-w"] == "4"
    assert headers["date"].endswith(" GMT") and headers["server"] == "uvicorn"
    assert headers["content-type"] == "application/json"
    assert 0 < len(body) < int(headers["content-length"])


def _post(emulator: Emulator, key: str) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=emulator.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            return await client.post("/run_code", json={}, headers={"X-Emulator-Key": key})

    return asyncio.run(main())


def test_a_faults_content_type_goes_out_as_declared() -> None:
    """Given as starlette's media_type, a text/ type got '; charset=utf-8' added, a plan's override too."""
    rules = [
        {"route": "sandbox_fusion.run_code", "key": "gw", "fault": 503},
        {"route": "sandbox_fusion.run_code", "fault": {"status": 500, "headers": {"content-type": "text/plain"}}},
    ]
    emulator = Emulator(faults={"rules": rules})
    gateway = _post(emulator, "gw")
    assert gateway.status_code == 503 and gateway.headers.get_list("content-type") == ["text/html"]
    overridden = _post(emulator, "other")
    assert overridden.status_code == 500 and overridden.headers.get_list("content-type") == ["text/plain"]


def test_a_denied_websocket_logs_no_error() -> None:
    """uvicorn logged "ASGI callable returned without completing handshake." at ERROR for every upgrade the gate
    denied with a status, though the client got it."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    plan = {"rules": [{"route": INTERPRETER, "fault": 503}]}
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    with EmulatorServer(Emulator(faults=plan)) as server:
        logger.addHandler(handler)
        try:
            sandbox_id = requests.post(server.url + "/api/sandbox", json={}, headers=headers, timeout=30).json()["id"]
            url = server.url.replace("http", "ws", 1) + f"/toolbox/{sandbox_id}/process/interpreter/execute"

            async def connect() -> int:
                async with aiohttp.ClientSession() as session:
                    try:
                        async with session.ws_connect(url, headers=headers):
                            return 101
                    except aiohttp.WSServerHandshakeError as refused:
                        return refused.status

            assert asyncio.run(connect()) == 503
            [entry] = [e for e in server.emulator.journal.entries() if e.route == INTERPRETER]
            assert entry.finished is not None  # the handler is done, so anything it would log is logged
        finally:
            logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == []


def test_use_engine_replays_a_decision_log_and_goes_back_to_a_plan() -> None:
    """The public way to replay a log in an emulator of one's own (the plugin's ``--chaos-replay`` uses it)."""
    import pytest

    emulator = Emulator(faults={"rules": [{"route": "sandbox_fusion.ping", "fault": 503}]})
    assert _get(emulator, "/v1/ping").status_code == 503
    log = emulator.engine.log
    emulator.use_engine(ReplayEngine(log, strict=True, clock=emulator.clock))
    assert emulator.replaying and emulator.gate.engine is emulator.engine
    emulator.reset()  # the attempts start again: the replay answers the first attempt as the log did
    assert _get(emulator, "/v1/ping").status_code == 503
    emulator.use_engine(FaultEngine(clock=emulator.clock))
    assert not emulator.replaying and _get(emulator, "/v1/ping").status_code == 200
    with pytest.raises(TypeError, match="FaultEngine or a ReplayEngine"):
        emulator.use_engine("replay.jsonl")  # type: ignore[arg-type]
