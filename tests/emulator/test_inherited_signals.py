"""Programs start with every signal at its default, whatever the process running the emulator inherited.

A background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored, and an ignored signal stays
ignored through fork and exec: an emulator started so (a CI step, ``check-reference &``) used to pass that on, and
a program that raised SIGINT at itself (as OpenBLAS's thread failure does, recorded case 32) ran on.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
from collections.abc import Iterator

import httpx
import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona.config import DEFAULT_API_KEY
from emulator.executor import ExecutorConfig
from emulator.server import EmulatorServer

PROGRAM = (
    "import os, signal\n"
    "print(signal.getsignal(signal.SIGQUIT), signal.getsignal(signal.SIGHUP))\n"
    "os.kill(os.getpid(), signal.SIGINT)\n"
    "print('alive')\n"
)


@pytest.fixture
def ignoring() -> Iterator[None]:
    """This process ignores SIGINT, SIGQUIT and SIGHUP while the test starts its emulator and programs."""
    saved = {number: signal.signal(number, signal.SIG_IGN) for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


@pytest.mark.parametrize("mode", ["fast", "faithful"])
def test_sandbox_fusion_programs(ignoring: None, mode: str) -> None:
    emulator = Emulator(EmulatorConfig(executor=ExecutorConfig(python_mode=mode)))

    async def run() -> dict[str, object]:
        transport = httpx.ASGITransport(app=emulator.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox", timeout=60) as client:
                answer = await client.post("/run_code", json={"code": PROGRAM, "language": "python"})
                return dict(answer.json()["run_result"])
        finally:
            await emulator.aclose()

    result = asyncio.run(run())
    assert result["stdout"] == f"{int(signal.SIG_DFL)} {int(signal.SIG_DFL)}\n", result
    assert str(result["stderr"]).rstrip().endswith("KeyboardInterrupt"), result
    assert result["return_code"] == -2, result


def test_daytona_sessions_and_commands(ignoring: None) -> None:
    with EmulatorServer(Emulator()) as server:
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"}, timeout=30)
        created = client.post("/api/sandbox", json={})
        assert created.status_code == 200, created.text
        toolbox = f"/toolbox/{created.json()['id']}"
        try:
            assert client.post(toolbox + "/process/session", json={"sessionId": "s"}).status_code == 201
            # A shell started with SIGINT ignored would pass that on to its commands (and could not trap it).
            command = {"command": f"python3 -c {shlex.quote(PROGRAM)}"}
            in_session = client.post(toolbox + "/process/session/s/exec", json=command).json()
            one_shot = client.post(toolbox + "/process/execute", json=command).json()
            for output in (in_session["output"], one_shot["result"]):
                assert f"{int(signal.SIG_DFL)} {int(signal.SIG_DFL)}\n" in output, output
                assert "alive" not in output and "KeyboardInterrupt" in output, output
        finally:
            client.delete(f"/api/sandbox/{created.json()['id']}")
