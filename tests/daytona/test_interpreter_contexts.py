"""Interpreter contexts as the daemon's controller (v0.190) makes them: the process starts at creation (``active``),
in ``cwd``, and a ``cwd`` it cannot start in is a 500; only Python; deleting the default context, or one that is
not there, is refused with the daemon's words."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from emulator.daytona.interpreter import DRIVER
from emulator.server import EmulatorServer

from .conftest import interpreter_frames


def test_a_context_starts_at_creation_in_its_cwd(
    server: EmulatorServer, api_key: str, tb: tuple[httpx.Client, str]
) -> None:
    client, prefix = tb
    assert client.post(prefix + "/process/execute", json={"command": "mkdir work"}).json()["exitCode"] == 0
    created = client.post(prefix + "/process/interpreter/context", json={"cwd": "work"})
    assert created.status_code == 200, created.text
    context = created.json()
    assert context["active"] is True and context["language"] == "python"
    sid = prefix.rsplit("/", 1)[1]
    frames, close = interpreter_frames(
        server, api_key, sid, {"code": "import os\nprint(os.path.basename(os.getcwd()))", "contextId": context["id"]}
    )
    assert close == 1000 and frames[0]["text"] == "work\n"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"cwd": "nope"},
            500,
            "failed to start context: failed to start Python worker: chdir nope: no such file or directory",
        ),
        ({"language": "javascript"}, 400, "unsupported language: javascript (only 'python' is supported currently)"),
        (
            {"cwd": 5},
            400,
            "invalid request payload: json: cannot unmarshal number into Go struct field CreateContextRequest.cwd of"
            " type string",
        ),
    ],
)
def test_a_context_the_daemon_cannot_make(
    tb: tuple[httpx.Client, str], body: object, status: int, message: str
) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/interpreter/context", json=body)
    assert (answer.status_code, answer.json()["message"]) == (status, message)
    assert client.get(prefix + "/process/interpreter/context").json() == {"contexts": []}


def test_deleting_a_context_answers_as_the_daemon(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    context = client.post(prefix + "/process/interpreter/context", json={}).json()
    deleted = client.delete(prefix + f"/process/interpreter/context/{context['id']}")
    assert (deleted.status_code, deleted.json()) == (200, {"message": "Context deleted successfully"})
    again = client.delete(prefix + f"/process/interpreter/context/{context['id']}")
    assert (again.status_code, again.json()["message"]) == (
        404,
        f"not found: context with ID '{context['id']}' not found",
    )
    default = client.delete(prefix + "/process/interpreter/context/default")
    assert (default.status_code, default.json()["message"]) == (400, "cannot delete default context")


@pytest.mark.parametrize(
    ("sandbox", "pipe", "status", "message"),
    [
        ("gone", "open", 502, "the sandbox was stopped while the command ran"),
        ("gone", "closed", 502, "the sandbox was stopped while the command ran"),
        ("there", "closed", 500, "failed to start context: failed to start Python worker: its input closed"),
    ],
)
def test_a_context_whose_worker_goes_as_it_starts_is_an_answer_not_a_logged_failure(
    server: EmulatorServer,
    tb: tuple[httpx.Client, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    sandbox: str,
    pipe: str,
    status: int,
    message: str,
) -> None:
    """The client deletes the sandbox while a context of it is starting (a pool closing on Ctrl-C): the context's
    process goes with it, its pipe closed or not yet, and the creation gets the sandbox-gone answer. A worker whose
    pipe closed for another reason is a failed start."""
    client, prefix = tb
    sid = prefix.rsplit("/", 1)[1]
    interpreters = server.emulator.daytona.interpreters
    real = asyncio.create_subprocess_exec

    async def racing(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await real(*args, **kwargs)
        if DRIVER in args:  # the interpreter's worker, before it gets its setup
            if sandbox == "gone":
                interpreters.drop_sandbox(sid)
            if pipe == "closed":  # as uvloop answers a write to a pipe that closed (asyncio's drops it)
                stdin = process.stdin
                assert stdin is not None
                stdin.close()

                def write(data: bytes) -> None:
                    raise RuntimeError("unable to perform operation on <WriteUnixTransport closed=True>")

                monkeypatch.setattr(stdin, "write", write)
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", racing)
    with caplog.at_level(logging.ERROR):
        answer = client.post(prefix + "/process/interpreter/context", json={})
    assert (answer.status_code, answer.json()["message"]) == (status, message)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert client.get(prefix + "/process/interpreter/context").json() == {"contexts": []}


@pytest.mark.parametrize(("cwd", "seen"), [("/tmp", "/tmp"), ("/", "/"), ("/usr", "/usr"), ("work", None)])
def test_a_context_runs_where_its_code_finds_cwd_and_answers_it_as_given(
    server: EmulatorServer, api_key: str, tb: tuple[httpx.Client, str], cwd: str, seen: str | None
) -> None:
    """The daemon's worker starts with its directory set to ``cwd`` as it is, and the context answers that ``cwd``:
    the system's directories (the code sees the host's ``/tmp``, ``/usr``, ``/``), and a relative one under the home,
    named as the client named it, never as a host path."""
    client, prefix = tb
    home = client.get(prefix + "/user-home-dir").json()["dir"]
    assert client.post(prefix + "/process/execute", json={"command": "mkdir work"}).json()["exitCode"] == 0
    created = client.post(prefix + "/process/interpreter/context", json={"cwd": cwd})
    assert created.status_code == 200, created.text
    context = created.json()
    assert context["cwd"] == cwd
    assert context in client.get(prefix + "/process/interpreter/context").json()["contexts"]
    sid = prefix.rsplit("/", 1)[1]
    frames, close = interpreter_frames(
        server, api_key, sid, {"code": "import os\nprint(os.getcwd())", "contextId": context["id"]}
    )
    assert close == 1000 and frames[0]["text"] == f"{seen or home + '/' + cwd}\n"


def test_a_context_in_a_path_no_directory_can_have_is_refused_as_go_refuses_it(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/interpreter/context", json={"cwd": "/tmp/a\u0000b"})
    assert (answer.status_code, answer.json()["message"]) == (
        500,
        "failed to start context: failed to start Python worker: chdir /tmp/a\u0000b: invalid argument",
    )
