"""Fault-plan rules as a client sees them on the wire: statuses, headers, bodies, resets, truncation, limits."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
import requests
from sandbox_fusion.models import RunCodeResponse, RunJupyterResponse, RunStatus

from emulator.app import Emulator
from emulator.faults import FaultPlanError
from emulator.journal import Journal
from emulator.server import EmulatorServer

RUN_CODE = "sandbox_fusion.run_code"
PRINT = {"code": "print(1)", "language": "python"}


def _rule(fault: Any, **extra: Any) -> dict[str, Any]:
    return {"rules": [{"id": "r", "route": RUN_CODE, "fault": fault, **extra}]}


@pytest.mark.faults(_rule({"status": 429, "retry_after": 2}))
def test_429_has_retry_after(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    answer = requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "2"
    assert [(e.status, e.fault, e.outcome) for e in emulator_journal.entries()] == [(429, "status", "fault")]


@pytest.mark.faults(_rule({"status": 504}))
def test_504_comes_with_a_gateway_page(sandbox_fusion_url: str) -> None:
    answer = requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert answer.status_code == 504
    assert answer.headers["content-type"].startswith("text/html")
    assert "504 Gateway Time-out" in answer.text


@pytest.mark.faults(_rule("reset"))
def test_reset_drops_the_connection(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert [(e.status, e.outcome) for e in emulator_journal.entries()] == [(None, "reset")]


@pytest.mark.faults(_rule({"truncate": {"keep_fraction": 0.5}}))
def test_truncated_body_is_an_error_for_the_client(sandbox_fusion_url: str) -> None:
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
        requests.post(sandbox_fusion_url, json=PRINT, timeout=10)


@pytest.mark.faults(_rule("malformed"))
def test_malformed_body_is_200_but_not_json(sandbox_fusion_url: str) -> None:
    answer = requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert answer.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(answer.text)


@pytest.mark.faults(_rule("sandbox_error"))
def test_sandbox_error_has_the_recorded_shape(sandbox_fusion_url: str) -> None:
    body = requests.post(sandbox_fusion_url, json=PRINT, timeout=10).json()
    assert body["status"] == "SandboxError"
    assert body["run_result"]["status"] == "Error"
    assert body["run_result"]["stdout"] is None
    assert "the handler is closed" in body["message"]
    assert RunCodeResponse.parse_obj(body).status == RunStatus.SandboxError  # the published client's model


@pytest.mark.faults({"rules": [{"route": "sandbox_fusion.run_jupyter", "fault": "sandbox_error"}]})
def test_sandbox_error_on_run_jupyter_parses_as_its_response(sandbox_fusion_url: str) -> None:
    url = sandbox_fusion_url.replace("/run_code", "/run_jupyter")
    answer = requests.post(url, json={"cells": ["print(1)"]}, timeout=10)
    assert answer.status_code == 200
    parsed = RunJupyterResponse.parse_obj(answer.json())
    assert parsed.status == RunStatus.SandboxError and parsed.cells == [] and "the handler is closed" in parsed.message


@pytest.mark.faults(_rule({"hang": {"seconds": 0.3, "then": 504}}))
def test_hang_then_gateway_timeout(sandbox_fusion_url: str) -> None:
    started = time.monotonic()
    answer = requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert answer.status_code == 504
    assert time.monotonic() - started >= 0.3


@pytest.mark.faults(_rule({"status": 504}, requests="3-5"))
def test_scripted_schedule(sandbox_fusion_url: str) -> None:
    statuses = [
        requests.post(sandbox_fusion_url, json={"code": f"print({i})", "language": "python"}, timeout=10).status_code
        for i in range(1, 8)
    ]
    assert statuses == [200, 200, 504, 504, 504, 200, 200]


@pytest.mark.faults({"rules": [{"id": "slow", "route": RUN_CODE, "latency": {"fixed": 0.25}}]})
def test_latency_is_added(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    started = time.monotonic()
    assert requests.post(sandbox_fusion_url, json=PRINT, timeout=10).status_code == 200
    assert time.monotonic() - started >= 0.25
    assert emulator_journal.entries()[0].injected_latency == pytest.approx(0.25)


@pytest.mark.faults({"rules": [{"id": "slow", "route": RUN_CODE, "latency": {"fixed": 0.25}}]})
def test_the_program_starts_only_after_the_latency(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    """The sandbox may get ready during the latency (forked, held), but the program's first instruction runs after it;
    a request that runs nothing (a 422) is answered after it too."""
    stamp = {"code": "import time\nprint(time.monotonic())", "language": "python", "run_timeout": 0.2}
    sent = time.monotonic()
    answer = requests.post(sandbox_fusion_url, json=stamp, timeout=10)
    answered = time.monotonic()
    run_result = answer.json()["run_result"]
    assert (answer.status_code, run_result["status"]) == (200, "Finished")  # timed from its start, not the fork
    assert sent + 0.25 <= float(run_result["stdout"]) <= answered
    invalid_sent = time.monotonic()
    invalid = requests.post(sandbox_fusion_url, json={"language": "python"}, timeout=10)
    assert invalid.status_code == 422 and time.monotonic() - invalid_sent >= 0.25
    assert [(e.status, e.outcome) for e in emulator_journal.entries()] == [(200, "ok"), (422, "invalid")]


def _post_head_then_body(url: str, payload: dict[str, Any], pause: float) -> tuple[float, float, bytes, float]:
    """POST ``payload`` as a slow client does: the head, ``pause`` seconds, then the body. Returns (when the head was
    sent, when the body was, the whole answer, when it was received)."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    body = json.dumps(payload).encode()
    head = (
        f"POST /run_code HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sent = time.monotonic()
        sock.sendall(head)
        time.sleep(pause)  # the slow client under test
        body_sent = time.monotonic()
        sock.sendall(body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return sent, body_sent, answer, time.monotonic()


@pytest.mark.faults({"rules": [{"id": "slow", "route": RUN_CODE, "latency": {"fixed": 0.5}}]})
def test_the_latency_runs_from_the_requests_first_bytes(sandbox_fusion_url: str) -> None:
    """A client that sends its head, then its body 1 s later: the program starts 0.5 s after the head came, not
    0.5 s after the body (the server's reading and deciding run during the latency, as behind a slow network)."""
    stamp = {"code": "import time\nprint(time.monotonic())", "language": "python"}
    sent, body_sent, answer, _ = _post_head_then_body(sandbox_fusion_url, stamp, pause=1.0)
    started = float(json.loads(answer.partition(b"\r\n\r\n")[2])["run_result"]["stdout"])
    # Timed from the body, it could start no sooner than 0.5 s after the body left; timed from the head, it starts
    # about 1 s before that (a loaded machine's margin).
    assert sent + 0.5 <= started < body_sent + 0.5


@pytest.mark.faults({"rules": [{"id": "slow", "route": RUN_CODE, "latency": {"fixed": 0.2}}]})
def test_the_journal_holds_each_requests_arrival(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    """The arrival is the first bytes' time (before the body, before the entry began), on the caller's monotonic
    clock, and the answer is complete no sooner than the latency after it."""
    sent, body_sent, _, received = _post_head_then_body(sandbox_fusion_url, PRINT, pause=0.5)
    (entry,) = emulator_journal.entries()
    assert entry.arrived is not None and entry.finished is not None
    # The head's arrival, not the body's: before the body left the client, 0.5 s later.
    assert sent <= entry.arrived < body_sent
    # The entry began with the body (not 0.5 s after the head came: the head takes its own moment to arrive).
    assert entry.started >= body_sent
    assert entry.arrived + 0.2 <= entry.finished <= received


@pytest.mark.faults(_rule("null_stdout"))
def test_null_stdout_runs_the_code_but_hides_stdout(sandbox_fusion_url: str) -> None:
    body = requests.post(sandbox_fusion_url, json=PRINT, timeout=10).json()
    assert body["status"] == "Success"
    assert body["run_result"]["stdout"] is None
    assert body["run_result"]["return_code"] == 0
    parsed = RunCodeResponse.parse_obj(body)
    assert parsed.run_result is not None and parsed.run_result.stdout is None


@pytest.mark.faults({"rules": [{"id": "n", "route": "sandbox_fusion.*", "fault": "null_stdout"}]})
def test_null_stdout_is_journalled_only_where_it_changed_the_answer(
    sandbox_fusion_url: str, emulator_journal: Journal
) -> None:
    """On a route without run_result (ping), or a request refused before running, the answer is the real one: the
    journal called it an injected fault."""
    base = sandbox_fusion_url.removesuffix("/run_code")
    assert requests.get(base + "/v1/ping", timeout=10).json() == "pong"
    refused = requests.post(sandbox_fusion_url, json={"language": "python"}, timeout=10)
    ran = requests.post(sandbox_fusion_url, json=PRINT, timeout=10)
    assert ran.json()["run_result"]["stdout"] is None
    entries = [(e.route, e.fault, e.outcome, e.detail.get("rule")) for e in emulator_journal.entries()]
    assert entries == [
        ("sandbox_fusion.ping", None, "ok", None),
        (RUN_CODE, None, "invalid" if refused.status_code >= 400 else "ok", None),
        (RUN_CODE, "null_stdout", "fault", "n"),
    ]


@pytest.mark.parametrize("route", ["sandbox_fusion.ping", "daytona.*", ["sandbox_fusion.run_jupyter", "daytona.*"]])
def test_null_stdout_is_refused_on_routes_without_run_result(route: object) -> None:
    with pytest.raises(FaultPlanError, match=r"^rules\[0\]\.fault: null_stdout empties run_result\.stdout"):
        Emulator(faults={"rules": [{"route": route, "fault": "null_stdout"}]})


@pytest.mark.faults({"limits": [{"name": "cap", "route": RUN_CODE, "max_in_flight": 2}]})
def test_concurrency_cap_answers_429_beyond_the_limit(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    statuses: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        payload = {"code": f"import time; time.sleep(0.5); print({i})", "language": "python"}
        status = requests.post(sandbox_fusion_url, json=payload, timeout=30).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(statuses)) == [200, 429]
    assert statuses.count(200) >= 2
    admitted = [e for e in emulator_journal.entries() if e.status == 200]
    overlapping = max(sum(1 for o in admitted if o.started <= e.started < (o.finished or 0)) for e in admitted)
    assert overlapping <= 2


def test_same_seed_same_decisions_whatever_the_order(sandbox_emulator: EmulatorServer) -> None:
    plan = {"seed": 11, "rules": [{"id": "coin", "route": RUN_CODE, "probability": 0.5, "fault": {"status": 503}}]}
    keys = [f"trajectory-{i}" for i in range(12)]

    def run(order: list[str]) -> dict[str, int]:
        sandbox_emulator.emulator.set_faults(plan)
        sandbox_emulator.emulator.reset()
        got = {}
        for key in order:
            answer = requests.post(
                sandbox_emulator.run_code_url, json=PRINT, headers={"X-Emulator-Key": key}, timeout=10
            )
            got[key] = answer.status_code
        return got

    forward = run(keys)
    backward = run(list(reversed(keys)))
    assert forward == backward
    assert set(forward.values()) == {200, 503}


def test_control_plane(sandbox_emulator: EmulatorServer) -> None:
    base = sandbox_emulator.url + "/_emulator"
    assert requests.get(base + "/health", timeout=10).json()["status"] == "ok"
    bad = requests.put(base + "/faults", json={"rules": [{"id": "x", "fault": {"status": "often"}}]}, timeout=10)
    assert bad.status_code == 400 and "status" in bad.json()["error"]
    unknown = requests.put(base + "/faults", json={"profile": "no-such-profile"}, timeout=10)
    assert unknown.status_code == 400 and "calm" in unknown.json()["error"]
    plan = {"rules": [{"id": "all-503", "route": RUN_CODE, "fault": {"status": 503}}]}
    assert requests.put(base + "/faults", json=plan, timeout=10).status_code == 200
    for empty in (b"", b"null", b'{"profile": null}'):  # a mistake, refused: the plan in force stays
        refused = requests.put(base + "/faults", data=empty, timeout=10)
        assert refused.status_code == 400 and "no fault plan in the request" in refused.json()["error"]
    assert requests.get(base + "/faults", timeout=10).json()["rules"][0]["id"] == "all-503"
    assert requests.post(sandbox_emulator.run_code_url, json=PRINT, timeout=10).status_code == 503
    journal = requests.get(base + "/journal", timeout=10).json()
    assert [(e["route"], e["status"], e["fault"]) for e in journal] == [(RUN_CODE, 503, "status")]
    stats = requests.get(base + "/stats", timeout=10).json()
    assert stats["by_route"][RUN_CODE]["by_status"] == {"503": 1}
    decisions = requests.get(base + "/decisions", timeout=10).json()
    assert decisions[-1]["kind"] == "status" and decisions[-1]["status"] == 503
    assert requests.post(base + "/reset", timeout=10).json() == {"reset": True}
    assert requests.get(base + "/journal", timeout=10).json() == []


def test_the_journal_reads_from_a_sequence_number(sandbox_emulator: EmulatorServer) -> None:
    base = sandbox_emulator.url + "/_emulator/journal"
    for _ in range(3):
        assert requests.post(sandbox_emulator.run_code_url, json=PRINT, timeout=10).status_code == 200
    requests.get(sandbox_emulator.url + "/v1/ping", timeout=10)
    every = requests.get(base, timeout=10).json()
    seqs = [e["seq"] for e in every if e["route"] == RUN_CODE]
    assert len(seqs) == 3
    later = requests.get(base, params={"route": RUN_CODE, "since": seqs[0]}, timeout=10).json()
    assert [e["seq"] for e in later] == seqs[1:]
    assert requests.get(base, params={"since": max(e["seq"] for e in every)}, timeout=10).json() == []
    assert all(isinstance(e["arrived"], float) for e in later)
    for bad in ("-1", "two", "1.5", "\u00b2", ""):
        answer = requests.get(base, params={"since": bad}, timeout=10)
        assert answer.status_code == 400 and "since" in answer.json()["error"]


def test_ping(sandbox_emulator: EmulatorServer) -> None:
    answer = requests.get(sandbox_emulator.url + "/v1/ping", timeout=10)
    assert answer.status_code == 200
    assert answer.json() == "pong"
