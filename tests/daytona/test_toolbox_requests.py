"""Toolbox request bodies are bound as the daemon's Go handlers bind them (its v0.190 source: ``execute.go``,
``coderun/handler.go``, ``session/execute.go``): each field to its Go type, a value of another type failing the body
with Go's message (400); a command of only whitespace refused; environment names checked; a ``cwd`` where the shell
cannot start answered 200 with exit code -1; ``language`` required by ``code-run``; ``artifacts`` left out when no
chart came; an asynchronous session command answered 202.

Why it matters to a trainer: a tool that sends a timeout of ``1.5`` or an env value that is a number works on a
lenient emulator and fails on the real service, in the middle of a GPU run.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from daytona import Daytona, DaytonaConfig, SessionExecuteRequest


def _required(struct: str, field: str) -> str:
    return f"Key: '{struct}.{field}' Error:Field validation for '{field}' failed on the 'required' tag"


#: The prefix of ``/process/execute``'s body errors: ``NewBadRequestError(fmt.Errorf("invalid request body: %w"))``.
BAD_BODY = "bad request: invalid request body: "


def _message(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["message"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # The daemon's binding runs its validator (validate:"required") before the handler's own check.
        ({}, BAD_BODY + _required("ExecuteRequest", "Command")),
        ({"command": ""}, BAD_BODY + _required("ExecuteRequest", "Command")),
        ({"command": " \t\n"}, "bad request: command cannot be empty or whitespace-only"),
        (
            {"command": 5},
            BAD_BODY + "json: cannot unmarshal number into Go struct field ExecuteRequest.command of type string",
        ),
        (
            {"command": "true", "timeout": -1},
            BAD_BODY + "json: cannot unmarshal number -1 into Go struct field ExecuteRequest.timeout of type uint32",
        ),
        (
            {"command": "true", "timeout": 1.5},
            BAD_BODY + "json: cannot unmarshal number 1.5 into Go struct field ExecuteRequest.timeout of type uint32",
        ),
        (
            {"command": "true", "timeout": 2**32},
            BAD_BODY + f"json: cannot unmarshal number {2**32} into Go struct field"
            " ExecuteRequest.timeout of type uint32",
        ),
        (
            {"command": "true", "timeout": "5"},
            BAD_BODY + "json: cannot unmarshal string into Go struct field ExecuteRequest.timeout of type uint32",
        ),
        (
            {"command": "true", "envs": {"A": 1}},
            BAD_BODY + "json: cannot unmarshal number into Go struct field ExecuteRequest.envs of type string",
        ),
        ({"command": "true", "envs": {"A-B": "1"}}, "bad request: invalid environment variable name: 'A-B'"),
        ({"command": "true", "envs": {"1A": "1"}}, "bad request: invalid environment variable name: '1A'"),
    ],
)
def test_execute_refuses_what_the_daemon_refuses(tb: tuple[httpx.Client, str], body: Any, message: str) -> None:
    client, prefix = tb
    assert _message(client.post(prefix + "/process/execute", json=body)) == message


def test_execute_where_the_shell_cannot_start_is_exit_code_minus_one(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    missing = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": "/home/daytona/nope"})
    assert missing.status_code == 200
    assert missing.json() == {"exitCode": -1, "result": "fork/exec /usr/bin/bash: no such file or directory"}
    client.post(prefix + "/process/execute", json={"command": "touch plain"})
    a_file = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": "/home/daytona/plain"})
    assert a_file.json() == {"exitCode": -1, "result": "fork/exec /usr/bin/bash: not a directory"}


@pytest.mark.parametrize("cwd", ["/tmp", "/", "/usr", "/usr/../tmp"])
def test_execute_runs_in_the_system_directories_its_code_sees(tb: tuple[httpx.Client, str], cwd: str) -> None:
    """The daemon starts its shell with the directory set to ``cwd`` as it is: ``/tmp``, ``/usr`` and ``/`` are the
    directories the code itself sees (the host's here), never a path of the emulator's own."""
    client, prefix = tb
    ran = client.post(prefix + "/process/execute", json={"command": "pwd; echo ${OLDPWD-none}", "cwd": cwd})
    assert ran.json() == {"exitCode": 0, "result": f"{os.path.realpath(cwd)}\nnone\n"}


def test_execute_in_the_users_home_and_below_it(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    home = client.get(prefix + "/user-home-dir").json()["dir"]
    client.post(prefix + "/process/execute", json={"command": "mkdir -p d/e && ln -s d/e link"})
    for cwd, seen in (("/home/daytona", home), ("/home/daytona/d", home + "/d"), ("link", home + "/d/e")):
        ran = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": cwd})
        assert ran.json() == {"exitCode": 0, "result": seen + "\n"}, cwd


@pytest.mark.parametrize(
    ("cwd", "seen"),
    [
        ("/home/daytona/..", "/home"),
        ("/home/daytona/../../etc", "/etc"),
        ("../..", "/"),
        ("/home/./daytona/x/..", ""),
        ("/home/daytona/../daytona/x", "x"),
        ("a/../..", ""),  # a is b/c: its ".." is b, not the home's parent
    ],
)
def test_a_dotdot_in_cwd_climbs_as_in_the_container(tb: tuple[httpx.Client, str], cwd: str, seen: str) -> None:
    """``cwd`` is walked as in the container before the home is mapped: ``/home/daytona/..`` is ``/home`` (never
    the host directory that holds the sandboxes' homes), ``/home/daytona/../../etc`` is ``/etc``, a path that climbs
    back into the home is in the home (``seen`` relative to it), and a ``..`` after a link is taken from where the
    link led, as the kernel takes it."""
    client, prefix = tb
    home = client.get(prefix + "/user-home-dir").json()["dir"]
    client.post(prefix + "/process/execute", json={"command": "mkdir -p x b/c && ln -s b/c a"})
    ran = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": cwd})
    expected = os.path.realpath(seen) if seen.startswith("/") else os.path.join(home, seen).rstrip("/")
    assert ran.json() == {"exitCode": 0, "result": expected + "\n"}, cwd


def test_execute_in_a_path_no_directory_can_have(tb: tuple[httpx.Client, str]) -> None:
    """Go's ``forkExec`` refuses a directory holding a NUL before it forks: the start's error, exit code -1."""
    client, prefix = tb
    ran = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": "/tmp/a\u0000b"})
    assert ran.json() == {"exitCode": -1, "result": "fork/exec /usr/bin/bash: invalid argument"}
    missing = client.post(prefix + "/process/execute", json={"command": "pwd", "cwd": "/tmp/no-such-dir-here"})
    assert missing.json() == {"exitCode": -1, "result": "fork/exec /usr/bin/bash: no such file or directory"}


def test_execute_takes_a_zero_timeout_and_good_env_names(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    body = {"command": "echo $_A1", "timeout": 0, "envs": {"_A1": "ok"}}
    answer = client.post(prefix + "/process/execute", json=body)
    assert answer.status_code == 200 and answer.json() == {"exitCode": 0, "result": "ok\n"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"code": "print(1)"}, "invalid body request: " + _required("CodeRunRequest", "Language")),
        ({"code": "", "language": "python"}, "invalid body request: " + _required("CodeRunRequest", "Code")),
        (
            {},
            "invalid body request: "
            + _required("CodeRunRequest", "Code")
            + "\n"
            + _required("CodeRunRequest", "Language"),
        ),
        ({"code": "print(1)", "language": "python3"}, "bad request: unsupported language: python3"),
        (
            {"code": "print(1)", "language": "python", "argv": "a b"},
            "invalid body request: json: cannot unmarshal string into Go struct field CodeRunRequest.argv of type"
            " []string",
        ),
        (
            {"code": "print(1)", "language": "python", "envs": {"": "x"}},
            "bad request: invalid environment variable name: ''",
        ),
    ],
)
def test_code_run_refuses_what_the_daemon_refuses(tb: tuple[httpx.Client, str], body: Any, message: str) -> None:
    client, prefix = tb
    assert _message(client.post(prefix + "/process/code-run", json=body)) == message


def test_code_run_leaves_artifacts_out_when_no_chart_came(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/code-run", json={"code": "print(2 + 2)", "language": "python"})
    assert answer.status_code == 200 and answer.json() == {"exitCode": 0, "result": "4\n"}


def test_session_commands_are_checked_and_an_async_one_is_accepted(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    assert client.post(prefix + "/process/session", json={"sessionId": "s"}).status_code == 201
    assert (
        _message(client.post(prefix + "/process/session/s/exec", json={"command": "  "})) == "command cannot be empty"
    )
    assert _message(client.post(prefix + "/process/session/s/exec", json={"command": "true", "runAsync": "yes"})) == (
        "invalid request body: json: cannot unmarshal string into Go struct field SessionExecuteRequest.runAsync of"
        " type bool"
    )
    accepted = client.post(prefix + "/process/session/s/exec", json={"command": "echo later", "runAsync": True})
    assert accepted.status_code == 202  # every field of the daemon's answer there, the unset ones null
    assert {k: v for k, v in accepted.json().items() if v is not None} == {"cmdId": accepted.json()["cmdId"]}
    assert set(accepted.json()) == {"cmdId", "output", "stdout", "stderr", "exitCode"}


def test_the_sdk_reads_these_answers(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        missing = sandbox.process.exec("pwd", cwd="/home/daytona/nope")
        assert missing.exit_code == -1 and "no such file or directory" in missing.result
        ran = sandbox.process.code_run("print(6 * 7)")
        assert ran.exit_code == 0 and ran.result == "42\n" and ran.artifacts.charts == []
        sandbox.process.create_session("s")
        started = sandbox.process.execute_session_command("s", SessionExecuteRequest(command="echo x", run_async=True))
        assert started.cmd_id
    finally:
        sandbox.delete()


def test_code_run_reads_the_program_from_stdin_as_the_daemons_python_does(tb: tuple[httpx.Client, str]) -> None:
    """The daemon pipes the code into ``python3 -u -``: ``<stdin>`` in tracebacks, ``sys.argv[0] == '-'``, the
    current directory first on ``sys.path``, ``__file__ == '<stdin>'``, and an empty stdin for the code, with or
    without ``argv`` (the emulator's fast path, and a real ``python -``)."""
    client, prefix = tb
    code = (
        "import sys\n"
        "print(sys.argv, repr(sys.path[0]), __file__, repr(sys.stdin.read()))\n"
        "def f():\n"
        "    raise ValueError('boom')\n"
        "f()\n"
    )
    for argv, shown in (([], "['-']"), (["a", "b"], "['-', 'a', 'b']")):
        body = {"code": code, "language": "python", "argv": argv}
        answer = client.post(prefix + "/process/code-run", json=body).json()
        assert answer["exitCode"] == 1
        assert answer["result"] == (
            f"{shown} '' <stdin> ''\n"
            "Traceback (most recent call last):\n"
            '  File "<stdin>", line 5, in <module>\n'
            '  File "<stdin>", line 4, in f\n'
            "ValueError: boom\n"
        ), answer


def test_code_run_argv_is_joined_into_the_daemons_shell_line(tb: tuple[httpx.Client, str]) -> None:
    """The daemon's ``formatArgv`` joins argv with spaces, unquoted, into the line its shell runs: the shell splits
    it, expands ``$HOME``, runs what follows a ``;`` and drops a NUL (as bash drops one from its input)."""
    client, prefix = tb
    home = client.get(prefix + "/user-home-dir").json()["dir"]
    code = "import sys; print(sys.argv)"
    body = {"code": code, "language": "python", "argv": ["a b", "$HOME", "x;echo INJECTED", "c\u0000d"]}
    answer = client.post(prefix + "/process/code-run", json=body)
    assert answer.status_code == 200
    assert answer.json() == {"exitCode": 0, "result": f"['-', 'a', 'b', '{home}', 'x']\nINJECTED cd\n"}


def test_code_run_with_argv_interleaves_its_streams_as_the_daemons_shell(tb: tuple[httpx.Client, str]) -> None:
    """With argv the daemon's shell runs the code, both streams into one buffer: in the order written. A python
    that kills its whole process group kills that shell too: Go's exit code -1."""
    client, prefix = tb
    code = "import sys\nprint('o1')\nsys.stderr.write('e\\n')\nprint('o2')"
    body = {"code": code, "language": "python", "argv": ["x"]}
    assert client.post(prefix + "/process/code-run", json=body).json() == {"exitCode": 0, "result": "o1\ne\no2\n"}
    body = {"code": "import os\nos.killpg(0, 9)", "language": "python", "argv": ["x"]}
    assert client.post(prefix + "/process/code-run", json=body).json() == {"exitCode": -1, "result": ""}


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("execute", {"command": "echo ran", "envs": {"A": "x\u0000y"}}),
        ("execute", {"command": "echo ran", "envs": {"A": "x\u0000y"}, "cwd": "/no/such/dir"}),
        ("code-run", {"code": "print('ran')", "language": "python", "envs": {"A": "x\u0000y"}}),
    ],
)
def test_an_env_value_holding_a_nul_fails_the_start_as_gos_exec_does(
    tb: tuple[httpx.Client, str], route: str, body: dict[str, Any]
) -> None:
    """Go's ``exec.Cmd`` refuses the environment before it starts anything (the directory's check comes after)."""
    client, prefix = tb
    answer = client.post(prefix + f"/process/{route}", json=body)
    assert answer.status_code == 200
    assert answer.json() == {"exitCode": -1, "result": "exec: environment variable contains NUL"}


@pytest.mark.parametrize(
    ("route", "body", "code", "message"),
    [
        ("process/execute", b"", "BAD_REQUEST", BAD_BODY + "EOF"),
        ("process/execute", b'{"command": "ls"', "BAD_REQUEST", BAD_BODY + "unexpected EOF"),
        (
            "process/execute",
            b"{x",
            "BAD_REQUEST",
            BAD_BODY + "invalid character 'x' looking for beginning of object key string",
        ),
        (
            "process/execute",
            b"[]",
            "BAD_REQUEST",
            BAD_BODY + "json: cannot unmarshal array into Go value of type process.ExecuteRequest",
        ),
        ("process/execute", b"null", "BAD_REQUEST", BAD_BODY + _required("ExecuteRequest", "Command")),
        (
            "process/code-run",
            b'["print(1)"]',
            "INVALID_REQUEST_BODY",
            "invalid body request: json: cannot unmarshal array into Go value of type coderun.CodeRunRequest",
        ),
        (
            "process/code-run",
            b'{"code": 5, "language": "python"}',
            "INVALID_REQUEST_BODY",
            "invalid body request: json: cannot unmarshal number into Go struct field CodeRunRequest.code of type"
            " string",
        ),
        ("process/session", b"", "INVALID_REQUEST_BODY", "invalid body request: EOF"),
        ("process/session/s/exec", b"{", "BAD_REQUEST", "invalid request body: unexpected EOF"),
        (
            "process/session/entrypoint/exec",
            b"{",
            "BAD_REQUEST",
            "bad request: can't execute command in entrypoint session",  # checked before the body is read
        ),
        (
            "process/interpreter/context",
            b"true",
            "BAD_REQUEST",
            "invalid request payload: json: cannot unmarshal bool into Go value of type"
            " interpreter.CreateContextRequest",
        ),
    ],
)
def test_a_body_the_daemons_binding_cannot_decode(
    tb: tuple[httpx.Client, str], route: str, body: bytes, code: str, message: str
) -> None:
    """gin's ``ShouldBindJSON`` decodes the body with an ``encoding/json`` Decoder: its errors, in each handler's
    words (``NewBadRequestError``, ``NewInvalidBodyRequestError`` with its code, ``AbortWithError``'s prefix)."""
    client, prefix = tb
    assert client.post(prefix + "/process/session", json={"sessionId": "s"}).status_code == 201
    answer = client.post(prefix + "/" + route, content=body, headers={"Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["code"], answer.json()["message"]) == (400, code, message)


def test_a_body_is_read_as_the_daemons_decoder_reads_it(tb: tuple[httpx.Client, str]) -> None:
    """Its first value only, the fields without regard to case, a byte that is no UTF-8 in a string U+FFFD."""
    client, prefix = tb
    headers = {"Content-Type": "application/json"}
    for body, result in (
        (b'{"command": "echo hi"} and more', "hi\n"),
        (b'{"Command": "echo hi", "TIMEOUT": 5}', "hi\n"),
        (b'{"command": "echo a\xffb"}', "a\ufffdb\n"),
    ):
        answer = client.post(prefix + "/process/execute", content=body, headers=headers)
        assert answer.status_code == 200 and answer.json() == {"exitCode": 0, "result": result}, body
