"""The file routes the SDK (0.226) calls beyond upload, download, listing, info, folder and delete, answered as the
daemon's handlers at 8b6f9b14a answer them (``fs/find_in_files.go``, ``search_files.go``, ``replace_in_files.go``,
``move_file.go``, ``set_file_permissions.go``), each error in the envelope of the daemon that pairs with the SDK
0.226, as every other file handler's (``BAD_REQUEST``, ``FILE_NOT_FOUND``, ``FILE_ACCESS_DENIED``, ``CONFLICT``,
``INVALID_REQUEST_BODY``); ``find`` and ``search`` walk as Go's ``filepath.Walk`` walks (links not followed, names
in byte order, any error passed over) and ``search`` matches as ``filepath.Match`` does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from daytona import Daytona, DaytonaConfig
from daytona.common.errors import (
    DaytonaBadRequestError,
    DaytonaConflictError,
    DaytonaFileAccessDeniedError,
    DaytonaFileNotFoundError,
)


def _run(tb: tuple[httpx.Client, str], command: str) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": command})
    assert answer.json()["exitCode"] == 0, answer.text


def _refused(response: httpx.Response, status: int, code: str, message: str) -> None:
    """The daemon's envelope for a file handler's error, ``source`` and the SDK 0.226's code with it."""
    assert response.status_code == status, response.text
    body = response.json()
    assert (body["statusCode"], body["code"], body["source"]) == (status, code, "DAYTONA_DAEMON")
    assert (body["message"], body["method"]) == (message, response.request.method)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    return response.json()


TREE = (
    "mkdir -p src/sub && printf 'a TODO\\nb\\r\\nTODO c\\r' > src/x.py && printf TODO > src/sub/y.txt"
    " && printf 'TO\\0DO TODO' > src/bin && : > src/empty && ln -s x.py src/link.py && ln -s sub src/dirlink"
)


def test_find_walks_as_go_walks_and_reads_lines_as_its_scanner(tb: tuple[httpx.Client, str]) -> None:
    """Depth first in name order; a binary file (a NUL in its first 512 bytes), a link and an empty file passed
    over; a line's ``\\r`` at its end dropped (the last line's too, without a ``\\n``); line numbers from 1."""
    client, prefix = tb
    _run(tb, TREE)
    found = _ok(client.get(prefix + "/files/find", params={"path": "src", "pattern": "TODO"}))
    assert found == [
        {"file": "src/sub/y.txt", "line": 1, "content": "TODO"},
        {"file": "src/x.py", "line": 1, "content": "a TODO"},
        {"file": "src/x.py", "line": 3, "content": "TODO c"},
    ]
    assert _ok(client.get(prefix + "/files/find", params={"path": "./src/x.py", "pattern": "b"})) == [
        {"file": "./src/x.py", "line": 2, "content": "b"}  # the root as given, not cleaned
    ]
    assert _ok(client.get(prefix + "/files/find", params={"path": "nowhere", "pattern": "TODO"})) == []
    assert _ok(client.get(prefix + "/files/find", params={"path": "src/link.py", "pattern": "TODO"})) == []
    refused = client.get(prefix + "/files/find", params={"path": "src"})
    _refused(refused, 400, "BAD_REQUEST", "path and pattern are required")


def test_a_line_past_the_scanners_buffer_ends_its_file(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    _run(tb, "{ echo 'x 1'; head -c 70000 /dev/zero | tr '\\0' a; echo; echo 'x 3'; } > long.txt")
    assert _ok(client.get(prefix + "/files/find", params={"path": "long.txt", "pattern": "x"})) == [
        {"file": "long.txt", "line": 1, "content": "x 1"}
    ]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("*.py", ["src/link.py", "src/x.py"]),  # a link is a name like any other
        ("[^x]*", ["src", "src/bin", "src/dirlink", "src/empty", "src/link.py", "src/sub", "src/sub/y.txt"]),
        ("s?b", ["src/sub"]),
        ("\\x.py", ["src/x.py"]),  # a backslash escapes
        ("[", []),  # a malformed pattern matches nothing
        ("[!x]*", ["src/x.py"]),  # Go negates with ^ only: ! is a character of the class, as x is
    ],
)
def test_search_matches_names_as_go_filepath_match(
    tb: tuple[httpx.Client, str], pattern: str, expected: list[str]
) -> None:
    client, prefix = tb
    _run(tb, TREE)
    assert _ok(client.get(prefix + "/files/search", params={"path": "src", "pattern": pattern})) == {"files": expected}


def test_search_of_a_path_that_is_not_there_is_no_files(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    assert _ok(client.get(prefix + "/files/search", params={"path": "nowhere", "pattern": "*"})) == {"files": []}
    refused = client.get(prefix + "/files/search", params={"pattern": "*"})
    _refused(refused, 400, "BAD_REQUEST", "path and pattern are required")


def test_replace_writes_each_file_and_names_what_failed(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    _run(tb, TREE)
    body = {"files": ["src/x.py", "nowhere", "src", None], "pattern": "TODO", "newValue": ""}
    assert _ok(client.post(prefix + "/files/replace", json=body)) == [
        {"file": "src/x.py", "success": True},
        {"file": "nowhere", "success": False, "error": "open nowhere: no such file or directory"},
        {"file": "src", "success": False, "error": "read src: is a directory"},
        {"file": "", "success": False, "error": "open : no such file or directory"},
    ]
    assert client.get(prefix + "/files/download", params={"path": "src/x.py"}).content == b"a \nb\r\n c\r"


REQUIRED = "invalid request body: Key: 'ReplaceRequest' Error: failed on the 'required' tag"
UNMARSHAL = "invalid request body: json: cannot unmarshal into ReplaceRequest"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"files": ["a"], "pattern": "x"}, REQUIRED),  # newValue is required (a pointer: "" is fine, absent is not)
        ({"files": ["a"], "pattern": "", "newValue": "y"}, REQUIRED),
        ({"pattern": "x", "newValue": "y"}, REQUIRED),
        ({"files": "a", "pattern": "x", "newValue": "y"}, UNMARSHAL),
        ([1], UNMARSHAL),
    ],
)
def test_a_replace_body_that_does_not_bind_is_a_400(tb: tuple[httpx.Client, str], body: Any, message: str) -> None:
    client, prefix = tb
    _refused(client.post(prefix + "/files/replace", json=body), 400, "INVALID_REQUEST_BODY", message)


def test_move_renames_and_refuses_as_the_daemon(tb: tuple[httpx.Client, str]) -> None:
    """200 with no body; a source that is not there 404, a destination's directory that is not there 404, a
    destination that is there 409; the home itself cannot be moved."""
    client, prefix = tb
    _run(tb, TREE)
    moved = client.post(prefix + "/files/move", params={"source": "src/x.py", "destination": "src/z.py"})
    assert (moved.status_code, moved.content, moved.headers.get("content-type")) == (200, b"", None)
    assert client.get(prefix + "/files/info", params={"path": "src/z.py"}).status_code == 200
    gone, bad = "no such file or directory", "BAD_REQUEST"
    for params, status, code, message in (
        ({"source": "src/z.py"}, 400, bad, "source and destination paths are required"),
        ({"source": "nowhere", "destination": "a"}, 404, "FILE_NOT_FOUND", f"stat nowhere: {gone}"),
        ({"source": "src/z.py", "destination": "no/where"}, 404, "FILE_NOT_FOUND", f"stat no: {gone}"),
        ({"source": "src/z.py", "destination": "src/bin"}, 409, "CONFLICT", "destination already exists"),
        (
            {"source": ".", "destination": "/tmp/home"},
            400,
            bad,
            "failed to move file: rename . /tmp/home: permission denied",
        ),
        (
            {"source": "/home/daytona", "destination": "/tmp/h"},
            400,
            bad,
            "failed to move file: rename /home/daytona /tmp/h: permission denied",
        ),
    ):
        _refused(client.post(prefix + "/files/move", params=params), status, code, message)
    assert client.post(prefix + "/process/execute", json={"command": "ls src"}).json()["exitCode"] == 0


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        ("644", "-rw-r--r--"),
        ("4755", "-rwxr-xr-x"),  # 0o4000 is no Go file mode bit: os.Chmod drops it
        ("40000755", "urwxr-xr-x"),  # Go's ModeSetuid (1 << 23) is set-user-ID
        ("4000755", "trwxr-xr-x"),  # Go's ModeSticky (1 << 20)
    ],
)
def test_permissions_apply_a_go_file_mode(tb: tuple[httpx.Client, str], mode: str, shown: str) -> None:
    client, prefix = tb
    _run(tb, "touch f")
    changed = client.post(prefix + "/files/permissions", params={"path": "f", "mode": mode})
    assert (changed.status_code, changed.content) == (200, b"")
    assert client.get(prefix + "/files/info", params={"path": "f"}).json()["mode"] == shown


def test_permissions_refuse_as_the_daemon(tb: tuple[httpx.Client, str]) -> None:
    """The daemon runs as the sandbox's user: a chown to its own user or group changes nothing, one to root is its
    EPERM, which the later daemon classifies as ``FILE_ACCESS_DENIED`` (403); a name the image does not know or a
    mode that is no octal number is 400, a path that is not there 404."""
    client, prefix = tb
    _run(tb, "touch f")
    ok = client.post(prefix + "/files/permissions", params={"path": "f", "owner": "daytona", "group": "1000"})
    assert ok.status_code == 200
    denied, bad = "failed to change ownership for f: chown f: operation not permitted", "BAD_REQUEST"
    for params, status, code, message in (
        ({"path": "f", "owner": "root"}, 403, "FILE_ACCESS_DENIED", denied),
        ({"path": "f", "group": "0"}, 403, "FILE_ACCESS_DENIED", denied),
        ({"path": "f", "owner": "nobody-here"}, 400, bad, "user not found"),
        ({"path": "f", "mode": "rwx"}, 400, bad, "invalid mode format"),
        ({"path": "nowhere", "mode": "644"}, 404, "FILE_NOT_FOUND", "stat nowhere: no such file or directory"),
        ({"mode": "644"}, 400, bad, "path is required"),
    ):
        _refused(client.post(prefix + "/files/permissions", params=params), status, code, message)


@pytest.fixture
def sdk_sandbox(api_url: str, api_key: str) -> Iterator[Any]:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    yield sandbox
    daytona.delete(sandbox)


def test_the_sdk_reaches_each_route(sdk_sandbox: Any) -> None:
    """Each of these answered 404 ``{"detail": "Not Found"}`` before; the SDK's methods now do what they say, and
    its errors are the classes its ``(source, code)`` map names (``CONFLICT`` has none: the status class)."""
    sandbox = sdk_sandbox
    sandbox.process.exec("mkdir -p src && printf 'a TODO\\n' > src/x.py")
    assert [(m.file, m.line, m.content) for m in sandbox.fs.find_files("src", "TODO")] == [("src/x.py", 1, "a TODO")]
    assert sandbox.fs.search_files("src", "*.py").files == ["src/x.py"]
    (result,) = sandbox.fs.replace_in_files(["src/x.py"], "TODO", "DONE")
    assert (result.file, result.success, result.error) == ("src/x.py", True, None)
    sandbox.fs.move_files("src/x.py", "src/y.py")
    assert sandbox.fs.download_file("src/y.py") == b"a DONE\n"
    sandbox.fs.set_file_permissions("src/y.py", mode="700")
    assert sandbox.fs.get_file_info("src/y.py").permissions == "0700"
    with pytest.raises(DaytonaConflictError):
        sandbox.fs.move_files("src/y.py", "src/y.py")
    with pytest.raises(DaytonaFileNotFoundError):
        sandbox.fs.move_files("src/x.py", "src/z.py")
    with pytest.raises(DaytonaFileAccessDeniedError) as denied:
        sandbox.fs.set_file_permissions("src/y.py", owner="root")
    chown = "failed to change ownership for src/y.py: chown src/y.py: operation not permitted"
    assert denied.value.message == "Failed to set file permissions: " + chown
    with pytest.raises(DaytonaBadRequestError) as refused:
        sandbox.fs.set_file_permissions("src/y.py", mode="rwx")
    assert refused.value.message == "Failed to set file permissions: invalid mode format"


@pytest.mark.parametrize(
    ("name", "method", "route", "params"),
    [
        ("find_in_files", "GET", "/files/find", {"path": ".", "pattern": "x"}),
        ("search_files", "GET", "/files/search", {"path": ".", "pattern": "*"}),
        ("list_files", "GET", "/files", {"path": "."}),
    ],
)
def test_a_long_walk_holds_up_no_other_request(
    tb: tuple[httpx.Client, str],
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    method: str,
    route: str,
    params: dict[str, str],
) -> None:
    """A walk of a big tree runs in a worker thread: while one is under way (held here on an event), the server
    answers other requests."""
    import threading

    from emulator.daytona import file_routes

    client, prefix = tb
    entered, release = threading.Event(), threading.Event()
    walk = getattr(file_routes, name)

    def held_walk(*args: Any) -> Any:
        entered.set()
        release.wait(timeout=60)
        return walk(*args)

    monkeypatch.setattr(file_routes, name, held_walk)
    answers: list[httpx.Response] = []
    slow = threading.Thread(target=lambda: answers.append(client.request(method, prefix + route, params=params)))
    slow.start()
    try:
        assert entered.wait(timeout=30)
        with httpx.Client(base_url=str(client.base_url), headers={"Authorization": f"Bearer {api_key}"}) as other:
            assert other.get(prefix + "/work-dir", timeout=10).status_code == 200  # answered meanwhile
    finally:
        release.set()
        slow.join(timeout=60)
    [answer] = answers
    assert answer.status_code == 200, answer.text
