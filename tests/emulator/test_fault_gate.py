"""The fault gate as a client sees it in process: what it journals, the keys it gives, the heads it writes."""

from __future__ import annotations

import asyncio
from typing import cast

import httpx

from emulator.app import Emulator
from emulator.faults import FaultEngine
from emulator.faults.replay import ReplayEngine


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
