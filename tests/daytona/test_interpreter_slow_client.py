"""A client that reads the interpreter's output slower than the code prints it is dropped, as the daemon drops it.

The daemon queues each frame for its client (1,024 at most) and never makes the code wait: a client that lets the
queue fill is a ``slow consumer``. Its close frame does not fit in the full queue, so after five seconds for the
queued frames to leave, the connection is closed with none (the client sees 1006). The code runs on to its end.
Before, the emulator's code waited for the client instead, and the client never fell behind.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from emulator.daytona import DEFAULT_API_KEY
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.server import EmulatorServer

from .conftest import make_server

AUTH = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
ROUTE = "daytona.interpreter.execute"
LINES = 100_000


@pytest.fixture(scope="module")
def small_queue() -> Iterator[EmulatorServer]:
    """A server whose clients get a queue of 16 frames and half a second to take them once dropped."""
    config = EmulatedDaytona(interpreter_client_frames=16, interpreter_slow_client_wait=0.5)
    with make_server(config) as server:
        yield server


def _sandbox(server: EmulatorServer) -> str:
    created = httpx.post(server.url + "/api/sandbox", json={}, headers=AUTH)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _url(server: EmulatorServer, sid: str) -> str:
    return server.url.replace("http", "ws", 1) + f"/toolbox/{sid}/process/interpreter/execute"


def _closed_entry(server: EmulatorServer, within: float = 60.0) -> dict[str, object]:
    """The journal's entry of the first execution that has ended (polled: the server runs in its own thread)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ended = [e for e in server.emulator.journal.entries(ROUTE) if e.outcome != "pending"]
        if ended:
            return {"outcome": ended[0].outcome, **ended[0].detail}
        time.sleep(0.01)
    raise AssertionError("no execution ended")


def _raw_upgrade(server: EmulatorServer, sid: str) -> socket.socket:
    """A WebSocket connection made by hand, whose receive buffer is small and which reads nothing until told: no
    client library reads ahead into its own memory, so the server's writes block once the socket's buffers fill."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect((server.host, server.port))
    key = base64.b64encode(os.urandom(16)).decode()
    path = f"/toolbox/{sid}/process/interpreter/execute"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: {AUTH['Authorization']}\r\n\r\n"
    )
    sock.sendall(request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _send_text(sock: socket.socket, text: str) -> None:
    data, mask = text.encode(), os.urandom(4)
    assert len(data) < 126
    sock.sendall(bytes([0x81, 0x80 | len(data)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def _read_to_end(sock: socket.socket) -> tuple[list[dict[str, str]], bytes | None]:
    """Every whole text frame until the connection ends, and the close frame's payload (None: there was none)."""
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    frames: list[dict[str, str]] = []
    close: bytes | None = None
    at = 0
    while at + 2 <= len(data):
        opcode, size, at = data[at] & 0x0F, data[at + 1] & 0x7F, at + 2
        if size == 126:
            size, at = struct.unpack("!H", data[at : at + 2])[0], at + 2
        elif size == 127:
            size, at = struct.unpack("!Q", data[at : at + 8])[0], at + 8
        if at + size > len(data):
            break  # cut in the middle of a frame: the connection ended under it, as the daemon's Close does
        payload, at = data[at : at + size], at + size
        if opcode == 1:
            frames.append(json.loads(payload))
        elif opcode == 8:
            close = payload
    return frames, close


def test_a_client_that_stops_reading_is_dropped_and_the_code_runs_on(small_queue: EmulatorServer) -> None:
    small_queue.emulator.reset()
    sid = _sandbox(small_queue)
    sock = _raw_upgrade(small_queue, sid)
    with sock:
        _send_text(sock, json.dumps({"code": f"for i in range({LINES}):\n    print(i)\ndone = i"}))
        entry = _closed_entry(small_queue)
        got, close = _read_to_end(sock)
    assert entry["outcome"] == "error" and entry["closed"] == "slow consumer"
    assert close is None  # no close frame: the client sees 1006
    texts = [frame["text"] for frame in got]
    assert texts == [f"{n}\n" for n in range(len(texts))]  # what left came in order, nothing lost before the drop
    assert 16 < len(texts) < LINES

    # The code ran to its end in the context, and the context serves the next client.
    with connect(_url(small_queue, sid), additional_headers=AUTH) as ws:
        ws.send(json.dumps({"code": "print(done)"}))
        frames = [json.loads(message) for message in ws]
    assert [f["text"] for f in frames if f["type"] == "stdout"] == [f"{LINES - 1}\n"]
    assert frames[-1]["type"] == "control" and frames[-1]["text"] == "completed"


def test_a_client_that_reads_gets_everything(small_queue: EmulatorServer) -> None:
    """A queue of 16 is enough for a client that reads as the code prints: nothing is dropped."""
    small_queue.emulator.reset()
    sid = _sandbox(small_queue)
    with connect(_url(small_queue, sid), additional_headers=AUTH) as ws:
        ws.send(json.dumps({"code": "for i in range(2000):\n    print(i)"}))
        frames = [json.loads(message) for message in ws]
        assert ws.close_code == 1000
    stdout = "".join(f["text"] for f in frames if f["type"] == "stdout")
    assert stdout == "".join(f"{n}\n" for n in range(2000))
    assert frames[-1]["text"] == "completed"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("interpreter_client_frames", 0),
        ("interpreter_client_frames", 1.5),
        ("interpreter_slow_client_wait", -1.0),
        ("interpreter_slow_client_wait", float("nan")),
    ],
)
def test_a_client_queue_setting_that_is_no_amount_is_refused_with_its_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        make_server(EmulatedDaytona(**{field: value}))  # type: ignore[arg-type]


def test_a_client_that_leaves_mid_run_leaves_the_code_running(server: EmulatorServer) -> None:
    """As the daemon's: a write to a client that left fails, and the code goes on (before, the failed write ended
    the context's process, and its state with it)."""
    sid = _sandbox(server)
    code = "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.01)\nfinished = i"
    with connect(_url(server, sid), additional_headers=AUTH) as ws:
        ws.send(json.dumps({"code": code}))
        first = json.loads(ws.recv(timeout=30))
    assert first["text"] == "0\n"
    assert _closed_entry(server)["outcome"] == "cancelled"
    with connect(_url(server, sid), additional_headers=AUTH) as ws:
        ws.send(json.dumps({"code": "print(finished)"}))
        frames = [json.loads(message) for message in ws]
    assert [f["text"] for f in frames if f["type"] == "stdout"] == ["39\n"]
