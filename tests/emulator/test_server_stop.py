"""A stopping server ends the requests held by an injected hang at once, answering them as a server going away: no
graceful-timeout wait, and no "Exception in ASGI application" for them in uvicorn's log."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from emulator.app import Emulator
from emulator.daytona import DEFAULT_API_KEY
from emulator.server import EmulatorServer

RUN_CODE = "sandbox_fusion.run_code"
INTERPRETER = "daytona.interpreter.execute"
HANG = {"hang": {"seconds": 3600, "then": 504}}
PLAN = {"rules": [{"id": "h", "route": RUN_CODE, "fault": HANG}, {"id": "w", "route": INTERPRETER, "fault": HANG}]}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log() -> Iterator[_Records]:
    """What uvicorn logs (its own handlers do not reach the root logger, so caplog would not see it)."""
    handler = _Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _hung_run_code(server: EmulatorServer) -> socket.socket:
    """A /run_code request the hang holds, from a raw socket (left open, or closed as a client that gave up)."""
    body = b'{"code": "print(1)", "language": "python"}'
    client = socket.create_connection((server.host, server.port))
    head = f"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    client.sendall(head.encode() + b"\r\n" + body)
    return client


def _answer(client: socket.socket) -> bytes:
    """All the server sends on this connection until it closes it."""
    client.settimeout(60)
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def test_stopping_ends_hangs_without_an_error_or_the_graceful_wait(server_log: _Records) -> None:
    emulator = Emulator(faults=PLAN)
    server = EmulatorServer(emulator).start()
    journal = emulator.journal
    waiting = _hung_run_code(server)
    gone = _hung_run_code(server)
    sandbox = requests.post(
        server.url + "/api/sandbox", json={}, headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"}, timeout=30
    ).json()["id"]
    ws_url = server.url.replace("http", "ws", 1) + f"/toolbox/{sandbox}/process/interpreter/execute"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"}) as websocket:
        assert journal.wait_for(lambda j: j.in_flight(RUN_CODE) == 2 and j.in_flight(INTERPRETER) == 1, 30)
        gone.close()
        stopped = threading.Thread(target=server.stop)
        stopped.start()
        answer = _answer(waiting)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"the emulator is stopping" in answer
        with pytest.raises(ConnectionClosed) as closed:
            websocket.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001  # going away, not uvicorn's 1012
        stopped.join(60)
        assert not stopped.is_alive()
    errors = [r.getMessage() for r in server_log.records if r.levelno >= logging.ERROR]
    assert errors == []
    outcomes = sorted((e.route, e.outcome) for e in journal.entries() if e.route in (RUN_CODE, INTERPRETER))
    assert outcomes == [(INTERPRETER, "cancelled"), (RUN_CODE, "cancelled"), (RUN_CODE, "cancelled")]
    waiting.close()
