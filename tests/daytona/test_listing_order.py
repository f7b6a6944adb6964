"""The daemon lists sessions, a session's commands and interpreter contexts from Go maps (``cmap``'s ``Keys`` and
``Items``, a plain ``map`` for contexts): a different order on each call. Code that takes ``commands[-1]`` for the
last command works against an emulator that lists in creation order and breaks against the real one, so the
emulator shuffles these listings too, from a seed, so that a run replays; ``listing_seed=None`` keeps creation order.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from daytona import Daytona, DaytonaConfig, SessionExecuteRequest

from emulator.daytona.config import DEFAULT_API_KEY
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona

from .conftest import make_server

LISTINGS = 6


def _orders(config: EmulatedDaytona, api_key: str) -> dict[str, list[list[str]]]:
    """What ``LISTINGS`` listings of each kind answer, and (under ``made``) the order things were made in."""
    with make_server(config) as server:
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
        sandbox = client.post("/api/sandbox", json={}).json()["id"]
        toolbox = f"/toolbox/{sandbox}/process"
        sessions = [f"s{n}" for n in range(5)]
        for name in sessions:
            assert client.post(f"{toolbox}/session", json={"sessionId": name}).status_code == 201
        commands = []
        for n in range(6):
            ran = client.post(f"{toolbox}/session/s0/exec", json={"command": f"echo {n}"})
            assert ran.status_code == 200, ran.text
            commands.append(ran.json()["cmdId"])
        contexts = []
        for _ in range(4):
            made = client.post(f"{toolbox}/interpreter/context", json={})
            assert made.status_code == 200, made.text
            contexts.append(made.json()["id"])
        orders: dict[str, list[list[str]]] = {
            "made": [sessions, commands, contexts],
            "sessions": [],
            "commands": [],
            "listed commands": [],
            "contexts": [],
        }
        for _ in range(LISTINGS):
            listed = client.get(f"{toolbox}/session").json()
            orders["sessions"].append([s["sessionId"] for s in listed])
            first = next(s for s in listed if s["sessionId"] == "s0")
            orders["listed commands"].append([c["id"] for c in first["commands"]])
            orders["commands"].append([c["id"] for c in client.get(f"{toolbox}/session/s0").json()["commands"]])
            answer = client.get(f"{toolbox}/interpreter/context").json()["contexts"]
            orders["contexts"].append([c["id"] for c in answer])
        client.delete(f"/api/sandbox/{sandbox}")
        return orders


@pytest.fixture(scope="module")
def seeded() -> dict[str, list[list[str]]]:
    return _orders(EmulatedDaytona(), DEFAULT_API_KEY)


@pytest.mark.parametrize(("kind", "made"), [("sessions", 0), ("commands", 1), ("listed commands", 1), ("contexts", 2)])
def test_listings_come_in_a_different_order_each_time(seeded: dict[str, list[list[str]]], kind: str, made: int) -> None:
    created = seeded["made"][made]
    listings = seeded[kind]
    assert all(sorted(listing) == sorted(created) for listing in listings)  # every one there, once
    assert any(listing != created for listing in listings)
    assert len({tuple(listing) for listing in listings}) > 1


def test_the_same_seed_replays_the_same_orders(seeded: dict[str, list[list[str]]], api_key: str) -> None:
    again = _orders(EmulatedDaytona(), api_key)
    for kind in ("sessions", "commands", "listed commands", "contexts"):
        # ids differ between the two servers: compare each listing as positions in creation order
        made = again["made"][{"sessions": 0, "contexts": 2}.get(kind, 1)]
        first = seeded["made"][{"sessions": 0, "contexts": 2}.get(kind, 1)]
        replayed = [[made.index(i) for i in listing] for listing in again[kind]]
        assert replayed == [[first.index(i) for i in listing] for listing in seeded[kind]], kind


def test_no_seed_lists_in_creation_order(api_key: str) -> None:
    orders = _orders(EmulatedDaytona(listing_seed=None), api_key)
    assert orders["sessions"] == [orders["made"][0]] * LISTINGS
    assert orders["commands"] == orders["listed commands"] == [orders["made"][1]] * LISTINGS
    assert orders["contexts"] == [orders["made"][2]] * LISTINGS


@pytest.mark.parametrize("seed", [True, 1.5, "0"])
def test_a_seed_that_is_not_a_whole_number_is_refused(seed: object) -> None:
    with pytest.raises(ValueError, match="listing_seed must be a whole number or None"):
        EmulatedDaytona(listing_seed=seed)  # type: ignore[arg-type]


@pytest.fixture
def sdk(api_key: str) -> Iterator[Daytona]:
    with make_server(EmulatedDaytona()) as server:
        yield Daytona(DaytonaConfig(api_key=api_key, api_url=server.url + "/api"))


def test_the_sdk_sees_commands_out_of_order_and_finds_the_last_by_id(sdk: Daytona) -> None:
    """What user code should do: keep the id ``execute_session_command`` returns, not the listing's last entry."""
    sandbox = sdk.create()
    try:
        sandbox.process.create_session("work")
        ids = [
            sandbox.process.execute_session_command("work", SessionExecuteRequest(command=f"echo {n}")).cmd_id
            for n in range(6)
        ]
        listings = [[c.id for c in sandbox.process.get_session("work").commands or []] for _ in range(LISTINGS)]
        assert all(sorted(listing) == sorted(ids) for listing in listings)
        assert any(listing[-1] != ids[-1] for listing in listings)
        assert sandbox.process.get_session_command("work", ids[-1]).command == "echo 5"
    finally:
        sdk.delete(sandbox)
