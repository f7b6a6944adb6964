"""Every process of a sandbox sees the variables the runner sets on its container (v0.190
``runner/pkg/docker/container_configs.go``): ``DAYTONA_SANDBOX_ID``, ``DAYTONA_SANDBOX_SNAPSHOT`` and
``DAYTONA_SANDBOX_USER`` always, ``DAYTONA_ORGANIZATION_ID`` and ``DAYTONA_REGION_ID`` as the API names them; the
sandbox's own ``env`` wins for a name in both.

Why it matters to a trainer: a tool that tags its output or its files with the sandbox's id reads it from there.
"""

from __future__ import annotations

import json

import httpx
import pytest

from emulator.server import EmulatorServer

from .conftest import interpreter_frames

NAMES = (
    "DAYTONA_SANDBOX_ID",
    "DAYTONA_SANDBOX_SNAPSHOT",
    "DAYTONA_SANDBOX_USER",
    "DAYTONA_ORGANIZATION_ID",
    "DAYTONA_REGION_ID",
)
SHOW = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {NAMES!r}}}))"


@pytest.fixture
def sandbox(server: EmulatorServer, api_key: str) -> tuple[httpx.Client, dict[str, object]]:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    body = {"snapshot": "my-snapshot", "env": {"DAYTONA_REGION_ID": "mine", "OWN": "1"}}
    created = client.post("/api/sandbox", json=body)
    assert created.status_code == 200, created.text
    return client, created.json()


def _expected(sandbox: dict[str, object]) -> dict[str, object]:
    return {
        "DAYTONA_SANDBOX_ID": sandbox["id"],
        "DAYTONA_SANDBOX_SNAPSHOT": "my-snapshot",
        "DAYTONA_SANDBOX_USER": "daytona",
        "DAYTONA_ORGANIZATION_ID": sandbox["organizationId"],
        "DAYTONA_REGION_ID": "mine",  # the sandbox's env wins over the runner's region
    }


def test_execute_code_run_and_sessions_see_the_runners_variables(
    sandbox: tuple[httpx.Client, dict[str, object]],
) -> None:
    client, made = sandbox
    prefix = f"/toolbox/{made['id']}"
    expected = _expected(made)
    command = f"python3 -c {json.dumps(SHOW)}"
    executed = client.post(prefix + "/process/execute", json={"command": command})
    assert json.loads(executed.json()["result"]) == expected
    for argv in ([], ["x"]):  # the fast path and a real ``python -``
        ran = client.post(prefix + "/process/code-run", json={"code": SHOW, "language": "python", "argv": argv})
        assert json.loads(ran.json()["result"]) == expected, argv
    assert client.post(prefix + "/process/session", json={"sessionId": "s"}).status_code == 201
    in_session = client.post(prefix + "/process/session/s/exec", json={"command": command})
    assert json.loads(in_session.json()["output"]) == expected  # no SDK version: the log without its markers


def test_interpreter_contexts_see_the_runners_variables(
    server: EmulatorServer, api_key: str, sandbox: tuple[httpx.Client, dict[str, object]]
) -> None:
    client, made = sandbox
    sid = str(made["id"])
    created = client.post(f"/toolbox/{sid}/process/interpreter/context", json={})
    for context in ("default", created.json()["id"]):
        frames, close = interpreter_frames(server, api_key, sid, {"code": SHOW, "contextId": context})
        assert close == 1000 and json.loads(frames[0]["text"]) == _expected(made), context


def test_a_sandbox_without_a_snapshot_has_an_empty_one(server: EmulatorServer, api_key: str) -> None:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    made = client.post("/api/sandbox", json={}).json()
    ran = client.post(
        f"/toolbox/{made['id']}/process/execute",
        json={"command": 'echo "[${DAYTONA_SANDBOX_SNAPSHOT-unset}] $DAYTONA_SANDBOX_ID $DAYTONA_REGION_ID"'},
    )
    assert ran.json()["result"] == f"[] {made['id']} {made['target']}\n"
