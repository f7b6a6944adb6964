"""Every answer validated with the SDK's published models (strict pydantic), plus the recorded SDK traffic."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from daytona_api_client.models import ListSandboxesResponse, Sandbox, SandboxListItem, ToolboxProxyUrl
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
    UploadFilesResponse,
)

from emulator.server import EmulatorServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "daytona"


@pytest.fixture
def client(server: EmulatorServer, api_key: str) -> httpx.Client:
    # The SDK's version header, as the SDK sends it: the daemon shapes a session command's answer by it.
    headers = {"Authorization": f"Bearer {api_key}", "X-Daytona-SDK-Version": "0.226.1"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def test_control_plane_shapes(client: httpx.Client) -> None:
    body = {"name": "shape-1", "env": {"A": "1"}, "labels": {"who": "shapes"}, "autoStopInterval": 15}
    created = _ok(client.post("/api/sandbox", json=body))
    sandbox = Sandbox.from_dict(created)
    assert sandbox is not None and sandbox.kvm is False and sandbox.state == "started"
    assert isinstance(created["cpu"], int) and isinstance(created["public"], bool)
    assert Sandbox.from_dict(_ok(client.get("/sandbox/shape-1"))) is not None  # by name, without /api
    page = _ok(client.get("/api/sandbox", params={"labels": json.dumps({"who": "shapes"}), "states": "started"}))
    listed = ListSandboxesResponse.from_dict(page)
    assert listed is not None and [i.id for i in listed.items] == [created["id"]]
    assert all(SandboxListItem.from_dict(i) is not None for i in page["items"])
    assert ToolboxProxyUrl.from_dict(_ok(client.get(f"/api/sandbox/{created['id']}/toolbox-proxy-url"))) is not None
    for action, state in (("stop", "stopped"), ("start", "started")):
        answer = Sandbox.from_dict(_ok(client.post(f"/api/sandbox/{created['id']}/{action}")))
        assert answer is not None and answer.state == state
    deleted = Sandbox.from_dict(_ok(client.delete(f"/api/sandbox/{created['id']}")))
    assert deleted is not None and deleted.id == created["id"]
    missing = client.get(f"/api/sandbox/{created['id']}")
    assert missing.status_code == 404
    assert set(missing.json()) >= {"statusCode", "error", "message", "path", "timestamp"}


def test_pagination(client: httpx.Client) -> None:
    ids = [_ok(client.post("/sandbox", json={"labels": {"p": "1"}}))["id"] for _ in range(5)]
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2", "labels": '{"p": "1"}'}
        if cursor:
            params["cursor"] = cursor
        page = _ok(client.get("/sandbox", params=params))
        seen += page["items"]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert sorted(i["id"] for i in seen) == sorted(ids)
    # The API's default order: the most recently active first, the id breaking ties.
    assert seen == sorted(seen, key=lambda i: (i["lastActivityAt"], i["id"]), reverse=True)


def test_toolbox_shapes(client: httpx.Client, server: EmulatorServer) -> None:
    created = _ok(client.post("/sandbox", json={"env": {}, "labels": {}}))
    assert created["toolboxProxyUrl"] == server.url + "/toolbox"
    tb = f"/toolbox/{created['id']}"
    run = CodeRunResponse.from_dict(
        _ok(client.post(tb + "/process/code-run", json={"code": "print(1)", "language": "python"}))
    )
    assert run is not None and run.exit_code == 0 and run.result == "1\n"
    ex = ExecuteResponse.from_dict(_ok(client.post(tb + "/process/execute", json={"command": "exit 4"})))
    assert ex is not None and ex.exit_code == 4
    timeout = client.post(tb + "/process/execute", json={"command": "sleep 5", "timeout": 1})
    assert timeout.status_code == 408
    error = ErrorResponse.from_dict(timeout.json())
    assert error is not None and error.code == "REQUEST_TIMEOUT"
    assert client.post(tb + "/process/session", json={"sessionId": "s"}).status_code == 201
    sync = SessionExecuteResponse.from_dict(
        _ok(client.post(tb + "/process/session/s/exec", json={"command": "echo o; echo e >&2", "runAsync": False}))
    )
    assert sync is not None and sync.stdout == "o\n" and sync.stderr == "e\n" and sync.exit_code == 0
    started = _ok(client.post(tb + "/process/session/s/exec", json={"command": "echo later", "runAsync": True}), 202)
    command_id = SessionExecuteResponse.from_dict(started).cmd_id  # type: ignore[union-attr]
    for _ in range(100):
        command = Command.from_dict(_ok(client.get(f"{tb}/process/session/s/command/{command_id}")))
        assert command is not None
        if command.exit_code is not None:
            break
        import time

        time.sleep(0.05)
    logs = SessionCommandLogsResponse.from_dict(_ok(client.get(f"{tb}/process/session/s/command/{command_id}/logs")))
    assert logs is not None and logs.stdout == "later\n"
    assert Session.from_dict(_ok(client.get(tb + "/process/session/s"))) is not None
    assert client.delete(tb + "/process/session/s").status_code == 204
    files = {"files[0].path": (None, "dir/x.txt"), "files[0].file": ("dir/x.txt", b"xyz")}
    upload = UploadFilesResponse.from_dict(_ok(client.post(tb + "/files/bulk-upload", files=files)))
    assert upload is not None
    info = FileInfo.from_dict(_ok(client.get(tb + "/files/info", params={"path": "dir/x.txt"})))
    assert info is not None and info.size == 3 and not info.is_dir
    listing = _ok(client.get(tb + "/files", params={"path": "dir"}))
    assert [FileInfo.from_dict(i).name for i in listing] == ["x.txt"]  # type: ignore[union-attr]
    assert client.delete(tb + "/files/", params={"path": "dir", "recursive": "true"}).status_code == 204
    context = InterpreterContext.from_dict(_ok(client.post(tb + "/process/interpreter/context", json={})))
    assert context is not None and context.language == "python"
    contexts = ListContextsResponse.from_dict(_ok(client.get(tb + "/process/interpreter/context")))
    assert contexts is not None and [c.id for c in contexts.contexts] == [context.id]
    assert client.delete(f"{tb}/process/interpreter/context/{context.id}").status_code == 200
    escape = client.get(tb + "/files/info", params={"path": "../../../etc/passwd"})
    assert escape.status_code == 400


def test_sandbox_root_is_removed_on_delete(client: httpx.Client, server: EmulatorServer) -> None:
    created = _ok(client.post("/sandbox", json={}))
    store = server.emulator.daytona.store
    sandbox = store.get(created["id"])
    client.post(f"/toolbox/{created['id']}/process/execute", json={"command": "echo x > f.txt"})
    home, root = Path(sandbox.home), Path(sandbox.root)
    assert (home / "f.txt").read_text() == "x\n"
    client.delete(f"/sandbox/{created['id']}")
    assert not home.exists() and not root.exists()


@pytest.mark.parametrize("recording", ["full.jsonl", "basic_allhdr.jsonl", "img.jsonl"])
def test_recorded_sdk_requests_get_the_recorded_statuses(
    recording: str, client: httpx.Client, server: EmulatorServer
) -> None:
    """Replay the requests the real SDK sent (recorded against a stub) and expect the same statuses."""
    lines = (FIXTURES / recording).read_text().splitlines()
    found = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "\n".join(lines))
    recorded_id = found.group(0) if found else "-"
    sandbox_id = "-"
    replayed = 0
    for line in lines:
        record = json.loads(line)
        path, method = record.get("path"), record.get("method")
        if not method or not path or "socket.io" in path or record.get("status") == 101:
            continue
        if path.endswith(("bulk-upload", "bulk-download")):
            continue  # the multipart framing is covered by the SDK tests
        path = path.replace(recorded_id, sandbox_id)
        query = record.get("query") or ""
        body = record.get("body")
        response = client.request(method, path + ("?" + query if query else ""), json=body)
        assert response.status_code == record["status"], (method, path, response.text)
        if method == "POST" and path.rstrip("/").endswith("/sandbox"):
            sandbox_id = response.json()["id"]
        replayed += 1
    assert replayed >= 3
