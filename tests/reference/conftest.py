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
