"""``/files/bulk-download`` as the daemon's ``DownloadFiles`` (v0.190): its fixed boundary, one ``file`` part per
readable path, and for the others an ``error`` part holding its ``ErrorResponse``, classified as it classifies the
error; a body without paths is its own 400."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx
import pytest
from daytona import Daytona, DaytonaConfig, FileDownloadRequest

from emulator.daytona.files import parse_multipart
from emulator.server import EmulatorServer


@pytest.fixture
def tb(server: EmulatorServer, api_key: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    ran = client.post(f"/toolbox/{sid}/process/execute", json={"command": "mkdir d && printf abc > f"})
    assert ran.json()["exitCode"] == 0
    return client, f"/toolbox/{sid}"


def _parts(response: httpx.Response) -> list[tuple[str, str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    parts = []
    for headers, payload in parse_multipart(response.content, response.headers["content-type"]):
        name, filename = headers.get("name", ""), headers.get("filename", "")
        parts.append((name, filename, json.loads(payload) if name == "error" else payload))
    return parts


def test_each_path_is_a_file_or_the_daemons_error(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    paths = ["f", "missing", "d", "", "f/x"]
    parts = _parts(client.post(prefix + "/files/bulk-download", json={"paths": paths}))
    assert [(name, filename) for name, filename, _ in parts] == [
        ("file", "f"),
        ("error", "missing"),
        ("error", "d"),
        ("error", ""),
        ("error", "f/x"),
    ]
    assert parts[0][2] == b"abc"
    errors = [payload for name, _, payload in parts if name == "error"]
    assert [(e["statusCode"], e["code"], e["message"]) for e in errors] == [
        (404, "FILE_NOT_FOUND", "file not found: missing"),
        (400, "INVALID_FILE_PATH", "invalid file path: path points to a directory: d"),
        (400, "INVALID_FILE_PATH", "invalid file path: path is empty"),
        (500, "FILE_READ_FAILED", "failed to open file: open f/x: not a directory"),
    ]
    for error, path in zip(errors, paths[1:], strict=True):
        assert (error["path"], error["method"]) == (path, "POST")
        datetime.fromisoformat(error["timestamp"].replace("Z", "+00:00"))


@pytest.mark.parametrize("body", [{"paths": []}, {}, {"paths": "f"}, [1]])
def test_a_body_without_paths_is_the_daemons_400(tb: tuple[httpx.Client, str], body: Any) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/files/bulk-download", json=body)
    assert answer.status_code == 400
    assert answer.json() == {"error": 'request body must be {"paths": [ ... ]} and non-empty'}


def test_the_sdk_reads_the_errors_details(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        sandbox.process.exec("printf abc > f")
        got = sandbox.fs.download_files([FileDownloadRequest(source="f"), FileDownloadRequest(source="missing")])
        assert got[0].result == b"abc" and got[0].error is None
        assert got[1].error == "file not found: missing"
        details = got[1].error_details
        assert details is not None and (details.status_code, details.code) == (404, "FILE_NOT_FOUND")
    finally:
        sandbox.delete()
