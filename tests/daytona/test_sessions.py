"""Sessions as the daemon keeps them (v0.190 ``pkg/session``): one live shell per session, its commands sourced in it
one after the other, so a ``cd``, a variable, a function or a background job of one is there for the next; each line
is logged with its stream's marker as it comes, and the answer's shape follows the SDK's version.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from daytona import AsyncDaytona, Daytona, DaytonaConfig, SessionExecuteRequest
from daytona.common.errors import (
    DaytonaCommandAlreadyCompletedError,
    DaytonaConflictError,
    DaytonaNotFoundError,
)

from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.daytona.session_shell import STDERR_PREFIX, STDOUT_PREFIX, demux, output_shape
from emulator.daytona.sessions import Session
from emulator.server import EmulatorServer

from .conftest import all_dead, make_server

SDK = {"X-Daytona-SDK-Version": "0.226.1"}
GRACE = 0.5


@pytest.fixture(scope="module")
def quick() -> Iterator[EmulatorServer]:
    """A server whose session deletion waits half a second for a shell that outlives its SIGTERM (the daemon: 5)."""
    with make_server(EmulatedDaytona(session_termination_grace=GRACE)) as server:
        yield server


@pytest.fixture
def session(quick: EmulatorServer, api_key: str) -> Iterator[tuple[httpx.Client, str]]:
    client = httpx.Client(base_url=quick.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    prefix = f"/toolbox/{created.json()['id']}/process/session"
    assert client.post(prefix, json={"sessionId": "s"}).status_code == 201
    yield client, prefix + "/s"
    client.delete(f"/api/sandbox/{created.json()['id']}")


def _exec(session: tuple[httpx.Client, str], command: str, headers: dict[str, str] = SDK, **extra: Any) -> Any:
    client, prefix = session
    answer = client.post(prefix + "/exec", json={"command": command, **extra}, headers=headers)
    assert answer.status_code in (200, 202), answer.text
    return answer.json()


def _shell(server: EmulatorServer, prefix: str) -> Session:
    """The emulator's own record of the session at ``prefix`` (``/toolbox/<sandbox>/process/session/<name>``)."""
    parts = prefix.split("/")
    return server.emulator.daytona.toolbox._sessions[parts[2]][parts[-1]]


def test_the_shell_keeps_its_directory_variables_and_functions(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "mkdir -p sub/deeper && cd sub")
    _exec(session, "export A='one two'; B=$'multi\\nline'; arr=(x 'y z'); greet() { echo \"hi $1\"; }")
    got = _exec(session, 'cd deeper; basename "$PWD"; echo "$A"; echo "$B"; echo "${arr[1]}"; greet you')
    assert got["stdout"] == "deeper\none two\nmulti\nline\ny z\nhi you\n"
    assert _exec(session, "basename \"$PWD\"; bash -c 'echo $A'")["stdout"] == "deeper\none two\n"  # exported


def test_an_exit_ends_the_shell_and_every_later_command(
    quick: EmulatorServer, session: tuple[httpx.Client, str]
) -> None:
    """As on the daemon: the shell is gone, so the command that ended it never ends and a later one cannot be
    written to it (500); both stay listed with no exit code."""
    client, prefix = session
    assert _exec(session, "cat; echo $?")["stdout"] == "0\n"  # a synchronous command's stdin is empty
    ended = _exec(session, "echo bye; exit 3", runAsync=True)["cmdId"]
    shell = _shell(quick, prefix)
    loop = quick.emulator.daytona._loop
    assert shell.process is not None and loop is not None
    assert asyncio.run_coroutine_threadsafe(shell.process.wait(), loop).result(timeout=30) == 3
    refused = client.post(prefix + "/exec", json={"command": "echo after"}, headers=SDK)
    assert (refused.status_code, refused.json()["message"]) == (
        500,
        "failed to execute command: bad request: failed to write command: write |1: broken pipe",
    )
    listed = {c["command"]: c for c in client.get(prefix).json()["commands"]}
    assert listed["echo bye; exit 3"]["id"] == ended
    assert [listed[text].get("exitCode") for text in ("echo bye; exit 3", "echo after")] == [None, None]
    deadline = time.monotonic() + 30  # its labeler outlives the shell a moment: what it read reaches the log after
    while (logged := client.get(f"{prefix}/command/{ended}/logs", headers=SDK).json()["stdout"]) != "bye\n":
        assert time.monotonic() < deadline and logged == "", logged


def test_an_asynchronous_command_holds_the_shell_until_it_ends(session: tuple[httpx.Client, str]) -> None:
    started = _exec(session, "sleep 0.5; echo first > order", runAsync=True)
    assert started == {"cmdId": started["cmdId"], "output": None, "stdout": None, "stderr": None, "exitCode": None}
    assert _exec(session, "echo second >> order; cat order")["stdout"] == "first\nsecond\n"


def test_each_line_is_logged_with_its_streams_marker(session: tuple[httpx.Client, str]) -> None:
    got = _exec(session, "printf 'a\\nb'; printf 'oops' >&2")
    # The SDK 0.226 gets the log itself; the two labelers race, as the daemon's: the streams interleave any way.
    assert sorted(got["output"].splitlines(keepends=True)) == [
        f"{STDOUT_PREFIX}a\n",
        f"{STDOUT_PREFIX}b\n",
        f"{STDERR_PREFIX}oops\n",
    ]
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
    assert {k for k, v in got.items() if v is not None} - {"cmdId", "exitCode"} == fields
    assert set(got) == {"cmdId", "exitCode", "output", "stdout", "stderr"}  # the daemon's nil pointers are nulls
    assert _in_either_order(got["output"], output)
    client, prefix = session
    logs = client.get(f"{prefix}/command/{got['cmdId']}/logs", headers=headers)
    if "stdout" in fields:
        assert logs.json() == {"output": got["output"], "stdout": "o\n", "stderr": "e\n"}
    else:
        assert logs.text == got["output"]


def _in_either_order(got: str, expected: str) -> bool:
    """The two lines of ``expected`` in either order (the stdout and stderr labelers race, as the daemon's)."""
    first, second = expected.splitlines(keepends=True)
    return got in (first + second, second + first)


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
        with pytest.raises(DaytonaCommandAlreadyCompletedError, match="already completed with exit code 0"):
            sandbox.process.send_session_command_input("work", ran.cmd_id, "late")
    finally:
        sandbox.delete()


def test_the_sdk_raises_with_the_daemons_prefixed_words(api_url: str, api_key: str) -> None:
    """The daemon's typed errors carry common-go's prefix (``not found: ``, ``conflict: ``, ``gone: ``), and the SDK
    raises its class for the code, that message after its own words for the call."""
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        with pytest.raises(DaytonaNotFoundError) as missing:
            sandbox.process.get_session("nope")
        assert str(missing.value) == "Failed to get session: not found: session not found"
        sandbox.process.create_session("work")
        with pytest.raises(DaytonaConflictError) as twice:
            sandbox.process.create_session("work")
        assert str(twice.value) == "Failed to create session: conflict: session already exists"
        with pytest.raises(DaytonaNotFoundError) as no_command:
            sandbox.process.get_session_command("work", "nope")
        assert str(no_command.value) == "Failed to get session command: not found: command not found"
        ran = sandbox.process.execute_session_command("work", SessionExecuteRequest(command="true"))
        with pytest.raises(DaytonaCommandAlreadyCompletedError) as late:
            sandbox.process.send_session_command_input("work", ran.cmd_id, "late")
        assert (
            str(late.value)
            == "Failed to send session command input: gone: command has already completed with exit code 0"
        )
    finally:
        sandbox.delete()


def test_demux_takes_each_streams_lines() -> None:
    assert demux(f"{STDOUT_PREFIX}a\n{STDERR_PREFIX}c\n{STDOUT_PREFIX}\n{STDOUT_PREFIX}b\n") == ("a\n\nb\n", "c\n")
    assert output_shape({"x-daytona-sdk-version": "0.168.0-dev.1"}) == "split"


def test_the_daemons_words_for_sessions_and_commands_it_has_not(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session
    base = prefix.rsplit("/", 1)[0]
    refusals = [
        (client.post(base, json={"sessionId": "s"}), 409, "conflict: session already exists"),
        (
            client.post(base, json={"sessionId": "entrypoint"}),
            400,
            "bad request: provided session ID is reserved and cannot be created/overridden",
        ),
        (
            client.post(base + "/entrypoint/exec", json={"command": "true"}),
            400,
            "bad request: can't execute command in entrypoint session",
        ),
        (client.delete(base + "/entrypoint"), 400, "bad request: can't delete entrypoint session"),
        (client.get(base + "/nope"), 404, "not found: session not found"),
        (client.get(prefix + "/command/nope"), 404, "not found: command not found"),
        (
            client.post(base + "/nope/exec", json={"command": "true"}),
            500,
            "failed to execute command: not found: session not found",
        ),
        (client.post(prefix + "/command/nope/input", json={"data": "x"}), 404, "not found: command not found"),
        (
            client.post(prefix + "/command/nope/input", json={}),
            400,
            "invalid body request: Key: 'SessionSendInputRequest.Data' Error:Field validation for 'Data' failed on"
            " the 'required' tag",
        ),
        (
            client.post(base + "/entrypoint/command/x/input", json={"data": "x"}),
            400,
            "bad request: can't send input to entrypoint session",
        ),
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
    ],
)
def test_the_state_survives_what_a_command_does_to_its_shell(
    session: tuple[httpx.Client, str], first: str, then: str, expected: str
) -> None:
    _exec(session, first)
    got = _exec(session, then)
    assert (got["stdout"], got["stderr"], got["exitCode"]) == (expected, "", 0), got


def test_unsetting_a_sandbox_variable_lasts(quick: EmulatorServer, api_key: str) -> None:
    client = httpx.Client(base_url=quick.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
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


def test_a_background_job_outlives_its_command(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "sleep 60 >/dev/null 2>&1 & job=$!")
    got = _exec(session, 'kill -0 "$job" && echo alive; jobs -p | grep -qx "$job" && echo "a job of this shell"')
    assert got["stdout"] == "alive\na job of this shell\n"


def test_a_job_that_keeps_the_output_open_keeps_the_command_running(session: tuple[httpx.Client, str]) -> None:
    """The labelers end when every writer of the command's output has closed it, as the daemon's: a job started
    without a redirection holds the command until it ends."""
    assert _exec(session, "(sleep 0.3; echo late) & echo early")["stdout"] == "early\nlate\n"


def test_set_options_and_traces_last_as_in_the_daemons_shell(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "set -x")
    got = _exec(session, "Z=3; echo $Z")
    assert got["stdout"] == "3\n"
    assert got["stderr"].endswith("++ Z=3\n++ echo 3\n") and got["stderr"].startswith("+ . ")  # the sourcing too


def test_input_reaches_the_running_asynchronous_command_and_is_echoed(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session

    def send(command: str, data: str) -> httpx.Response:
        return client.post(f"{prefix}/command/{command}/input", json={"data": data})

    echoed = _exec(session, "read a; echo got $a", runAsync=True)["cmdId"]
    queued = _exec(session, "read b; echo got $b", runAsync=True, suppressInputEcho=True)["cmdId"]
    refused = send(queued, "early")  # the daemon makes a command's input pipe when the shell comes to it
    home = client.get(prefix.split("/process/")[0] + "/user-home-dir").json()["dir"]
    pipe = f"{home}/.daytona/sessions/s/{queued}/input.pipe"
    assert (refused.status_code, refused.json()["message"]) == (
        500,
        f"internal server error: failed to open input pipe: open {pipe}: no such file or directory",
    )
    assert send(echoed, "one").status_code == 204
    while (sent := send(queued, "two")).status_code == 500:  # each try a round trip: until the shell comes to it
        assert sent.json()["message"] == refused.json()["message"]
    assert sent.status_code == 204, sent.text
    assert _exec(session, "echo after")["stdout"] == "after\n"  # the shell ran both before this one
    unread = send(echoed, "more")  # ended, but nothing has read its exit code: the daemon looks for its pipe
    assert (unread.status_code, unread.json()["message"]) == (
        500,
        f"internal server error: failed to open input pipe: open {pipe.replace(queued, echoed)}: "
        "no such file or directory",
    )
    assert client.get(f"{prefix}/command/{echoed}").json()["exitCode"] == 0  # read: the daemon keeps it now
    late = send(echoed, "more")
    assert (late.status_code, late.json()["message"]) == (410, "gone: command has already completed with exit code 0")
    assert late.json()["code"] == "COMMAND_ALREADY_COMPLETED"  # the SDK's DaytonaCommandAlreadyCompletedError
    logs = [client.get(f"{prefix}/command/{c}/logs", headers=SDK).json()["stdout"] for c in (echoed, queued)]
    assert logs == ["one\ngot one\n", "got two\n"]


def test_a_synchronous_command_finds_its_stdin_at_its_end_and_input_at_a_later_read(
    session: tuple[httpx.Client, str],
) -> None:
    """As the daemon's FIFO: the first read of a synchronous command meets the end of its stdin (the wrapper's
    writer opened and closed it), input sent while it runs is accepted (204, echoed) and comes to a later read."""
    client, prefix = session
    program = 'read a; echo "a=[$a]"; until read b; do sleep 0.02; done; echo "b=[$b]"'
    answer: list[Any] = []
    runner = threading.Thread(target=lambda: answer.append(_exec(session, program)))
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while True:  # the command's id, then its first line
            listed = client.get(prefix).json()["commands"]
            running = [c for c in listed if c["command"] == program]
            if running:
                logs = client.get(f"{prefix}/command/{running[0]['id']}/logs", headers=SDK).json()["stdout"]
                if logs == "a=[]\n":
                    break
            assert time.monotonic() < deadline, listed
        sent = client.post(f"{prefix}/command/{running[0]['id']}/input", json={"data": "late"})
        assert sent.status_code == 204, sent.text
    finally:
        runner.join(timeout=30)
    assert not runner.is_alive()
    assert answer[0]["stdout"] == "a=[]\nlate\nb=[late]\n" and answer[0]["exitCode"] == 0
    late = client.post(f"{prefix}/command/{answer[0]['cmdId']}/input", json={"data": "more"})
    assert late.status_code == 410  # the synchronous answer carried its exit code: the daemon keeps it


def test_a_listing_records_an_ended_commands_exit_code(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session
    ended = _exec(session, "true", runAsync=True)["cmdId"]
    assert _exec(session, "echo next")["exitCode"] == 0  # after the asynchronous one, in the same shell
    send = lambda: client.post(f"{prefix}/command/{ended}/input", json={"data": "x"})  # noqa: E731
    assert send().status_code == 500
    sandbox_sessions = prefix.rsplit("/", 1)[0]
    assert any(c.get("exitCode") == 0 for s in client.get(sandbox_sessions).json() for c in s["commands"])
    assert send().status_code == 410


def test_a_quick_asynchronous_command_leaves_the_shell_ready(session: tuple[httpx.Client, str]) -> None:
    """The wrapper's stdin helper of an asynchronous command is killed as the command ends: a command that ends at
    once used to end before the helper had dropped the shell's TERM trap, the SIGTERM was lost, and the shell waited
    for the helper for ever (the next command hung)."""
    client, prefix = session
    sessions = prefix.rsplit("/", 1)[0]
    for n in range(6):
        name = f"quick{n}"
        assert client.post(sessions, json={"sessionId": name}).status_code == 201
        ended = client.post(f"{sessions}/{name}/exec", json={"command": "true", "runAsync": True}, headers=SDK)
        assert ended.status_code == 202, ended.text
        after = client.post(f"{sessions}/{name}/exec", json={"command": "echo next"}, headers=SDK)
        assert (after.status_code, after.json()["stdout"]) == (200, "next\n")


def test_errexit_in_a_session_ends_no_command_by_the_wrappers_own_steps(session: tuple[httpx.Client, str]) -> None:
    """``set -e`` lasts in the session's shell; the wrapper's own steps (its stdin helpers, its waits) never fail
    it. (The daemon's wrapper would: its ``kill`` of a ``cat`` already gone fails, and its shell exits before it
    writes the exit code; see docs/daytona.md.) A command's own failure still ends the shell, as there."""
    client, prefix = session
    assert _exec(session, "set -e")["exitCode"] == 0
    assert _exec(session, "echo one")["stdout"] == "one\n"
    started = _exec(session, "echo two", runAsync=True)["cmdId"]
    assert _exec(session, "echo three")["stdout"] == "three\n"  # after the asynchronous one ended
    assert client.get(f"{prefix}/command/{started}").json()["exitCode"] == 0


def test_the_log_of_a_running_command_is_there_as_it_comes(session: tuple[httpx.Client, str]) -> None:
    client, prefix = session
    command = _exec(session, "echo first; read go; echo second", runAsync=True)["cmdId"]
    deadline = time.monotonic() + 30
    while (logs := client.get(f"{prefix}/command/{command}/logs", headers=SDK).json())["stdout"] != "first\n":
        assert time.monotonic() < deadline and logs["stdout"] == "", logs  # each look a round trip to the server
    assert "exitCode" not in client.get(f"{prefix}/command/{command}").json()
    assert client.post(f"{prefix}/command/{command}/input", json={"data": "go"}).status_code == 204
    assert _exec(session, "true")["exitCode"] == 0
    assert client.get(f"{prefix}/command/{command}/logs", headers=SDK).json()["stdout"] == "first\ngo\nsecond\n"


def test_the_sdk_follows_a_commands_log_as_it_runs(quick: EmulatorServer, api_key: str) -> None:
    """``get_session_command_logs_async`` streams the log over the ``follow`` WebSocket: the command waits for an
    input that the stdout callback sends only once it has seen the first line, so the test ends only if that line
    came while the command ran."""

    async def scenario() -> tuple[list[str], list[str]]:
        async with AsyncDaytona(DaytonaConfig(api_url=quick.url + "/api", api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            try:
                await sandbox.process.create_session("live")
                run = SessionExecuteRequest(command="echo ready; read go; echo got $go; echo done >&2", run_async=True)
                started = await sandbox.process.execute_session_command("live", run)
                out: list[str] = []
                err: list[str] = []
                sent: list[asyncio.Task[None]] = []

                def on_stdout(chunk: str) -> None:
                    out.append(chunk)
                    if "ready" in chunk and not sent:
                        send = sandbox.process.send_session_command_input("live", started.cmd_id, "yes")
                        sent.append(asyncio.ensure_future(send))

                follow = sandbox.process.get_session_command_logs_async("live", started.cmd_id, on_stdout, err.append)
                await asyncio.wait_for(follow, 30)
                await sent[0]
                return out, err
            finally:
                await sandbox.delete()

    out, err = asyncio.run(scenario())
    assert "".join(out) == "ready\nyes\ngot yes\n" and "".join(err) == "done\n"


def test_deleting_a_session_ends_its_shell_its_jobs_and_what_waits_on_it(
    quick: EmulatorServer, session: tuple[httpx.Client, str]
) -> None:
    client, prefix = session
    job = int(_exec(session, "sleep 60 >/dev/null 2>&1 & echo $!")["stdout"])
    async_client = httpx.AsyncClient(base_url=str(client.base_url), headers=client.headers, timeout=30)

    async def waiting_then_delete() -> tuple[httpx.Response, httpx.Response, float]:
        # A command that ignores the SIGTERM: still running when the session goes (one that dies of it would end, and
        # its answer would be its exit code, 143, as the daemon's is).
        waiting = asyncio.ensure_future(async_client.post(prefix + "/exec", json={"command": STUBBORN}))
        while not (
            listed := [c for c in (await async_client.get(prefix)).json()["commands"] if c["command"] == STUBBORN]
        ):
            pass  # each listing is a round trip to the server: the command is listed once the shell has it
        logs = f"{prefix}/command/{listed[0]['id']}/logs"
        while (await async_client.get(logs, headers=SDK)).json()["stdout"] != "trapped\n":
            pass  # and running once its trap is set (before, the shell may still be opening its stdin)
        began = time.monotonic()
        deleted = await async_client.delete(prefix)
        return deleted, await waiting, time.monotonic() - began

    deleted, waited, took = asyncio.run(waiting_then_delete())
    assert deleted.status_code == 204
    assert (waited.status_code, waited.json()["message"]) == (
        500,
        "failed to execute command: bad request: session cancelled",
    )
    assert took >= GRACE  # the shell caught the SIGTERM (the wrapper's traps), so it was killed after the grace
    assert all_dead([job])
    assert client.get(prefix).status_code == 404


STUBBORN = "trap '' TERM; echo trapped; sleep 60"


def test_a_session_shell_runs_under_a_uid_of_its_own(session: tuple[httpx.Client, str]) -> None:
    uid = int(_exec(session, "id -u")["stdout"])
    if os.geteuid() == 0:
        assert uid != 0
    assert _exec(session, "touch mine && stat -c %u mine")["stdout"] == f"{uid}\n"


def test_nothing_of_the_sandboxs_runs_with_the_emulators_rights(quick: EmulatorServer, api_key: str) -> None:
    """A session's shell and an interpreter context start as root and drop to their uid: the sandbox's env (here a
    ``PYTHONPATH`` of ``.``) and home are theirs only after the drop, so a ``json.py`` a program left in the home is
    never imported by the starting process, while the interpreter's code still finds the home's modules."""
    client = httpx.Client(base_url=quick.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    sid = client.post("/api/sandbox", json={"env": {"PYTHONPATH": "."}}).json()["id"]
    try:
        prefix = f"/toolbox/{sid}/process/session"
        assert client.post(prefix, json={"sessionId": "first"}).status_code == 201
        planted = "import os\nopen('imported-by', 'a').write(f'{os.geteuid()}\\n')\n"
        _exec((client, prefix + "/first"), f"printf %s {shlex.quote(planted)} > json.py; echo 'X = 42' > mine.py")
        assert client.post(prefix, json={"sessionId": "second"}).status_code == 201
        context = client.post(f"/toolbox/{sid}/process/interpreter/context", json={})
        assert context.status_code == 200, context.text
        got = _exec((client, prefix + "/second"), "cat imported-by 2>/dev/null; echo end")
        assert got["stdout"] == "end\n"  # neither start imported the planted module
        daytona = Daytona(DaytonaConfig(api_url=quick.url + "/api", api_key=api_key))
        ran = daytona.get(sid).code_interpreter.run_code("import mine, sys; print(mine.X, sys.flags.utf8_mode)")
        assert ran.stdout == "42 0\n", ran  # and a UTF-8 locale from the start, not the UTF-8 mode of a bare C one
    finally:
        client.delete(f"/api/sandbox/{sid}")


def test_a_command_that_kills_its_labelers_ends_and_the_shell_goes_on(session: tuple[httpx.Client, str]) -> None:
    _exec(session, "true")  # the wrapper's traps are set: the shell outlives the SIGTERM of its group
    ended = _exec(session, "echo before; kill 0")  # the labelers die with it, whatever they had not written yet
    assert ended["exitCode"] is not None
    assert _exec(session, "echo next")["stdout"] == "next\n"


def test_a_sessions_programs_get_the_default_signals_and_an_env_it_can_hold(
    quick: EmulatorServer, api_key: str
) -> None:
    """SIGPIPE and SIGXFSZ as any shell gets them (Python, which starts the shell, ignores both); a sandbox variable
    no environment can hold (a name with ``=``) is left out, not a dead shell."""
    client = httpx.Client(base_url=quick.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    sid = client.post("/api/sandbox", json={"env": {"A=B": "1", "KEPT": "yes"}}).json()["id"]
    try:
        prefix = f"/toolbox/{sid}/process/session"
        assert client.post(prefix, json={"sessionId": "s"}).status_code == 201
        got = _exec((client, prefix + "/s"), 'yes | head -1; echo "${PIPESTATUS[@]}"; echo "$KEPT"')
        assert (got["stdout"], got["stderr"]) == ("y\n141 0\nyes\n", "")
    finally:
        client.delete(f"/api/sandbox/{sid}")


def test_input_still_waiting_when_the_session_goes_ends_and_spoils_no_other(
    quick: EmulatorServer, session: tuple[httpx.Client, str]
) -> None:
    client, prefix = session
    deaf = _exec(session, "sleep 1000", runAsync=True)["cmdId"]
    async_client = httpx.AsyncClient(base_url=str(client.base_url), headers=client.headers, timeout=30)

    async def stuck_input_then_delete() -> tuple[int, int]:
        # More than a pipe holds, to a command that never reads: the request waits for room.
        sending = asyncio.ensure_future(
            async_client.post(f"{prefix}/command/{deaf}/input", json={"data": "x" * 400_000})
        )
        while not (await async_client.get(f"{prefix}/command/{deaf}/logs", headers=SDK)).json()["stdout"]:
            pass  # the echo is logged before the write: the request is in its wait once it shows
        deleted = await async_client.delete(prefix)
        return deleted.status_code, (await sending).status_code

    assert asyncio.run(stuck_input_then_delete()) == (204, 204)
    assert client.post(prefix.rsplit("/", 1)[0], json={"sessionId": "s"}).status_code == 201
    reader = _exec(session, "read a; echo got $a", runAsync=True)["cmdId"]
    assert client.post(f"{prefix}/command/{reader}/input", json={"data": "fresh"}).status_code == 204
    assert _exec(session, "true")["exitCode"] == 0
    assert client.get(f"{prefix}/command/{reader}/logs", headers=SDK).json()["stdout"] == "fresh\ngot fresh\n"
