"""``/_emulator/faults``: a plan replaced over HTTP, and the plans the emulator refuses (here and in process)."""

from __future__ import annotations

import pytest
import requests

from emulator.app import Emulator
from emulator.faults import FaultPlanError
from emulator.server import EmulatorServer

PLAN = {"rules": [{"id": "gw", "route": "sandbox_fusion.run_code", "fault": {"status": 504}}]}


def test_a_plan_put_over_http_applies(sandbox_emulator: EmulatorServer) -> None:
    url = sandbox_emulator.url + "/_emulator/faults"
    assert requests.put(url, json=PLAN, timeout=10).status_code == 200
    assert [rule["id"] for rule in requests.get(url, timeout=10).json()["rules"]] == ["gw"]
    answer = requests.post(sandbox_emulator.run_code_url, json={"code": "print(1)", "language": "python"}, timeout=10)
    assert answer.status_code == 504
    assert requests.put(url, json={"profile": "calm"}, timeout=10).json()["rules"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"rules": [{"route": "run_code", "fault": 503}]}, "rules[0].route: 'run_code' matches no route"),
        ({"limits": [{"route": "daytona.toolbx.*", "max_in_flight": 1}]}, "limits[0].route: 'daytona.toolbx.*'"),
        ("/etc/hostname", "unknown fault profile '/etc/hostname'"),  # a name, never a file of the server's
        ({"profile": "nope"}, "unknown fault profile 'nope'; profiles: calm"),
    ],
)
def test_a_refused_plan_is_a_400_and_the_old_plan_stays(
    sandbox_emulator: EmulatorServer, body: object, message: str
) -> None:
    url = sandbox_emulator.url + "/_emulator/faults"
    requests.put(url, json=PLAN, timeout=10)
    refused = requests.put(url, json=body, timeout=10)
    assert refused.status_code == 400 and message in refused.json()["error"]
    assert [rule["id"] for rule in requests.get(url, timeout=10).json()["rules"]] == ["gw"]


def test_a_plan_with_a_key_twice_is_a_400(sandbox_emulator: EmulatorServer) -> None:
    """json.loads kept the last of two equal keys: the first rule's fault was dropped without a word."""
    url = sandbox_emulator.url + "/_emulator/faults"
    requests.put(url, json=PLAN, timeout=10)
    body = '{"rules": [{"route": "sandbox_fusion.run_code", "fault": 503, "fault": 504}]}'
    refused = requests.put(url, data=body, headers={"Content-Type": "application/json"}, timeout=10)
    assert refused.status_code == 400
    assert refused.json() == {"error": "fault plan has a duplicate key 'fault' in rules[0]"}
    assert [rule["id"] for rule in requests.get(url, timeout=10).json()["rules"]] == ["gw"]


def test_a_route_glob_that_matches_nothing_is_refused_in_process() -> None:
    with pytest.raises(FaultPlanError, match=r"rules\[1\]\.route: 'sandbox_fusion\.runcode' matches no route"):
        Emulator(
            faults={
                "rules": [{"route": "daytona.*", "fault": 503}, {"route": "sandbox_fusion.runcode|x", "fault": 503}]
            }
        )
    plan = Emulator().set_faults({"rules": [{"route": ["sandbox_fusion.*", "daytona.toolbox.*"], "fault": 503}]})
    assert plan.rules[0].route == "sandbox_fusion.*|daytona.toolbox.*"


def test_during_a_replay_there_is_no_plan_to_show_or_replace() -> None:
    """``--chaos-replay`` puts a ``ReplayEngine`` in the fault engine's place: the control plane says so (409), where
    it answered 500 with a traceback (the replay has no ``plan``), and ``set_faults`` says so too."""
    from emulator.faults.replay import ReplayEngine

    emulator = Emulator()
    emulator.engine = emulator.gate.engine = ReplayEngine([], clock=emulator.clock)  # type: ignore[assignment]
    assert emulator.replaying
    with EmulatorServer(emulator) as server:
        url = server.url + "/_emulator/faults"
        shown, replaced = requests.get(url, timeout=10), requests.put(url, json={"profile": "flaky"}, timeout=10)
        health = requests.get(server.url + "/_emulator/health", timeout=10)
    for answer in (shown, replaced):
        assert answer.status_code == 409
        assert answer.json() == {
            "error": "the emulator replays a decision log: its faults come from the log, there is no fault plan"
        }
    assert health.status_code == 200
    with pytest.raises(RuntimeError, match="replays a decision log"):
        emulator.set_faults({"rules": []})


def test_a_replaced_plan_goes_on_from_where_the_run_is(sandbox_emulator: EmulatorServer) -> None:
    """set_faults and PUT /_emulator/faults keep attempts, ordinals, the log and plan time (the docs said counters
    restarted): a rule added mid-run by the chaos searches sees the run's next attempt, and reset restarts them."""
    emulator, ping = sandbox_emulator.emulator, sandbox_emulator.url + "/v1/ping"
    headers = {"X-Emulator-Key": "one"}
    assert requests.get(ping, headers=headers, timeout=10).status_code == 200
    started = emulator.engine.plan_time()
    emulator.set_faults({"rules": [{"route": "sandbox_fusion.ping", "attempts": "2", "fault": 503}]})
    assert requests.get(ping, headers=headers, timeout=10).status_code == 503  # attempt 2, not a fresh attempt 1
    url = sandbox_emulator.url + "/_emulator/faults"
    assert requests.put(url, json={"rules": [{"route": "sandbox_fusion.ping", "attempts": "3", "fault": 502}]}).ok
    assert requests.get(ping, headers=headers, timeout=10).status_code == 502
    records = requests.get(sandbox_emulator.url + "/_emulator/decisions", timeout=10).json()
    assert [(r["attempt"], r["ordinal"], r["status"]) for r in records] == [(1, 1, None), (2, 2, 503), (3, 3, 502)]
    assert emulator.engine.plan_time() >= started
    requests.post(sandbox_emulator.url + "/_emulator/reset", timeout=10)
    assert requests.get(ping, headers=headers, timeout=10).status_code == 200  # attempt 1 again
    assert [r["attempt"] for r in requests.get(sandbox_emulator.url + "/_emulator/decisions", timeout=10).json()] == [1]
