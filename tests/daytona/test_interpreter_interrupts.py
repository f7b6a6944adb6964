"""A timeout interrupts the interpreter's code as the daemon does (``repl_client.go``'s ``executeCode``): SIGINT to
the worker, whose code ends in ``KeyboardInterrupt``; the worker reports it as control ``interrupted`` and the socket
closes with 4008, the context's state kept. Only code that has not ended 2 s after the SIGINT is killed (its state
with it). Code that handles the interrupt and ends within the grace ends as it ends (close 1000). And the first frame
is refused as the daemon's controller refuses it.

Why it matters to a trainer: after a timed-out turn, the real sandbox still holds the variables of the turns before;
an emulator that restarted the context would train a tool on a world where a timeout forgets everything.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import aiohttp
import pytest
from daytona import AsyncDaytona, DaytonaConfig, DaytonaTimeoutError

from emulator.server import EmulatorServer

from .conftest import interpreter_frames

# Waits on a SIGINT in a loop that swallows it: only the kill after the grace ends it.
STUBBORN = "import time\nwhile True:\n    try:\n        time.sleep(30)\n    except KeyboardInterrupt:\n        pass\n"


@pytest.fixture
def sandbox(graceful_sandbox: str) -> str:
    return graceful_sandbox


_send = interpreter_frames


def _close(server: EmulatorServer, api_key: str, sid: str, first: str | dict[str, Any]) -> tuple[int | None, str]:
    """The close code and reason of a first frame the daemon refuses."""

    async def close() -> tuple[int | None, str]:
        url = server.url.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers={"Authorization": f"Bearer {api_key}"}) as ws,
        ):
            await ws.send_str(first if isinstance(first, str) else json.dumps(first))
            message = await ws.receive()
            assert message.type == aiohttp.WSMsgType.CLOSE, message
            return message.data, str(message.extra or "")

    return asyncio.run(close())


def test_a_timeout_interrupts_the_code_and_keeps_the_contexts_state(
    graceful: EmulatorServer, api_key: str, sandbox: str
) -> None:
    _send(graceful, api_key, sandbox, {"code": "state = 41"})
    slow = "import time\nprint('start', flush=True)\ntime.sleep(30)"
    frames, code = _send(graceful, api_key, sandbox, {"code": slow, "timeout": 1})
    assert code == 4008
    assert [f["type"] for f in frames] == ["stdout", "control"]
    assert frames[0]["text"] == "start\n" and frames[1]["text"] == "interrupted"
    assert all(set(f) == {"type", "text", "name", "value", "traceback"} for f in frames)  # the daemon's every field
    frames, code = _send(graceful, api_key, sandbox, {"code": "print(state + 1)"})
    assert code == 1000 and frames[0]["text"] == "42\n"
    assert frames[-1] == {"type": "control", "text": "completed", "name": "", "value": "", "traceback": ""}


def test_the_codes_own_keyboard_interrupt_is_a_timeout_to_the_sdk(graceful: EmulatorServer, api_key: str) -> None:
    async def scenario() -> str:
        async with AsyncDaytona(DaytonaConfig(api_url=graceful.url + "/api", api_key=api_key)) as daytona:
            sandbox = await daytona.create()
            await sandbox.code_interpreter.run_code("kept = 'yes'")
            with pytest.raises(DaytonaTimeoutError):
                await sandbox.code_interpreter.run_code("raise KeyboardInterrupt")
            result = await sandbox.code_interpreter.run_code("print(kept)")
            await sandbox.delete()
            return result.stdout

    assert asyncio.run(scenario()) == "yes\n"


def test_code_that_handles_the_interrupt_in_the_grace_ends_as_it_ends(
    graceful: EmulatorServer, api_key: str, sandbox: str
) -> None:
    handled = "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt as exc:\n    print('caught', exc)\n"
    frames, code = _send(graceful, api_key, sandbox, {"code": handled, "timeout": 1})
    assert code == 1000
    assert [(f["type"], f["text"]) for f in frames] == [
        ("stdout", "caught Execution interrupted\n"),  # the worker's handler's message
        ("control", "completed"),
    ]
    raising = "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    raise ValueError('late')\n"
    frames, code = _send(graceful, api_key, sandbox, {"code": raising, "timeout": 1})
    assert code == 1000
    assert [(f["type"], f.get("name")) for f in frames] == [("error", "ValueError"), ("control", "")]


def test_code_that_outlives_the_grace_is_killed_and_its_state_goes(
    graceful: EmulatorServer, api_key: str, sandbox: str
) -> None:
    _send(graceful, api_key, sandbox, {"code": "state = 1"})
    frames, code = _send(graceful, api_key, sandbox, {"code": "print('in', flush=True)\n" + STUBBORN, "timeout": 1})
    assert code == 4008
    assert [(f["type"], f["text"]) for f in frames] == [("stdout", "in\n")]  # killed: no control message
    frames, code = _send(graceful, api_key, sandbox, {"code": "print('state' in globals())"})
    assert code == 1000 and frames[0]["text"] == "False\n"


def test_a_sigint_between_executions_is_ignored(graceful: EmulatorServer, api_key: str, sandbox: str) -> None:
    _send(graceful, api_key, sandbox, {"code": "import os\nstate = os.getpid()"})
    [context] = graceful.emulator.daytona.interpreters.contexts(sandbox).values()
    assert context.process is not None
    graceful.emulator.daytona._loop.call_soon_threadsafe(context.process.send_signal, signal.SIGINT)  # type: ignore[union-attr]
    frames, code = _send(graceful, api_key, sandbox, {"code": "import os\nprint(state == os.getpid())"})
    assert code == 1000 and frames[0]["text"] == "True\n"


@pytest.mark.parametrize(
    ("first", "code", "reason"),
    [
        ("garbage", 1002, "invalid JSON payload"),
        ({"code": "print(1)", "timeout": 1.5}, 1002, "invalid JSON payload"),
        ({"code": "print(1)", "envs": {"A": 1}}, 1002, "invalid JSON payload"),
        ({"code": ""}, 1008, "code is required"),
        ({"code": "print(1)", "timeout": -1}, 1008, "timeout must be greater than or equal to 0"),
        ({"code": "print(1)", "contextId": "no-such-context"}, 1008, "context not found: no-such-context"),
    ],
)
def test_a_first_frame_the_daemon_refuses_closes_the_socket_as_it_does(
    graceful: EmulatorServer, api_key: str, sandbox: str, first: str | dict[str, Any], code: int, reason: str
) -> None:
    assert _close(graceful, api_key, sandbox, first) == (code, reason)


def test_field_names_match_without_regard_to_case(graceful: EmulatorServer, api_key: str, sandbox: str) -> None:
    first = {"Code": "import os\nprint(os.environ['A'])", "ENVS": {"A": "z"}}
    frames, code = _send(graceful, api_key, sandbox, first)
    assert code == 1000 and frames[0]["text"] == "z\n"


def test_code_that_ends_its_process_closes_the_socket_as_the_daemons_monitor_does(
    graceful: EmulatorServer, api_key: str, sandbox: str
) -> None:
    _send(graceful, api_key, sandbox, {"code": "state = 1"})
    frames, code = _send(graceful, api_key, sandbox, {"code": "import os\nprint('bye', flush=True)\nos._exit(3)"})
    assert code == 1001 and [(f["type"], f["text"]) for f in frames] == [("stdout", "bye\n")]
    frames, code = _send(graceful, api_key, sandbox, {"code": "print('state' in globals())"})
    assert code == 1000 and frames[0]["text"] == "False\n"  # a fresh process
