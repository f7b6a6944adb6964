"""The reference fixtures, also when the ``--reference-url`` plugin is not loaded (they then use the emulator)."""

import socket
import threading
from collections.abc import Iterator

import pytest

from harness.reference.plugin import (  # noqa: F401
    reference_daytona,
    reference_emulator,
    reference_is_live,
    reference_sandbox_fusion_url,
)


@pytest.fixture
def closing_server() -> Iterator[str]:
    """The URL of a server that accepts each connection and closes it at once: reachable, but no HTTP answer."""
    listening = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listening.accept()
            except OSError:
                return  # closed: the test is over
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    listening.shutdown(socket.SHUT_RDWR)
    listening.close()
    thread.join(timeout=10)


#: What the stub answers to each request that is not its probe: (status, content type, body, extra headers).
StubAnswer = tuple[int, str, str, dict[str, str]]


@pytest.fixture
def stub_service() -> Iterator[tuple[str, list[StubAnswer]]]:
    """A stand-in service at its root: answers ``GET /v1/ping`` and ``GET /sandbox?limit=1`` (the probes) with 2xx
    JSON, and every other request with the next of the answers the test puts in the list (the last one again when it
    runs out). Yields its URL and that list."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers: list[StubAnswer] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path in ("/v1/ping", "/sandbox?limit=1"):
                status, ctype, body, extra = 200, "application/json", '"pong"', {}
            else:
                status, ctype, body, extra = answers.pop(0) if len(answers) > 1 else answers[0]
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
