"""Sessions as the daemon keeps them (v0.190 ``pkg/session``): one shell per session, its commands sourced one after
the other, so a ``cd``, a variable or a function of one is there for the next; an asynchronous command holds the
shell until it ends; each line is logged with its stream's marker, and the answer's shape follows the SDK's version.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from daytona import Daytona, DaytonaConfig, SessionExecuteRequest

from emulator.daytona.session_shell import STDERR_PREFIX, STDOUT_PREFIX, demux, log, output_shape
from emulator.server import EmulatorServer

SDK = {"X-Daytona-SDK-Version": "0.226.1"}


@pytest.fixture
def session(server: EmulatorServer, api_key: str) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    prefix = f"/toolbox/{created.json()['id']}/process/session"
    assert client.post(prefix, json={"sessionId": "s"}).status_code == 201
    return client, prefix + "/s"


def _exec(session: tuple[httpx.Client, str], command: str, headers: dict[str, str] = SDK, **extra: Any) -> Any:
    client, prefix = session
    answer = client.post(prefix + "/exec", json={"command": command, **extra}, headers=headers)
    assert answer.status_code in (200, 202), answer.text
    return answer.json()


def test_the_shell_keeps_its_directory_variables_and_functions(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "mkdir -p sub/deeper && cd sub")
    _exec(session, "export A='one two'; B=$'multi\\nline'; arr=(x 'y z'); greet() { echo \"hi $1\"; }")
    got = _exec(session, 'cd deeper; basename "$PWD"; echo "$A"; echo "$B"; echo "${arr[1]}"; greet you')
    assert got["stdout"] == "deeper\none two\nmulti\nline\ny z\nhi you\n"
    assert _exec(session, "basename \"$PWD\"; bash -c 'echo $A'")["stdout"] == "deeper\none two\n"  # exported


def test_an_exit_ends_the_command_not_what_came_before(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "kept=1")
    assert _exec(session, "echo bye; exit 3")["exitCode"] == 3
    assert _exec(session, "echo $kept; cat")["stdout"] == "1\n"  # and a command's stdin is empty


def test_an_asynchronous_command_holds_the_shell_until_it_ends(session: tuple[httpx.Client, str]) -> None:
    started = _exec(session, "sleep 0.5; echo first > order", runAsync=True)
    assert set(started) == {"cmdId"}
    assert _exec(session, "echo second >> order; cat order")["stdout"] == "first\nsecond\n"


def test_each_line_is_logged_with_its_streams_marker(session: tuple[httpx.Client, str]) -> None:
    got = _exec(session, "printf 'a\\nb'; printf 'oops' >&2")
    assert got["output"] == f"{STDOUT_PREFIX}a\n{STDOUT_PREFIX}b\n{STDERR_PREFIX}oops\n"  # the SDK 0.226 gets it so
    assert (got["stdout"], got["stderr"]) == ("a\nb\n", "oops\n")  # a last line without a newline gets one


@pytest.mark.parametrize(
    ("headers", "fields", "output"),
    [
        ({}, {"output"}, "o\ne\n"),
        ({"X-Daytona-Split-Output": "true"}, {"output"}, f"{STDOUT_PREFIX}o\n{STDERR_PREFIX}e\n"),
        ({"X-Daytona-SDK-Version": "0.20.0"}, {"output"}, "o\ne\n"),
        ({"X-Daytona-SDK-Version": "0.100.0"}, {"output"}, f"{STDOUT_PREFIX}o\n{STDERR_PREFIX}e\n"),
        ({"X-Daytona-SDK-Version": "0.167.0"}, {"output", "stdout", "stderr"}, f"{STDOUT_PREFIX}o\n{STDERR_PREFIX}e\n"),
    ],
)
def test_the_answer_takes_the_shape_the_sdks_version_asks(
    session: tuple[httpx.Client, str], headers: dict[str, str], fields: set[str], output: str
) -> None:
    got = _exec(session, "echo o; echo e >&2", headers=headers)
    assert set(got) - {"cmdId", "exitCode"} == fields and got["output"] == output
    client, prefix = session
    logs = client.get(f"{prefix}/command/{got['cmdId']}/logs", headers=headers)
    if "stdout" in fields:
        assert logs.json() == {"output": output, "stdout": "o\n", "stderr": "e\n"}
    else:
        assert logs.text == output


def test_the_sdk_reads_sessions(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        sandbox.process.create_session("work")
        sandbox.process.execute_session_command("work", SessionExecuteRequest(command="export N=41"))
        ran = sandbox.process.execute_session_command("work", SessionExecuteRequest(command="echo $((N + 1))"))
        assert (ran.stdout, ran.exit_code) == ("42\n", 0)
        assert ran.output == f"{STDOUT_PREFIX}42\n"  # what the real daemon sends the SDK 0.226
        logs = sandbox.process.get_session_command_logs("work", ran.cmd_id)
        assert logs.stdout == "42\n"
    finally:
        sandbox.delete()


def test_log_and_demux_are_inverse() -> None:
    assert demux(log("a\n\nb", "c\n")) == ("a\n\nb\n", "c\n")
    assert output_shape({"x-daytona-sdk-version": "0.168.0-dev.1"}) == "split"


def test_the_daemons_words_for_sessions_and_commands_it_has_not(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session
    base = prefix.rsplit("/", 1)[0]
    refusals = [
        (client.post(base, json={"sessionId": "s"}), 409, "session already exists"),
        (
            client.post(base, json={"sessionId": "entrypoint"}),
            400,
            "provided session ID is reserved and cannot be created/overridden",
        ),
        (
            client.post(base + "/entrypoint/exec", json={"command": "true"}),
            400,
            "can't execute command in entrypoint session",
        ),
        (client.delete(base + "/entrypoint"), 400, "can't delete entrypoint session"),
        (client.get(base + "/nope"), 404, "session not found"),
        (client.get(prefix + "/command/nope"), 404, "command not found"),
    ]
    assert [(r.status_code, r.json()["message"]) for r, _, _ in refusals] == [(s, m) for _, s, m in refusals]


def test_what_a_command_changes_in_its_shell_does_not_break_the_next(session: tuple[httpx.Client, str]) -> None:
    _exec(
        session,
        'mkdir -p here/there && builtin cd here; cd() { builtin cd "$@" && echo moved; }; IFS=,; set -u; v=kept',
    )
    got = _exec(session, 'cd there; echo "$v"; basename "$PWD"')
    assert got["stdout"] == "moved\nkept\nthere\n"


@pytest.mark.parametrize(
    ("first", "then", "expected"),
    [
        # An EXIT trap's output is the command's affair, never the state's (it once broke every later command).
        ("trap 'echo done' EXIT; echo hi", "echo second", "second\n"),
        ("exit() { echo bye; }; x=1", "echo $x", "1\n"),
        # State far bigger than what the output keeps, and bytes that are no UTF-8.
        ("X=$(head -c 300000 /dev/zero | tr '\\0' a); printf '\\xff'", "echo ${#X}", "300000\n"),
        # Options a function needs to be read again.
        ("shopt -s extglob\nclean() { echo !(*.keep); }", "shopt -q extglob && echo on", "on\n"),
        # A command that sends its stdout elsewhere for good.
        ("exec >/dev/null; Y=2", "echo $Y", "2\n"),
        ("readonly R=1", "echo $R", "1\n"),
        ("cd /tmp; cd /", "cd - >/dev/null; pwd", "/tmp\n"),
        ("set -x; Z=3", "echo $Z", "3\n"),
    ],
)
def test_the_state_survives_what_a_command_does_to_its_shell(
    session: tuple[httpx.Client, str], first: str, then: str, expected: str
) -> None:
    _exec(session, first)
    got = _exec(session, then)
    assert (got["stdout"], got["stderr"], got["exitCode"]) == (expected, "", 0), got


def test_unsetting_a_sandbox_variable_lasts(server: EmulatorServer, api_key: str) -> None:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    sid = client.post("/api/sandbox", json={"env": {"FROM_SANDBOX": "yes", "SHARED": "x"}}).json()["id"]
    prefix = f"/toolbox/{sid}/process/session"
    assert client.post(prefix, json={"sessionId": "s"}).status_code == 201
    session = (client, prefix + "/s")
    _exec(session, "unset FROM_SANDBOX; export -n SHARED")
    got = _exec(session, 'echo "${FROM_SANDBOX-gone}"; bash -c \'echo "${SHARED-unexported}"\'; echo $SHARED')
    assert got["stdout"] == "gone\nunexported\nx\n"


def test_a_new_session_of_the_same_name_starts_afresh(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session
    _exec(session, "old=1")
    assert client.delete(prefix).status_code == 204
    assert client.post(prefix.rsplit("/", 1)[0], json={"sessionId": "s"}).status_code == 201
    assert _exec(session, 'echo "${old-none}"')["stdout"] == "none\n"
