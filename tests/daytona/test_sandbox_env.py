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


@pytest.mark.parametrize(
    "body",
    [
        {"snapshot": "a\u0000b"},
        {"target": "a\u0000b"},
        {"name": "a\u0000b"},
        {"user": "a\u0000b"},
        {"labels": {"k": "a\u0000b"}},
        {"labels": {"a\u0000b": "v"}},
        {"env": {"K": "a\u0000b"}},
        {"env": {"a\u0000b": "v"}},
    ],
)
def test_a_creation_storing_a_nul_is_the_apis_500_and_no_sandbox(
    server: EmulatorServer, api_key: str, body: dict[str, object]
) -> None:
    """Postgres refuses a NUL in text: the API's exception filter answers the failed query, and nothing is stored (a
    stored one would break every command of the sandbox, its environment unable to hold the value)."""
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json=body)
    assert (created.status_code, created.json()["message"]) == (500, "An unexpected error occurred."), body
    assert server.emulator.daytona.store.alive() == 0
    assert client.get("/api/sandbox").json()["items"] == []


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("execute", {"command": "echo ran"}),
        ("code-run", {"code": "print('ran')", "language": "python"}),
        ("code-run", {"code": "print('ran')", "language": "python", "argv": ["x"]}),
    ],
)
def test_a_nul_in_the_sandboxs_own_environment_fails_the_start_as_gos_exec_does(
    server: EmulatorServer,
    sandbox: tuple[httpx.Client, dict[str, object]],
    route: str,
    body: dict[str, object],
) -> None:
    """The whole environment is checked, not only the request's ``envs``: a sandbox value holding a NUL (here put on
    the stored sandbox, as no creation can) is Go's refusal, never a failure in the child after its fork."""
    client, made = sandbox
    server.emulator.daytona.store.get(str(made["id"])).snapshot = "a\u0000b"
    answer = client.post(f"/toolbox/{made['id']}/process/{route}", json=body)
    assert (answer.status_code, answer.json()) == (
        200,
        {"exitCode": -1, "result": "exec: environment variable contains NUL"},
    )
