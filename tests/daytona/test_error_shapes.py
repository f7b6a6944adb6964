"""Every error body the emulator sends on Daytona's routes, its own and the fault plan's, against the published models.

The toolbox client declares ``ErrorResponse`` (``path`` and ``timestamp`` required) for its 4xx and 5xx answers and
``UploadFilesResponse`` for a bulk upload's 400; a body that does not parse leaves the SDK an ``ApiException`` without
data. The control plane's client declares no error model: its envelope is checked against the recorded keys.
"""

from __future__ import annotations

import http.client
from datetime import datetime

import httpx
import pytest
from daytona_toolbox_api_client import ApiClient
from daytona_toolbox_api_client.models import ErrorResponse, UploadFilesResponse

from emulator.server import EmulatorServer

API_ENVELOPE = {"path", "timestamp", "statusCode", "error", "message"}


@pytest.fixture
def client(server: EmulatorServer, api_key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)


def _error(response: httpx.Response, status: int) -> ErrorResponse:
    assert response.status_code == status, response.text
    parsed = ErrorResponse.from_json(response.text)
    assert parsed is not None and parsed.status_code == status
    assert parsed.path == response.request.url.path
    datetime.fromisoformat(parsed.timestamp.replace("Z", "+00:00"))  # a real instant, as JavaScript writes it
    return parsed


def _handshake(server: EmulatorServer, path: str, key: str) -> tuple[int, str]:
    """A WebSocket upgrade request to ``path`` with ``key``: the status and body of the denial."""
    upgrade = {
        "Authorization": f"Bearer {key}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    connection = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=30)
    try:
        connection.request("GET", path, headers=upgrade)
        denial = connection.getresponse()
        return denial.status, denial.read().decode()
    finally:
        connection.close()


def _sandbox(client: httpx.Client) -> str:
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _file_error(response: httpx.Response, status: int, code: str, message: str) -> ErrorResponse:
    """An error of a daemon's file handler: its envelope, with ``source`` and the code of the SDK 0.226's models."""
    parsed = _error(response, status)
    assert parsed.code is not None and (parsed.code.value, parsed.source) == (code, "DAYTONA_DAEMON")
    assert parsed.message == message and parsed.method == response.request.method
    assert response.headers["content-type"] == "application/json"
    return parsed


def test_the_daemons_own_errors_parse(client: httpx.Client) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    missing = _error(client.get(tb + "/files/info", params={"path": "nowhere.txt"}), 404)
    assert missing.code is not None and missing.code.value == "FILE_NOT_FOUND" and missing.method == "GET"
    assert client.post(tb + "/files/folder", params={"path": "d"}).status_code == 201
    _error(client.get(tb + "/files/download", params={"path": "d"}), 400)  # a directory is not a file
    assert client.post(tb + "/process/session", json={"sessionId": "s"}).status_code == 201
    _error(client.post(tb + "/process/session", json={"sessionId": "s"}), 409)
    unauthorized = client.get(tb + "/work-dir", headers={"Authorization": "Bearer wrong"})
    _error(unauthorized, 401)


def test_the_file_handlers_errors_are_the_daemons_envelope(client: httpx.Client) -> None:
    """The daemon that pairs with the SDK 0.226 hands each error of its file handlers to its error middleware: its
    envelope, 404 ``FILE_NOT_FOUND`` (``os.IsNotExist``), 400 ``BAD_REQUEST`` otherwise here, the message Go's error
    with the path as the client gave it. (The daemon at 8b6f9b14a answered the status alone, with no body.)"""
    tb = f"/toolbox/{_sandbox(client)}"
    assert client.post(tb + "/process/execute", json={"command": "mkdir d && printf x > f"}).json()["exitCode"] == 0
    gone, bad = "no such file or directory", "BAD_REQUEST"
    cases = [
        (client.get(tb + "/files/info", params={"path": "no.txt"}), 404, "FILE_NOT_FOUND", f"stat no.txt: {gone}"),
        (client.get(tb + "/files/info"), 400, bad, "path is required"),
        (client.get(tb + "/files/info", params={"path": "f/x"}), 400, bad, "stat f/x: not a directory"),
        (client.get(tb + "/files/download", params={"path": "d"}), 400, bad, "path must be a file"),
        (client.get(tb + "/files/download", params={"path": "no.txt"}), 404, "FILE_NOT_FOUND", f"stat no.txt: {gone}"),
        (client.get(tb + "/files/download"), 400, bad, "path is required"),
        (client.get(tb + "/files", params={"path": "nowhere"}), 404, "FILE_NOT_FOUND", f"open nowhere: {gone}"),
        (client.get(tb + "/files", params={"path": "f"}), 400, bad, "open f: not a directory"),
        (client.post(tb + "/files/folder"), 400, bad, "path is required"),
        (client.post(tb + "/files/folder", params={"path": "f"}), 400, bad, "mkdir f: not a directory"),
        (client.post(tb + "/files/folder", params={"path": "a\0b"}), 400, bad, "mkdir a\0b: invalid argument"),
        (client.delete(tb + "/files/", params={"path": "no.txt"}), 404, "FILE_NOT_FOUND", f"stat no.txt: {gone}"),
    ]
    for response, status, code, message in cases:
        _file_error(response, status, code, message)


@pytest.mark.parametrize("mode", ["abc", "0o755", "-1", "789", "7_5_5", "\u0667\u0665\u0665", "77777777777777"])
def test_a_bad_folder_mode_is_the_daemons_400(client: httpx.Client, server: EmulatorServer, mode: str) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    refused = client.post(tb + "/files/folder", params={"path": "d", "mode": mode})
    _file_error(refused, 400, "BAD_REQUEST", "invalid mode format")
    entry = server.emulator.journal.entries()[-1]
    assert entry.detail["daemon_error"] == "invalid mode format"  # the daemon's words, in the journal too
    assert client.post(tb + "/files/folder", params={"path": "d", "mode": "700"}).status_code == 201


def test_a_refused_bulk_upload_parses_as_its_400_model(client: httpx.Client) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    refused = client.post(tb + "/files/bulk-upload", files={"files[0].file": ("f.txt", b"abc")})  # no .path
    assert refused.status_code == 400, refused.text
    assert UploadFilesResponse.from_json(refused.text) is not None


def test_the_answers_typed_as_string_maps_deserialize(client: httpx.Client) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    api = ApiClient()
    version = client.get(tb + "/version")
    assert api.deserialize(version.text, "Dict[str, str]", "application/json")["version"]
    context = client.post(tb + "/process/interpreter/context", json={}).json()["id"]
    deleted = client.delete(f"{tb}/process/interpreter/context/{context}")
    assert deleted.status_code == 200
    assert isinstance(api.deserialize(deleted.text, "Dict[str, str]", "application/json"), dict)


@pytest.mark.parametrize("status", [400, 404, 409, 429, 500, 503])
def test_injected_statuses_on_toolbox_routes_parse(client: httpx.Client, server: EmulatorServer, status: int) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    server.emulator.set_faults({"rules": [{"route": "daytona.toolbox.execute", "fault": status}]})
    parsed = _error(client.post(tb + "/process/execute", json={"command": "echo a"}), status)
    assert parsed.method == "POST"


def test_a_limits_429_on_a_toolbox_route_parses(client: httpx.Client, server: EmulatorServer) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    limit = {"name": "toolbox", "route": "daytona.toolbox.*", "max_requests": 1, "per": 60, "headers_style": "daytona"}
    server.emulator.set_faults({"limits": [limit]})
    assert client.post(tb + "/process/execute", json={"command": "echo a"}).status_code == 200
    refused = _error(client.post(tb + "/process/execute", json={"command": "echo a"}), 429)
    assert refused.message == "ThrottlerException: Too Many Requests"


def test_a_plans_own_body_is_sent_as_written(client: httpx.Client, server: EmulatorServer) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    fault = {"status": 502, "body": '{"statusCode": 502}'}
    server.emulator.set_faults({"rules": [{"route": "daytona.toolbox.execute", "fault": fault}]})
    assert client.post(tb + "/process/execute", json={"command": "echo a"}).text == '{"statusCode": 502}'


@pytest.mark.parametrize("status", [404, 429, 503])
def test_injected_statuses_on_the_control_plane_carry_the_api_envelope(
    client: httpx.Client, server: EmulatorServer, status: int
) -> None:
    server.emulator.set_faults({"rules": [{"route": "daytona.sandbox.create", "fault": status}]})
    refused = client.post("/api/sandbox", json={})
    assert refused.status_code == status
    body = refused.json()
    assert set(body) == API_ENVELOPE and body["path"] == "/api/sandbox" and body["statusCode"] == status


def test_a_refused_interpreter_handshake_parses(server: EmulatorServer, api_key: str, client: httpx.Client) -> None:
    sid = _sandbox(client)
    server.emulator.set_faults({"rules": [{"route": "daytona.interpreter.execute", "fault": 503}]})
    path = f"/toolbox/{sid}/process/interpreter/execute"
    status, text = _handshake(server, path, api_key)
    assert status == 503
    parsed = ErrorResponse.from_json(text)
    assert parsed is not None and parsed.path == path and parsed.method == "GET"


def test_an_unexpected_error_gets_each_sides_envelope(
    client: httpx.Client, server: EmulatorServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug of the emulator's on a Daytona route is answered as the real side answers one it did not expect (never
    with Sandbox Fusion's traceback body), and its traceback goes to the log."""
    sid = _sandbox(client)
    service = server.emulator.daytona

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service.store, "get", broken)
    answer = client.get(f"/api/sandbox/{sid}")
    assert answer.status_code == 500
    body = answer.json()
    assert set(body) == API_ENVELOPE and body["message"] == "Internal server error"
    assert body["error"] == "Internal Server Error" and body["path"] == f"/api/sandbox/{sid}"
    monkeypatch.undo()

    async def broken_info(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service, "_tb_info_dispatch", broken_info)
    parsed = _error(client.get(f"/toolbox/{sid}/work-dir"), 500)
    assert parsed.message == "disk on fire" and parsed.method == "GET"
    assert parsed.code is not None and parsed.code.value == "INTERNAL_SERVER_ERROR"
    assert "traceback" not in client.get(f"/toolbox/{sid}/work-dir").text
    logged = [r for r in caplog.records if r.name == "emulator.daytona.service" and r.exc_info]
    assert [str(r.exc_info[1]) for r in logged if r.exc_info] == ["disk on fire"] * 3


def test_a_refused_key_is_answered_by_the_api_and_by_the_toolbox_proxy_as_each_does(
    server: EmulatorServer, api_key: str, client: httpx.Client
) -> None:
    """The API's guard says ``Invalid credentials`` in the API's envelope; a toolbox request is refused by the proxy
    in front of the daemon, in common-go's envelope (``code`` UNAUTHORIZED, no ``source``), with its message for a
    key it does not accept and for no key at all; the interpreter's handshake alike."""
    refused = client.get("/api/sandbox", headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401
    assert set(refused.json()) == API_ENVELOPE and refused.json()["message"] == "Invalid credentials"

    tb = f"/toolbox/{_sandbox(client)}"
    wrong = _error(client.get(tb + "/work-dir", headers={"Authorization": "Bearer wrong"}), 401)
    assert (wrong.message, wrong.method) == ("unauthorized: authentication failed: Bearer token is invalid", "GET")
    body = client.get(tb + "/work-dir", headers={"Authorization": "Bearer wrong"}).json()
    assert list(body) == ["statusCode", "message", "code", "timestamp", "path", "method"]
    assert body["code"] == "UNAUTHORIZED"
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        missing = _error(anonymous.post(tb + "/process/execute", json={"command": "true"}), 401)
    assert missing.message.startswith("unauthorized: missing authentication: provide a preview access token")
    assert missing.method == "POST"

    status, text = _handshake(server, f"{tb}/process/interpreter/execute", "wrong")
    assert status == 401
    handshake = ErrorResponse.from_json(text)
    assert handshake is not None and handshake.message == "unauthorized: authentication failed: Bearer token is invalid"
