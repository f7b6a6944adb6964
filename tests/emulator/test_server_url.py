"""The URL a server announces is one a client on this machine can use, whatever address it was bound to."""

from __future__ import annotations

import json
import urllib.request

import pytest

from emulator.server import EmulatorServer, base_url


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("", "http://127.0.0.1:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),
        ("::", "http://[::1]:8080"),
        ("::1", "http://[::1]:8080"),
        ("localhost", "http://localhost:8080"),
    ],
)
def test_base_url(host: str, url: str) -> None:
    assert base_url(host, 8080) == url


@pytest.mark.parametrize("host", ["", "0.0.0.0"])
def test_a_wildcard_bind_is_reached_at_its_url(host: str) -> None:
    with EmulatorServer(host=host) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url + "/v1/ping", timeout=30) as answer:
            assert answer.status == 200
            assert json.loads(answer.read()) == "pong"
