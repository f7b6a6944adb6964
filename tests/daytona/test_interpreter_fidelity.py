"""The interpreter context answers as the daemon's Python worker does (its source, ``repl_worker.py``): tracebacks
keep only the code's own frames, as ``File "<stdin>", line N``; ``sys.exit()`` is a normal end; the code sees the
worker's ``sys.argv`` and ``sys.path[0]``, never the emulator's. And the daemon's errors carry ``source``, so the SDK
raises its precise class. verl's Daytona tool puts ``name: value`` and the traceback in the model's observation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import httpx
import pytest

from emulator.server import EmulatorServer


@pytest.fixture
def sandbox(server: EmulatorServer, api_key: str) -> str:
    created = httpx.post(server.url + "/api/sandbox", json={}, headers={"Authorization": f"Bearer {api_key}"})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _used(frame: dict[str, Any]) -> dict[str, Any]:
    """A frame without the fields the daemon sends empty (every frame has all five)."""
    return {key: value for key, value in frame.items() if value != "" or key in ("type", "text")}


def _run(server: EmulatorServer, api_key: str, sid: str, code: str) -> tuple[list[dict[str, Any]], int | None]:
    async def frames() -> tuple[list[dict[str, Any]], int | None]:
        url = server.url.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"
        headers = {"Authorization": f"Bearer {api_key}"}
        async with aiohttp.ClientSession() as session, session.ws_connect(url, headers=headers) as ws:
            await ws.send_str(json.dumps({"code": code}))
            got = [_used(json.loads(m.data)) async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
            return got, ws.close_code

    return asyncio.run(frames())


def _error(frames: list[dict[str, Any]]) -> dict[str, Any]:
    [error] = [f for f in frames if f.get("type") == "error"]
    return error


@pytest.mark.parametrize(
    ("code", "traceback"),
    [
        (
            "def f():\n    raise ValueError('boom')\n\nf()",
            'Traceback (most recent call last):\n  File "<stdin>", line 4\n  File "<stdin>", line 2\n'
            "ValueError: boom\n",
        ),
        (  # a library's frames are not the code's
            "import json\njson.loads('{')",
            'Traceback (most recent call last):\n  File "<stdin>", line 2\n'
            "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n",
        ),
        ("x = (", "SyntaxError: '(' was never closed (<string>, line 1)\n"),  # no frame of the code's
    ],
)
def test_a_traceback_keeps_only_the_codes_frames(
    server: EmulatorServer, api_key: str, sandbox: str, code: str, traceback: str
) -> None:
    frames, close = _run(server, api_key, sandbox, code)
    assert close == 1000
    assert _error(frames)["traceback"] == traceback


def test_sys_exit_is_a_normal_end(server: EmulatorServer, api_key: str, sandbox: str) -> None:
    frames, close = _run(server, api_key, sandbox, "print('before')\nimport sys\nsys.exit(3)\nprint('after')")
    assert close == 1000 and not [f for f in frames if f.get("type") == "error"]
    assert {"type": "stdout", "text": "before\n"} in frames


def test_the_code_sees_the_workers_argv_and_path(server: EmulatorServer, api_key: str, sandbox: str) -> None:
    """Before, ``sys.path[0]`` was the emulator's own module directory: ``import config`` loaded its module."""
    code = "import sys\nprint(sys.argv, sys.path[0])\nimport config"
    frames, _ = _run(server, api_key, sandbox, code)
    assert {"type": "stdout", "text": "['/tmp/daytona_repl_worker.py'] /tmp\n"} in frames, frames
    assert _error(frames)["name"] == "ModuleNotFoundError"


def test_the_daemons_errors_name_their_source(api_url: str, api_key: str) -> None:
    """With ``source: DAYTONA_DAEMON`` the SDK maps a code to its precise class, as against the real daemon."""
    pytest.importorskip("daytona", reason="needs the [daytona] extra")
    from daytona import Daytona, DaytonaConfig
    from daytona.common.errors import DaytonaFileNotFoundError

    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        with pytest.raises(DaytonaFileNotFoundError):
            sandbox.fs.get_file_info("no-such-file")
    finally:
        daytona.delete(sandbox)
