"""Inputs a client can send that the emulator once answered with a crash, a dropped connection or a 500: each gets
the answer the real service gives (or a 400 where its body would not unmarshal)."""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import httpx
import pytest

from emulator.server import EmulatorServer


@pytest.fixture
def client(server: EmulatorServer, api_key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)


def _used(frame: dict[str, Any]) -> dict[str, Any]:
    """A frame without the fields the daemon sends empty (every frame has all five)."""
    return {key: value for key, value in frame.items() if value != "" or key in ("type", "text")}


def _sandbox(client: httpx.Client) -> str:
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


async def _frames(server: EmulatorServer, api_key: str, sid: str, request: Any, binary: bool = False) -> list[Any]:
    """Every frame of one interpreter run, then the close code."""
    url = server.url.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"
    headers = {"Authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession() as session, session.ws_connect(url, headers=headers) as ws:
        payload = json.dumps(request)
        await (ws.send_bytes(payload.encode()) if binary else ws.send_str(payload))
        frames: list[Any] = [_used(json.loads(m.data)) async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
        frames.append(ws.close_code)
    return frames


def test_an_env_name_the_environment_cannot_hold_is_the_runs_error(
    client: httpx.Client, server: EmulatorServer, api_key: str
) -> None:
    sid = _sandbox(client)

    async def scenario() -> list[list[Any]]:
        return [
            await _frames(server, api_key, sid, {"code": "x = 41"}),
            await _frames(server, api_key, sid, {"code": "print(0)", "envs": {"BAD\u0000": "1"}}),
            await _frames(server, api_key, sid, {"code": "print(x + 1)"}),
        ]

    _, bad, after = asyncio.run(scenario())
    errors = [f for f in bad if isinstance(f, dict) and f.get("type") == "error"]
    assert [e["name"] for e in errors] == ["ValueError"] and bad[-1] == 1000
    assert "interp_driver" not in json.dumps(bad)  # the emulator's own code is not shown
    assert {"type": "stdout", "text": "42\n"} in after  # the context and its variables survived


def test_a_binary_frame_and_a_lone_surrogate_run(client: httpx.Client, server: EmulatorServer, api_key: str) -> None:
    sid = _sandbox(client)
    binary = asyncio.run(_frames(server, api_key, sid, {"code": "print(2)"}, binary=True))
    assert {"type": "stdout", "text": "2\n"} in binary and binary[-1] == 1000
    # Go's decoder reads a lone surrogate escape as U+FFFD
    surrogate = asyncio.run(_frames(server, api_key, sid, {"code": "s = '\ud800'\nprint(hex(ord(s)))"}))
    assert {"type": "stdout", "text": "0xfffd\n"} in surrogate and surrogate[-1] == 1000


@pytest.mark.parametrize(
    ("timeout", "said"),
    [
        # not JSON at all: Go's scanner stops at the letter
        ("NaN", "invalid character 'N' looking for beginning of value"),
        ("Infinity", "invalid character 'I' looking for beginning of value"),
        ("1e308", "timeout"),
        ("1.5", "timeout"),
        ('"10"', "timeout"),
        ("true", "timeout"),
    ],
)
def test_a_toolbox_timeout_that_is_no_integer_is_a_400(client: httpx.Client, timeout: str, said: str) -> None:
    sid = _sandbox(client)
    body = '{"command": "echo hi", "timeout": %s}' % timeout  # noqa: UP031 (raw JSON tokens, NaN included)
    answer = client.post(f"/toolbox/{sid}/process/execute", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "BAD_REQUEST" and said in answer.json()["message"]
    fine = client.post(f"/toolbox/{sid}/process/execute", json={"command": "echo hi", "timeout": 5})
    assert fine.status_code == 200 and fine.json()["result"] == "hi\n"


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu", "NaN"), ("memory", "Infinity"), ("disk", "1.5"), ("cpu", "-5"), ("gpu", "-1"), ("cpu", "1e308")],
)
def test_a_resource_that_is_no_sensible_integer_is_a_400(client: httpx.Client, field: str, value: str) -> None:
    body = '{"%s": %s}' % (field, value)  # noqa: UP031
    answer = client.post("/api/sandbox", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["message"]


@pytest.mark.parametrize(("which", "raw", "status"), [("autostop", "-1", 400), ("autostop", "\u0663", 500)])
def test_an_interval_in_the_path_is_checked_as_the_api_checks_it(
    client: httpx.Client, which: str, raw: str, status: int
) -> None:
    """A negative auto-stop is the service's 400; what JavaScript's ``Number`` makes NaN (an Arabic-Indic digit)
    passes the API's pipe and fails in its database (500)."""
    sid = _sandbox(client)
    assert client.post(f"/api/sandbox/{sid}/{which}/{raw}").status_code == status
    assert client.post(f"/api/sandbox/{sid}/autodelete/-1").status_code == 201  # never: a value autodelete takes
    assert client.post(f"/api/sandbox/{sid}/autostop/0").status_code == 201


def test_a_command_over_the_kernels_argument_limit_runs(client: httpx.Client) -> None:
    """The daemon feeds its shell the command on stdin, so a command of 300 KiB runs; passed as one argument (``-c``)
    the kernel refuses any over 128 KiB."""
    sid = _sandbox(client)
    payload = "a" * (300 * 1024)
    command = f"x='{payload}'\necho ${{#x}}"
    executed = client.post(f"/toolbox/{sid}/process/execute", json={"command": command})
    assert executed.status_code == 200, executed.text
    assert executed.json() == {"exitCode": 0, "result": f"{len(payload)}\n"}
    assert client.post(f"/toolbox/{sid}/process/session", json={"sessionId": "s"}).status_code in (200, 201)
    in_session = client.post(f"/toolbox/{sid}/process/session/s/exec", json={"command": command})
    assert in_session.status_code == 200, in_session.text
    assert (in_session.json()["exitCode"], in_session.json()["output"]) == (0, f"{len(payload)}\n")


def test_a_lone_surrogate_in_a_toolbox_body_is_decoded_as_go_decodes_it(client: httpx.Client) -> None:
    sid = _sandbox(client)
    body = b'{"command": "printf %s \\"a\\ud800b\\""}'  # an escape JSON allows and UTF-8 cannot hold
    executed = client.post(f"/toolbox/{sid}/process/execute", content=body)
    assert executed.status_code == 200, executed.text
    assert executed.json() == {"exitCode": 0, "result": "a\ufffdb"}


def _multipart(boundary: str, parts: list[tuple[str, bytes]], close: bool = True) -> bytes:
    body = b""
    for name, payload in parts:
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + payload + b"\r\n"
    return body + (f"--{boundary}--\r\n".encode() if close else b"")


def test_an_upload_whose_payload_holds_the_boundary_is_stored_whole(client: httpx.Client) -> None:
    """The boundary's bytes inside a payload, not at the start of a line, are payload (RFC 2046)."""
    sid = _sandbox(client)
    boundary = "b0undary"
    data = b"before --b0undary after\n--b0undaryX\nend"
    body = _multipart(boundary, [("files[0].path", b"kept.bin"), ("files[0].file", data)])
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    uploaded = client.post(f"/toolbox/{sid}/files/bulk-upload", content=body, headers=headers)
    assert uploaded.status_code == 200, uploaded.text
    assert client.get(f"/toolbox/{sid}/files/download", params={"path": "kept.bin"}).content == data


@pytest.mark.parametrize(("tail", "kept"), [(b"", b"0123456"), (b"0123456789\r\n--c", b"0123456789")])
def test_an_upload_cut_short_keeps_what_came(client: httpx.Client, tail: bytes, kept: bytes) -> None:
    """No close delimiter: the daemon writes a file as Go's reader yields it, so the cut file holds what came (less
    a tail that could begin a delimiter, which the reader holds back), and the answer is a 400 naming the cut and
    the reader's end, with ``files`` null (none was written whole)."""
    sid = _sandbox(client)
    boundary = "cut"
    body = _multipart(boundary, [("files[0].path", b"cut.bin"), ("files[0].file", b"0123456789")], close=False)
    body = body[:-5] if not tail else body[: body.rindex(b"0123456789")] + tail  # the connection dropped
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    uploaded = client.post(f"/toolbox/{sid}/files/bulk-upload", content=body, headers=headers)
    assert uploaded.status_code == 400, uploaded.text
    assert uploaded.json() == {
        "errors": ["cut.bin: write: unexpected EOF", "reading part: multipart: NextPart: EOF"],
        "files": None,
    }
    assert client.get(f"/toolbox/{sid}/files/download", params={"path": "cut.bin"}).content == kept


def test_a_path_deeper_than_pythons_recursion_limit_is_made(client: httpx.Client) -> None:
    sid = _sandbox(client)
    deep = "/".join(["d"] * 1500)  # 3,000 bytes: within PATH_MAX, far past the 1,000 frames os.makedirs would take
    made = client.post(f"/toolbox/{sid}/files/folder", params={"path": deep, "mode": "750"})
    assert made.status_code in (200, 201), made.text
    info = client.get(f"/toolbox/{sid}/files/info", params={"path": deep})
    assert info.status_code == 200 and info.json()["isDir"] and info.json()["permissions"] == "0750"
    body = _multipart("deep", [("files[0].path", f"{deep}/e/f.txt".encode()), ("files[0].file", b"deep")])
    headers = {"Content-Type": "multipart/form-data; boundary=deep"}
    uploaded = client.post(f"/toolbox/{sid}/files/bulk-upload", content=body, headers=headers)
    assert uploaded.status_code == 200, uploaded.text
    assert client.get(f"/toolbox/{sid}/files/download", params={"path": f"{deep}/e/f.txt"}).content == b"deep"


def test_a_tree_nested_past_path_max_by_a_program_goes_with_its_sandbox(
    client: httpx.Client, server: EmulatorServer, api_key: str
) -> None:
    """A program nests 3,000 directories in the home (past PATH_MAX and Python's recursion limit): the next run's
    hand-over of the home and the sandbox's deletion both walk it to the bottom."""
    sid = _sandbox(client)
    sandbox = server.emulator.daytona.store.get(sid)
    nest = "import os\nfor _ in range(3000):\n    os.mkdir('n')\n    os.chdir('n')\nopen('leaf', 'w').write('x')\n"

    nested = asyncio.run(_frames(server, api_key, sid, {"code": nest}))
    assert not [f for f in nested if isinstance(f, dict) and f.get("type") == "error"], nested
    after = client.post(f"/toolbox/{sid}/process/execute", json={"command": "test -d n && echo handed over"})
    assert after.status_code == 200 and after.json() == {"exitCode": 0, "result": "handed over\n"}, after.text
    root = sandbox.root
    assert client.delete(f"/api/sandbox/{sid}").status_code == 200
    assert not os.path.lexists(root)


def test_delete_answers_as_the_daemon_does(client: httpx.Client) -> None:
    """``DELETE /files``: no path is a 400; a missing path a 404 ``FILE_NOT_FOUND``; any directory, even an empty
    one, needs ``recursive=true`` (compared as given, as the daemon does), each refusal in the daemon's envelope."""
    sid = _sandbox(client)
    tb = f"/toolbox/{sid}"
    assert client.post(tb + "/files/folder", params={"path": "empty"}).status_code in (200, 201)
    missing = client.delete(tb + "/files/", params={"path": "nothing-here"})
    assert (missing.status_code, missing.json()["code"]) == (404, "FILE_NOT_FOUND")
    assert missing.json()["message"] == "stat nothing-here: no such file or directory"
    refused = client.delete(tb + "/files/", params={"path": ""})
    assert (refused.status_code, refused.json()["message"]) == (400, "path is required")
    for flag in (None, "True", "1"):
        params = {"path": "empty"} if flag is None else {"path": "empty", "recursive": flag}
        refused = client.delete(tb + "/files/", params=params)
        assert (refused.status_code, refused.json()["code"]) == (400, "BAD_REQUEST")
        assert refused.json()["message"] == "cannot delete directory without recursive flag"
    assert client.delete(tb + "/files/", params={"path": "empty", "recursive": "true"}).status_code == 204
    assert client.get(tb + "/files/info", params={"path": "empty"}).status_code == 404


def test_delete_lives_at_files_slash_and_files_redirects_there(
    client: httpx.Client, server: EmulatorServer, api_key: str
) -> None:
    """The daemon registers ``DELETE /files/`` and ``GET`` at both ``/files`` and ``/files/``: gin answers
    ``DELETE /files`` with a 307 to ``/files/`` (query kept, the proxy's ``/toolbox/<id>`` before it, no body),
    which the SDK's client follows."""
    sid = _sandbox(client)
    tb = f"/toolbox/{sid}"
    assert client.post(tb + "/process/execute", json={"command": "touch a b"}).json()["exitCode"] == 0
    moved = client.delete(tb + "/files", params={"path": "a", "recursive": "true"})
    assert (moved.status_code, moved.content) == (307, b"")
    assert moved.headers["location"] == f"{tb}/files/?path=a&recursive=true"
    assert client.get(tb + "/files/info", params={"path": "a"}).status_code == 200  # nothing deleted yet
    assert [e["name"] for e in client.get(tb + "/files/", params={"path": "."}).json()] == ["a", "b"]
    from daytona import Daytona, DaytonaConfig

    daytona = Daytona(DaytonaConfig(api_url=server.url + "/api", api_key=api_key))
    sandbox = daytona.get(sid)
    sandbox.fs.delete_file("a")
    assert client.get(tb + "/files/info", params={"path": "a"}).status_code == 404
    entries = server.emulator.journal.entries("daytona.toolbox.files.delete")
    assert [(e.path.rsplit("/toolbox/", 1)[1].split("/", 1)[1], e.status) for e in entries[-2:]] == [
        ("files", 307),
        ("files/", 204),
    ]


@pytest.mark.parametrize("path", ["/home/daytona", "/"])
def test_a_recursive_delete_of_the_home_empties_it_and_keeps_it(client: httpx.Client, path: str) -> None:
    """``os.RemoveAll`` of the home (or ``/``) removes what is inside, then fails at the last rmdir (the daemon's
    user may not change the parent): 400. The home stays, so the sandbox still runs (it was removed here)."""
    tb = f"/toolbox/{_sandbox(client)}"
    assert client.post(tb + "/process/execute", json={"command": "mkdir d && touch d/f e"}).json()["exitCode"] == 0
    assert client.post(tb + "/files/folder", params={"path": "/tmp/t"}).status_code == 201
    refused = client.delete(tb + "/files/", params={"path": path, "recursive": "true"})
    assert (refused.status_code, refused.json()["message"]) == (400, f"unlinkat {path}: permission denied")
    home = [entry["name"] for entry in client.get(tb + "/files/", params={"path": "."}).json()]
    tmp = client.get(tb + "/files/", params={"path": "/tmp"}).status_code
    assert (home, tmp) == ((["d", "e"], 404) if path == "/" else ([], 200))
    assert client.post(tb + "/process/execute", json={"command": "touch again"}).json()["exitCode"] == 0


def test_a_link_to_the_home_is_deleted_as_a_link(client: httpx.Client) -> None:
    tb = f"/toolbox/{_sandbox(client)}"
    assert client.post(tb + "/process/execute", json={"command": "touch e && ln -s . here"}).json()["exitCode"] == 0
    assert client.delete(tb + "/files/", params={"path": "here", "recursive": "true"}).status_code == 204
    assert [entry["name"] for entry in client.get(tb + "/files/", params={"path": "."}).json()] == ["e"]


def test_a_tilde_is_a_name_and_root_is_not_the_users_home(client: httpx.Client) -> None:
    """The daemon's Go never expands ``~`` (``~/a.txt`` is a file in a directory named ``~``), and ``/root`` is
    root's home, not the sandbox user's."""
    tb = f"/toolbox/{_sandbox(client)}"
    assert client.post(tb + "/process/execute", json={"command": "touch a.txt"}).json()["exitCode"] == 0
    assert client.get(tb + "/files/info", params={"path": "~/a.txt"}).status_code == 404
    assert client.get(tb + "/files/info", params={"path": "/root/a.txt"}).status_code == 404
    assert client.get(tb + "/files/info", params={"path": "/root"}).status_code == 404
    uploaded = client.post(
        tb + "/files/bulk-upload", files={"files[0].path": (None, "~/b.txt"), "files[0].file": ("b", b"x")}
    )
    assert uploaded.status_code == 200, uploaded.text
    listed = client.post(tb + "/process/execute", json={"command": "ls -d '~'/b.txt"})
    assert listed.json() == {"exitCode": 0, "result": "~/b.txt\n"}


@pytest.mark.parametrize("path", [".", "d/.", "./."])
def test_a_recursive_delete_of_a_path_ending_in_dot_removes_nothing(client: httpx.Client, path: str) -> None:
    """Go's ``os.RemoveAll`` refuses a path that ends in ``.`` (EINVAL, as rmdir(2) refuses ``.``): the daemon
    answers 400 and everything stays. Resolved as a path, ``d/.`` is ``d``, and ``.`` the home itself."""
    tb = f"/toolbox/{_sandbox(client)}"
    assert client.post(tb + "/process/execute", json={"command": "mkdir d && touch d/f"}).json()["exitCode"] == 0
    refused = client.delete(tb + "/files/", params={"path": path, "recursive": "true"})
    assert (refused.status_code, refused.json()["message"]) == (400, f"RemoveAll {path}: invalid argument")
    assert client.get(tb + "/files/info", params={"path": "d/f"}).status_code == 200


def test_an_interpreter_context_imports_what_its_start_did_not_load(
    client: httpx.Client, server: EmulatorServer, api_key: str
) -> None:
    """The context drops to the sandbox uid as the executor's programs do, keeping ``CAP_DAC_READ_SEARCH``: the
    runtime Python may live where only root looks (``/root/.pyenv``), and without it ``import fractions`` failed
    there once the context had started. It still cannot write where root could."""
    sid = _sandbox(client)
    code = "import fractions, statistics, os\nprint(fractions.Fraction(1, 3) + 1, os.access('/etc', os.W_OK))"
    frames = asyncio.run(_frames(server, api_key, sid, {"code": code}))
    assert {"type": "stdout", "text": "4/3 False\n"} in frames, frames


@pytest.mark.parametrize(
    "forged",
    [
        b"not json",
        b"[1]",
        b'{"end": "another run", "error": null}',
        b'{"end": "%(nonce)s", "error": 5}',
        b'{"end": "%(nonce)s", "error": {"name": 1}}',
        b'{"type": "stdout", "text": 5}',
    ],
)
def test_lines_the_code_forges_on_the_drivers_pipe_are_dropped(
    client: httpx.Client, server: EmulatorServer, api_key: str, forged: bytes
) -> None:
    """The code can find the driver's answer pipe and its run's nonce and write lines of its own there. A line that
    is no chunk and no end of this run (not JSON, not an object, another run's end, an end whose error has the wrong
    shape) once raised in the server (the connection dropped with 1006), then ended the context. Now it is dropped,
    as the daemon drops the worker's lines it cannot read, and the run ends as it ends."""
    sid = _sandbox(client)
    forge = (
        "import os, sys\n"
        "driver = sys.modules['__main__']\n"
        "nonce = sys._getframe(1).f_locals['request']['nonce']\n"
        f"os.write(driver._Running.out, {forged!r} % {{b'nonce': nonce.encode()}} + b'\\n')\n"
        "print('mine')\n"
    )

    async def scenario() -> list[list[Any]]:
        return [
            await _frames(server, api_key, sid, {"code": forge}),
            await _frames(server, api_key, sid, {"code": "print('next')"}),
        ]

    ran, after = asyncio.run(scenario())
    assert ran[-1] == 1000 and {"type": "stdout", "text": "mine\n"} in ran, ran
    assert not [f for f in ran if isinstance(f, dict) and f.get("type") == "error"], ran
    assert {"type": "stdout", "text": "next\n"} in after and after[-1] == 1000, after


def test_a_command_ends_with_its_sandbox(client: httpx.Client, server: EmulatorServer) -> None:
    """Deleting a sandbox kills what its commands run, as deleting its container does: the command in flight is
    answered at once (502, the toolbox proxy with no daemon left), not 30 s later with its output as if nothing
    had happened."""
    sid = _sandbox(client)
    home = server.emulator.daytona.store.get(sid).home
    assert client.post(f"/toolbox/{sid}/process/execute", json={"command": "mkfifo started"}).status_code == 200
    command = "echo up > started; sleep 30; echo finished"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(client.post, f"/toolbox/{sid}/process/execute", json={"command": command})
        with open(os.path.join(home, "started")) as fifo:
            assert fifo.read() == "up\n"  # returns once the command has started and written
        assert client.delete(f"/api/sandbox/{sid}").status_code == 200
        answer = running.result(timeout=60)
    assert answer.status_code == 502, answer.text
    assert not os.path.lexists(home)


def test_an_error_names_the_path_as_the_client_gave_it(client: httpx.Client, server: EmulatorServer) -> None:
    """A path outside the home lives in the sandbox's private tree, a relative one in the home; an error about either
    names the client's path (as the daemon echoes it), never the emulator's directories."""
    sid = _sandbox(client)
    missing = client.post(f"/toolbox/{sid}/files/bulk-download", json={"paths": ["/tmp/nothing/here.txt"]})
    assert missing.status_code == 200, missing.text
    assert "file not found: /tmp/nothing/here.txt" in missing.text
    fs_root = server.emulator.daytona.store.get(sid).fs_root
    assert fs_root not in missing.text
    home = server.emulator.daytona.store.get(sid).home
    for route, path in (("/files/download", "/tmp/nothing/here.txt"), ("/files/info", "nothing/here.txt")):
        single = client.get(f"/toolbox/{sid}{route}", params={"path": path})
        assert single.status_code == 404, single.text
        assert single.json()["message"] == f"stat {path}: no such file or directory"
        assert fs_root not in single.text and home not in single.text
