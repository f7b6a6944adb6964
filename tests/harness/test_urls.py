"""The one check behind every URL option (bench, record, check-reference, rollout, grpo, the pytest plugin)."""

from __future__ import annotations

import socket

import pytest

from harness.urls import unreachable, url_problem


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "https://app.daytona.io/api", "http://[::1]:9/v1", "HTTP://h"]
)
def test_http_urls_with_a_host_pass(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize("url", ["localhost:8080", "127.0.0.1:8080/run_code", "ftp://h", "http://", "https:///x", ""])
def test_anything_else_is_said_with_the_value(url: str) -> None:
    assert url_problem(url) == f"{url!r} is not an http(s) URL with a host"


def test_a_listening_port_is_reachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert unreachable(f"http://127.0.0.1:{port}/run_code") is None


def test_a_closed_port_a_bad_port_and_an_unknown_host_are_said() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    assert unreachable(f"http://127.0.0.1:{port}") == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert unreachable("http://h:99999/") == "'http://h:99999/' has no valid port"
    problem = unreachable("https://sandbox.invalid/api")  # .invalid never resolves (RFC 2606)
    assert problem is not None and problem.startswith("cannot resolve 'sandbox.invalid'")
