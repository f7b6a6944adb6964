"""Interpreter contexts as the daemon's controller (v0.190) makes them: the process starts at creation (``active``),
in ``cwd``, and a ``cwd`` it cannot start in is a 500; only Python; deleting the default context, or one that is
not there, is refused with the daemon's words."""

from __future__ import annotations

import httpx
import pytest

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
