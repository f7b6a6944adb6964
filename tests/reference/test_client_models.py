"""Every route the emulator serves, its answer validated with the published client models: the ``sandbox-fusion``
client's pydantic models (v1 API: ``parse_obj``) and the ``daytona_api_client`` / ``daytona_toolbox_api_client``
models the SDK parses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from daytona_api_client.models import ListSandboxesResponse, Sandbox, SandboxLabels, ToolboxProxyUrl
from daytona_toolbox_api_client.models import (
    CodeRunResponse,
    Command,
    ErrorResponse,
    ExecuteResponse,
    FileInfo,
    InterpreterContext,
    ListContextsResponse,
    Session,
    SessionCommandLogsResponse,
    SessionExecuteResponse,
    UserHomeDirResponse,
    WorkDirResponse,
)
from sandbox_fusion.models import CommandRunStatus, RunCodeResponse, RunJupyterResponse, RunStatus

from emulator.server import EmulatorServer


@pytest.fixture
def client(reference_emulator: EmulatorServer) -> Iterator[httpx.Client]:
    key = reference_emulator.emulator.config.daytona.api_key
    headers = {"Authorization": f"Bearer {key}", "X-Daytona-SDK-Version": "0.226.1"}  # as the SDK sends it
    with httpx.Client(base_url=reference_emulator.url, headers=headers, timeout=60) as c:
        yield c


def _json(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.mark.parametrize(
    ("code", "language", "status"),
    [
        ("print(1)", "python", RunStatus.Success),
        ("raise SystemExit(3)", "python", RunStatus.Failed),
        ("echo hi", "bash", RunStatus.Success),
        ("int main(){ return x; }", "cpp", RunStatus.Failed),
        ("select 1", "sql", RunStatus.SandboxError),
    ],
)
def test_run_code_answers_parse_as_run_code_response(
    client: httpx.Client, code: str, language: str, status: RunStatus
) -> None:
    answer = RunCodeResponse.parse_obj(_json(client.post("/run_code", json={"code": code, "language": language})))
    assert answer.status == status


def test_run_code_with_files_parses(client: httpx.Client) -> None:
    body = {"code": "open('o.txt','w').write('x')", "language": "python", "fetch_files": ["o.txt"]}
    answer = RunCodeResponse.parse_obj(_json(client.post("/run_code", json=body)))
    assert answer.files == {"o.txt": "eA=="}


def test_run_jupyter_answer_parses(client: httpx.Client) -> None:
    answer = RunJupyterResponse.parse_obj(
        _json(client.post("/run_jupyter", json={"cells": ["a = 2", "a * 21", "print(a)"]}))
    )
    assert answer.status == RunStatus.Success and len(answer.cells) == 3
    assert answer.cells[1].display == [{"text/plain": "42"}]


def test_run_code_time_limit_parses(client: httpx.Client) -> None:
    body = {"code": "import time\ntime.sleep(5)", "language": "python", "run_timeout": 0.3}
    answer = RunCodeResponse.parse_obj(_json(client.post("/run_code", json=body)))
    assert answer.status == RunStatus.Failed
    assert answer.run_result is not None and answer.run_result.status == CommandRunStatus.TimeLimitExceeded


def test_run_jupyter_failure_parses(client: httpx.Client) -> None:
    # The kernel dies: the driver waits for its reply until its time (total_timeout + 10 s) is up, and the run failed.
    body = {"cells": ["print(1)", "import os\nos._exit(3)"], "total_timeout": 0}
    answer = RunJupyterResponse.parse_obj(_json(client.post("/run_jupyter", json=body)))
    assert answer.status == RunStatus.Failed and answer.cells == []
    assert answer.driver is not None and answer.driver.status == CommandRunStatus.TimeLimitExceeded


def test_ping_answers(client: httpx.Client) -> None:
    answer = client.get("/v1/ping")
    assert answer.status_code == 200 and answer.text.strip('"') == "pong"


def test_control_plane_answers_parse(client: httpx.Client) -> None:
    created = Sandbox.from_dict(_json(client.post("/api/sandbox", json={"labels": {"m": "1"}})))
    assert created is not None
    sid = created.id
    assert Sandbox.from_dict(_json(client.get(f"/api/sandbox/{sid}"))) is not None
    page = ListSandboxesResponse.from_dict(_json(client.get("/api/sandbox", params={"labels": '{"m": "1"}'})))
    assert page is not None and [s.id for s in page.items] == [sid]
    assert ToolboxProxyUrl.from_dict(_json(client.get(f"/api/sandbox/{sid}/toolbox-proxy-url"))) is not None
    labels = SandboxLabels.from_dict(_json(client.put(f"/api/sandbox/{sid}/labels", json={"labels": {"k": "v"}})))
    assert labels is not None and labels.labels == {"k": "v"}
    for setting in ("autostop", "autodelete", "autoarchive"):
        assert Sandbox.from_dict(_json(client.post(f"/api/sandbox/{sid}/{setting}/7"), 201)) is not None
    stopped = Sandbox.from_dict(_json(client.post(f"/api/sandbox/{sid}/stop")))
    started = Sandbox.from_dict(_json(client.post(f"/api/sandbox/{sid}/start")))
    assert stopped is not None and started is not None and (stopped.state, started.state) == ("stopped", "started")
    assert Sandbox.from_dict(_json(client.delete(f"/api/sandbox/{sid}"))) is not None


def test_toolbox_answers_parse(client: httpx.Client) -> None:
    sid = _json(client.post("/api/sandbox", json={}))["id"]
    tb = f"/toolbox/{sid}"
    run = CodeRunResponse.from_dict(
        _json(client.post(tb + "/process/code-run", json={"code": "print(6*7)", "language": "python"}))
    )
    assert run is not None and run.result == "42\n"
    ex = ExecuteResponse.from_dict(_json(client.post(tb + "/process/execute", json={"command": "echo a"})))
    assert ex is not None and ex.result == "a\n"
    timeout = ErrorResponse.from_dict(
        _json(client.post(tb + "/process/execute", json={"command": "sleep 5", "timeout": 1}), 408)
    )
    assert timeout is not None
    assert client.post(tb + "/process/session", json={"sessionId": "m"}).status_code == 201
    sessions = _json(client.get(tb + "/process/session"))
    assert [Session.from_dict(s).session_id for s in sessions] == ["m"]  # type: ignore[union-attr]
    executed = SessionExecuteResponse.from_dict(
        _json(client.post(tb + "/process/session/m/exec", json={"command": "echo s", "runAsync": False}))
    )
    assert executed is not None and executed.cmd_id
    command = Command.from_dict(_json(client.get(f"{tb}/process/session/m/command/{executed.cmd_id}")))
    assert command is not None and command.exit_code == 0
    logs = client.get(f"{tb}/process/session/m/command/{executed.cmd_id}/logs")
    assert logs.status_code == 200
    if logs.headers.get("content-type", "").startswith("application/json"):
        parsed = SessionCommandLogsResponse.from_dict(logs.json())
        assert parsed is not None and parsed.stdout == "s\n"
    else:
        assert logs.text == "s\n"
    assert Session.from_dict(_json(client.get(tb + "/process/session/m"))) is not None
    missing = ErrorResponse.from_dict(_json(client.get(tb + "/process/session/none"), 404))
    assert missing is not None
    assert client.delete(tb + "/process/session/m").status_code == 204
    assert UserHomeDirResponse.from_dict(_json(client.get(tb + "/user-home-dir"))) is not None
    assert WorkDirResponse.from_dict(_json(client.get(tb + "/work-dir"))) is not None
    assert client.post(tb + "/files/folder", params={"path": "d", "mode": "755"}).status_code in (200, 201)
    files = {"files[0].path": (None, "d/f.txt"), "files[0].file": ("d/f.txt", b"abc")}
    assert client.post(tb + "/files/bulk-upload", files=files).status_code == 200
    info = FileInfo.from_dict(_json(client.get(tb + "/files/info", params={"path": "d/f.txt"})))
    assert info is not None and info.size == 3
    listing = _json(client.get(tb + "/files", params={"path": "d"}))
    assert [FileInfo.from_dict(i).name for i in listing] == ["f.txt"]  # type: ignore[union-attr]
    assert client.get(tb + "/files/download", params={"path": "d/f.txt"}).content == b"abc"
    context = InterpreterContext.from_dict(_json(client.post(tb + "/process/interpreter/context", json={})))
    assert context is not None
    contexts = ListContextsResponse.from_dict(_json(client.get(tb + "/process/interpreter/context")))
    assert contexts is not None and [c.id for c in contexts.contexts] == [context.id]
    assert client.delete(f"{tb}/process/interpreter/context/{context.id}").status_code == 200
    client.delete(f"/api/sandbox/{sid}")
