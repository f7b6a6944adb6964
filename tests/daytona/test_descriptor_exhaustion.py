"""Running out of descriptors, processes or uids: the daemon's answers, no traceback, nothing kept.

One emulator process holds the descriptors that a real deployment spreads over a container per sandbox (an
interpreter context keeps its pipes, a session shell five descriptors). It raises its soft ``RLIMIT_NOFILE`` to the
hard limit, as the daemon's Go runtime does; where even that runs out, a context that cannot start is answered as the
daemon answers it (the WebSocket's 1011 with the error chain, ``POST .../context``'s 500), and what the failed start
took (its uid, its home) goes back, so the emulator works again once sandboxes are deleted.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from emulator.daytona import DEFAULT_API_KEY
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.server import EmulatorServer

from .conftest import make_server

AUTH = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
#: The daemon's words when its default context's worker cannot make its pipes.
NO_PIPE = "failed to create stdin pipe: pipe2: too many open files"


def _limited(soft: int, hard: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def _soft_limit_after_emulator(soft: int, hard: int) -> int:
    """The soft limit of a fresh process that made an ``Emulator``, started with ``(soft, hard)``."""
    program = (
        "import resource; from emulator.app import Emulator; Emulator(); "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        preexec_fn=_limited(soft, hard),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout.strip())


def test_an_emulator_raises_its_soft_descriptor_limit_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    target = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    assert _soft_limit_after_emulator(64, target) == target
    assert _soft_limit_after_emulator(target, target) == target  # nothing to raise; never lowered


def _run_code(base: str, sid: str, code: str = "print(6 * 7)") -> tuple[list[dict[str, Any]], int | None, str]:
    """One interpreter execution: its frames, the close code and the close reason."""

    async def go() -> tuple[list[dict[str, Any]], int | None, str]:
        url = base.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"
        frames: list[dict[str, Any]] = []
        reason = ""
        async with aiohttp.ClientSession() as session, session.ws_connect(url, headers=AUTH) as ws:
            await ws.send_str(json.dumps({"code": code}))
            while True:
                message = await ws.receive(timeout=60)
                if message.type == aiohttp.WSMsgType.TEXT:
                    frames.append(json.loads(message.data))
                    continue
                if message.type == aiohttp.WSMsgType.CLOSE:
                    reason = message.extra or ""
                break
            return frames, ws.close_code, reason

    return asyncio.run(go())


def _stdout(frames: list[dict[str, Any]]) -> str:
    return "".join(frame["text"] for frame in frames if frame["type"] == "stdout")


@pytest.fixture
def starved() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``serve`` in a process whose hard descriptor limit is 160: some twenty interpreter contexts fill it."""
    command = [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--daytona-api-key", DEFAULT_API_KEY]
    process = subprocess.Popen(
        [*command, "--daytona-tier", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limited(160, 160),
        start_new_session=True,
    )
    assert process.stdout is not None
    base = ""
    for line in process.stdout:
        if line.startswith("Sandbox Fusion"):
            base = line.split()[2].removesuffix("/run_code")
        if line.startswith("Control plane"):
            break
    try:
        assert base, "the emulator did not start"
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_context_that_cannot_start_is_answered_as_the_daemon_answers(
    starved: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = starved
    created: list[str] = []
    refusal: tuple[int | None, str] | None = None
    with httpx.Client(base_url=base, headers=AUTH, timeout=60) as client:
        for _ in range(150):
            answer = client.post("/api/sandbox", json={})
            assert answer.status_code == 200, answer.text
            created.append(answer.json()["id"])
            frames, code, reason = _run_code(base, created[-1])
            if code != 1000:
                assert frames == []
                refusal = (code, reason)
                break
            assert _stdout(frames) == "42\n"
        assert refusal == (1011, f"failed to get default context: failed to start context: {NO_PIPE}")
        assert len(created) > 5  # the limit was reached by contexts, not at once

        statuses = []
        for _ in range(40):  # each context that starts holds more: one soon cannot
            made = client.post(f"/toolbox/{created[-1]}/process/interpreter/context", json={})
            statuses.append(made.status_code)
            if made.status_code != 200:
                assert made.status_code == 500
                assert made.json()["message"] == f"failed to start context: {NO_PIPE}"
                break
        assert statuses[-1] == 500
        listed = client.get(f"/toolbox/{created[-1]}/process/interpreter/context").json()["contexts"]
        assert len(listed) == statuses.count(200)  # the daemon keeps no context whose worker did not start

        for number in range(40):  # a session's shell holds five: one soon cannot start
            made = client.post(f"/toolbox/{created[-1]}/process/session", json={"sessionId": f"s{number}"})
            if made.status_code != 201:
                # the shell's pipes (the daemon's "pipe2: too many open files"), or a step before them
                assert made.status_code == 500
                assert made.json()["message"].endswith("too many open files"), made.text
                break
        else:
            pytest.fail("every session started")
        listed = client.get(f"/toolbox/{created[-1]}/process/session").json()
        assert len(listed) == number  # the one that did not start is not kept

        for sid in created:
            assert client.delete(f"/api/sandbox/{sid}").status_code == 200
        fresh = client.post("/api/sandbox", json={}).json()["id"]
        frames, code, _ = _run_code(base, fresh)
        assert code == 1000 and _stdout(frames) == "42\n"
    process.terminate()
    _, errors = process.communicate(timeout=30)
    assert "Traceback" not in errors


@pytest.fixture(scope="module")
def one_uid() -> Iterator[EmulatorServer]:
    with make_server(EmulatedDaytona(interpreter_uid_count=1)) as server:
        yield server


@pytest.mark.skipif(os.geteuid() != 0, reason="interpreter uids are used only as root")
def test_a_context_beyond_the_uid_pool_is_refused_with_the_reason(one_uid: EmulatorServer) -> None:
    with httpx.Client(base_url=one_uid.url, headers=AUTH, timeout=60) as client:
        first, second = (client.post("/api/sandbox", json={}).json()["id"] for _ in range(2))
        frames, code, _ = _run_code(one_uid.url, first)
        assert code == 1000 and _stdout(frames) == "42\n"
        frames, code, reason = _run_code(one_uid.url, second)
        assert frames == []
        assert (code, reason) == (
            1011,
            "failed to get default context: failed to start context: failed to start Python worker: no free uid "
            "(interpreter_uid_count)",
        )
        assert client.delete(f"/api/sandbox/{first}").status_code == 200
        frames, code, _ = _run_code(one_uid.url, second)  # the uid came back with the first sandbox
        assert code == 1000 and _stdout(frames) == "42\n"
        client.delete(f"/api/sandbox/{second}")


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_session_that_cannot_start_leaves_no_descriptor_open(
    server: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that fails midway (here: the shell's input reader cannot be opened) closes the pipes it made."""
    from emulator.daytona import sessions as sessions_module

    real_open = os.open

    def no_input_reader(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith("/proc/self/fd/"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)

    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        sid = client.post("/api/sandbox", json={}).json()["id"]
        assert client.post(f"/toolbox/{sid}/process/session", json={"sessionId": "warm"}).status_code == 201
        before = _descriptors()
        monkeypatch.setattr(sessions_module.os, "open", no_input_reader)
        made = client.post(f"/toolbox/{sid}/process/session", json={"sessionId": "s"})
        monkeypatch.undo()
        assert (made.status_code, made.json()["message"]) == (500, "pipe2: too many open files")
        deadline = time.monotonic() + 5
        while _descriptors() != before and time.monotonic() < deadline:
            time.sleep(0.01)  # what the server's thread closes, it closes a moment after its answer
        assert _descriptors() == before  # before: the two pipes made so far (four descriptors) were left open
        assert [s["sessionId"] for s in client.get(f"/toolbox/{sid}/process/session").json()] == ["warm"]
        client.delete(f"/api/sandbox/{sid}")


def test_an_execute_that_cannot_start_is_the_daemons_exit_code_minus_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon answers its ``cmd.Start`` error with HTTP 200, ``exitCode: -1`` and the error as the result."""
    from emulator.executor import zygote

    real_start = zygote.Zygote.start

    async def cannot_start(self: zygote.Zygote) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(zygote.Zygote, "start", cannot_start)
    with make_server(EmulatedDaytona()) as server, httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
        client = c
        sid = client.post("/api/sandbox", json={}).json()["id"]
        failed = client.post(f"/toolbox/{sid}/process/execute", json={"command": "echo hi"})
        assert failed.status_code == 200  # before: a 500
        assert failed.json()["exitCode"] == -1 and "Too many open files" in failed.json()["result"]
        monkeypatch.setattr(zygote.Zygote, "start", real_start)
        ran = client.post(f"/toolbox/{sid}/process/execute", json={"command": "echo hi"})
        assert ran.json() == {"exitCode": 0, "result": "hi\n"}


def test_an_execute_whose_home_cannot_be_handed_over_is_exit_code_minus_one(
    server: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Descriptors run out while the home goes to the run's uid: the daemon's 200 and -1 too (was a 400)."""
    from emulator.executor.holders import HOLDERS

    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        sid = client.post("/api/sandbox", json={}).json()["id"]
        assert client.post(f"/toolbox/{sid}/process/execute", json={"command": "true"}).json()["exitCode"] == 0

        def out_of_descriptors(*_args: Any, **_kwargs: Any) -> Any:
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(HOLDERS, "take", out_of_descriptors)
        failed = client.post(f"/toolbox/{sid}/process/execute", json={"command": "echo hi"})
        monkeypatch.undo()
        assert (failed.status_code, failed.json()) == (200, {"exitCode": -1, "result": "pipe2: too many open files"})
        client.delete(f"/api/sandbox/{sid}")
