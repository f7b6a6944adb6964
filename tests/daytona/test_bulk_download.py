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
from daytona_toolbox_api_client.models import ErrorResponse

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
        assert (error["path"], error["method"], error["source"]) == (path, "POST", "DAYTONA_DAEMON")
        datetime.fromisoformat(error["timestamp"].replace("Z", "+00:00"))


@pytest.mark.parametrize("body", [{"paths": []}, {}, {"paths": "f"}, [1]])
def test_a_body_without_paths_is_the_daemons_400(tb: tuple[httpx.Client, str], body: Any) -> None:
    """The SDK 0.226's client declares ``ErrorResponse`` for this 400: the later daemon's envelope, where the daemon
    at 8b6f9b14a answered ``{"error": ...}``."""
    client, prefix = tb
    answer = client.post(prefix + "/files/bulk-download", json=body)
    assert answer.status_code == 400
    refused = ErrorResponse.from_json(answer.text)
    assert refused is not None and refused.code is not None
    assert (refused.code.value, refused.source, refused.status_code) == ("BAD_REQUEST", "DAYTONA_DAEMON", 400)
    assert refused.message == 'request body must be {"paths": [ ... ]} and non-empty'


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
        assert details.source == "DAYTONA_DAEMON"
    finally:
        sandbox.delete()


def _raw_parts(response: httpx.Response) -> list[bytes]:
    """The parts of a bulk download as bytes, headers and payload, in order."""
    assert response.status_code == 200, response.text
    body = response.content
    assert body.startswith(b"--DAYTONA-FILE-BOUNDARY\r\n") and body.endswith(b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n")
    return body[len(b"--DAYTONA-FILE-BOUNDARY\r\n") : -len(b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n")].split(
        b"\r\n--DAYTONA-FILE-BOUNDARY\r\n"
    )


def test_an_error_part_is_gos_json_of_the_daemons_error_response(tb: tuple[httpx.Client, str]) -> None:
    """``json.Marshal`` of the daemon's ``ErrorResponse``: compact, in the struct's order, with the ``source`` of the
    daemon that pairs with the SDK 0.226 (the struct at 8b6f9b14a had none) after ``message``."""
    client, prefix = tb
    (part,) = _raw_parts(client.post(prefix + "/files/bulk-download", json={"paths": ["<missing>"]}))
    head, payload = part.split(b"\r\n\r\n", 1)
    assert head == (
        b'Content-Disposition: form-data; name="error"; filename="<missing>"; filename*=utf-8\'\'%3Cmissing%3E\r\n'
        b"Content-Type: application/json; charset=utf-8"
    )
    error = json.loads(payload)
    assert list(error) == ["statusCode", "message", "source", "code", "timestamp", "path", "method"]
    stamp = error.pop("timestamp")
    assert stamp.endswith("Z") and datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert payload == (
        b'{"statusCode":404,"message":"file not found: \\u003cmissing\\u003e","source":"DAYTONA_DAEMON",'
        b'"code":"FILE_NOT_FOUND","timestamp":"' + stamp.encode() + b'","path":"\\u003cmissing\\u003e","method":"POST"}'
    )


def test_a_file_part_is_typed_by_its_extension_and_sized(tb: tuple[httpx.Client, str]) -> None:
    """``mime.TypeByExtension`` (Go's own table: ``.json``, ``.HTML``, not ``.txt``), ``Content-Length``, the
    headers in the order of their names, and the path in Latin-1 and RFC 5987."""
    client, prefix = tb
    ran = client.post(
        prefix + "/process/execute", json={"command": "printf '{}' > a.json; printf x > b.HTML; : > 'c+é.txt'"}
    )
    assert ran.json()["exitCode"] == 0
    parts = _raw_parts(client.post(prefix + "/files/bulk-download", json={"paths": ["a.json", "b.HTML", "c+é.txt"]}))
    heads = [part.split(b"\r\n\r\n", 1)[0].split(b"\r\n") for part in parts]
    assert [head[1:] for head in heads] == [
        [b"Content-Length: 2", b"Content-Type: application/json"],
        [b"Content-Length: 1", b"Content-Type: text/html; charset=utf-8"],
        [b"Content-Length: 0", b"Content-Type: application/octet-stream"],
    ]
    assert (
        heads[2][0]
        == b'Content-Disposition: form-data; name="file"; filename="c+\xe9.txt"; filename*=utf-8\'\'c+%C3%A9.txt'
    )


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        (b'{"Paths": ["f"]}', ["f"]),  # Go matches a field's name without regard to case
        (b'{"paths": ["f"]} and then anything', ["f"]),  # BindJSON decodes the first value and reads no further
        (b'{"paths": null, "PATHS": ["f", null]}', ["f", ""]),  # the last wins; a null string is empty
    ],
)
def test_the_body_is_bound_as_gos_decoder_binds_it(tb: tuple[httpx.Client, str], body: bytes, paths: list[str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/files/bulk-download", content=body, headers={"Content-Type": "application/json"})
    assert [filename for _, filename, _ in _parts(answer)] == paths


def test_a_body_with_nan_is_refused_as_go_refuses_it(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/files/bulk-download", content=b'{"paths": ["f"], "x": NaN}')
    assert (answer.status_code, answer.json()["code"]) == (400, "BAD_REQUEST")


def test_a_nul_in_a_path_is_gos_open_error(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    ((name, filename, error),) = _parts(client.post(prefix + "/files/bulk-download", json={"paths": ["a\0b"]}))
    assert (name, filename) == ("error", "ab")  # toLatin1 drops a NUL from the quoted name
    assert (error["statusCode"], error["code"]) == (500, "FILE_READ_FAILED")
    assert error["message"] == "failed to open file: open a\0b: invalid argument"


def test_the_sdk_raises_its_file_not_found_class_for_a_missing_file(api_url: str, api_key: str) -> None:
    """The error part carries ``code`` and ``source``, so the SDK's ``(source, code)`` map applies:
    ``download_file`` (a bulk download of one path) raises ``DaytonaFileNotFoundError``."""
    from daytona.common.errors import DaytonaFileNotFoundError

    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        with pytest.raises(DaytonaFileNotFoundError) as missing:
            sandbox.fs.download_file("missing")
        assert str(missing.value) == "Failed to download file: file not found: missing"
        assert (missing.value.code, missing.value.source) == ("FILE_NOT_FOUND", "DAYTONA_DAEMON")
    finally:
        sandbox.delete()
