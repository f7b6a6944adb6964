"""The output of ``/process/execute`` and ``/process/code-run`` as the daemon returns it (its v0.190 source:
``process/execute.go``, ``process/coderun/``): the whole of it, collected in a buffer with no bound while the command
runs, so a big writer is never blocked (Sandbox Fusion's capture, which truncates and blocks, is not the daemon's).
The emulator keeps the first 64 MiB of each stream and drops the rest, still reading it. Bytes that are not UTF-8
are each U+FFFD, as Go's JSON encoder writes them (not Sandbox Fusion's ``[DecodeError]`` for the whole stream).

Why it matters to a trainer: a tool whose command prints a megabyte gets it all, at once, from the real service; an
emulator that cut it at 219,264 characters, or held it until the timeout, would teach the wrong thing.
"""

from __future__ import annotations

import time

import httpx
import pytest
from daytona import Daytona, DaytonaConfig

from emulator.daytona.config import OUTPUT_LIMIT
from emulator.daytona.go_json import go_string


def test_the_sdk_gets_a_megabyte_whole_and_at_once(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        for size in (219_265, 600_000, 1_000_000):
            start = time.monotonic()
            ran = sandbox.process.exec(f"head -c {size} /dev/zero | tr '\\0' a", timeout=30)
            assert (ran.exit_code, ran.result) == (0, "a" * size)
            assert time.monotonic() - start < 15  # not held until the timeout
        ran = sandbox.process.code_run("import sys\nprint('a' * 1_000_000)\nprint('b' * 1_000_000, file=sys.stderr)")
        assert (ran.exit_code, ran.result) == (0, "a" * 1_000_000 + "\n" + "b" * 1_000_000 + "\n")
    finally:
        sandbox.delete()


def test_output_past_the_bound_is_read_and_dropped(tb: tuple[httpx.Client, str]) -> None:
    """The command is not blocked past the bound: it runs on to its end (the ``tail`` it prints after is dropped)."""
    client, prefix = tb
    command = f"head -c {OUTPUT_LIMIT + 2_000_000} /dev/zero | tr '\\0' a; echo; echo tail"
    answer = client.post(prefix + "/process/execute", json={"command": command, "timeout": 60}, timeout=120)
    assert answer.status_code == 200
    assert answer.json()["exitCode"] == 0
    assert answer.json()["result"] == "a" * OUTPUT_LIMIT
    assert OUTPUT_LIMIT == 64 * 1024 * 1024


def test_an_endless_writer_times_out_as_any_command(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": "yes", "timeout": 2})
    assert answer.status_code == 408 and answer.json()["code"] == "REQUEST_TIMEOUT"
    body = {"code": "while True: print('x' * 1000)", "language": "python", "timeout": 2}
    answer = client.post(prefix + "/process/code-run", json=body)
    assert answer.status_code == 408 and answer.json()["code"] == "REQUEST_TIMEOUT"


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"a\xff\xfeb\n", "a\ufffd\ufffdb\n"),
        (b"\xe2\x82", "\ufffd\ufffd"),  # a sequence cut short: each of its bytes
        (b"\xe2\x82a", "\ufffd\ufffda"),
        (b"\xed\xa0\x80", "\ufffd" * 3),  # a surrogate, which UTF-8 cannot hold
        (b"\xc0\x80", "\ufffd" * 2),  # an overlong NUL
        (b"\xf4\x90\x80\x80", "\ufffd" * 4),  # past U+10FFFF
        ("é€😀\n".encode(), "é€😀\n"),
    ],
)
def test_go_string_replaces_each_invalid_byte(data: bytes, text: str) -> None:
    assert go_string(data) == text


def test_the_sdk_gets_each_invalid_byte_as_a_replacement_character(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        ran = sandbox.process.exec("printf 'a\\377\\376b\\n'; printf '\\342\\202'")
        assert (ran.exit_code, ran.result) == (0, "a\ufffd\ufffdb\n\ufffd\ufffd")
        code = "import sys\nsys.stdout.buffer.write(b'a\\xff\\xfeb\\n')\nsys.stderr.buffer.write(b'\\xe2\\x82')"
        ran = sandbox.process.code_run(code)
        assert (ran.exit_code, ran.result) == (0, "a\ufffd\ufffdb\n\ufffd\ufffd")
    finally:
        sandbox.delete()


def test_a_bound_cutting_a_character_does_not_spoil_the_rest(tb: tuple[httpx.Client, str]) -> None:
    """Past the bound a character cut in two is its kept bytes' replacement characters, the rest of the output as
    it was (Sandbox Fusion's capture turns the whole stream into ``[DecodeError]``)."""
    client, prefix = tb
    code = f"import sys\nsys.stdout.write('a' * {OUTPUT_LIMIT - 1} + '\\u20ac')"
    answer = client.post(prefix + "/process/code-run", json={"code": code, "language": "python"}, timeout=120)
    assert answer.status_code == 200
    assert answer.json()["result"] == "a" * (OUTPUT_LIMIT - 1) + "\ufffd"


def test_the_answer_waits_for_every_holder_of_the_output(tb: tuple[httpx.Client, str]) -> None:
    """The daemon's ``cmd.Wait`` returns once every process holding the output's pipe has closed it: a job left in
    the background writes into the answer, the exit code is still the shell's, and the request's timeout still
    ends the wait (408). A job whose output goes elsewhere holds nothing (``nohup ... >/dev/null &``)."""
    client, prefix = tb
    late = {"command": "echo a; (sleep 0.5; echo late) & exit 3"}
    assert client.post(prefix + "/process/execute", json=late).json() == {"exitCode": 3, "result": "a\nlate\n"}
    code = "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.5; echo bg'])\nprint('fg', flush=True)"
    for argv in ([], ["x"]):  # python alone, and the daemon's shell line
        body = {"code": code, "language": "python", "argv": argv}
        assert client.post(prefix + "/process/code-run", json=body).json() == {"exitCode": 0, "result": "fg\nbg\n"}
    start = time.monotonic()
    held = client.post(prefix + "/process/execute", json={"command": "(sleep 60; echo never) &", "timeout": 1})
    assert (held.status_code, held.json()["code"]) == (408, "REQUEST_TIMEOUT")
    elsewhere = client.post(prefix + "/process/execute", json={"command": "nohup sleep 60 >/dev/null 2>&1 & echo ok"})
    assert elsewhere.json() == {"exitCode": 0, "result": "ok\n"}
    assert time.monotonic() - start < 20
