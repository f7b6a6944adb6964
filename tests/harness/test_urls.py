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


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "is not a valid URL: Invalid IPv6 URL"),
        ("http://h:99999", "is not a valid URL: Port out of range"),
        ("http://h:x/", "is not a valid URL"),
        ("http://h:0/", "has no valid port"),
        ("http://h/run_code?x=1", "has a query or fragment; give the service's base URL"),
        ("http://h/#top", "has a query or fragment"),
    ],
)
def test_urls_that_paths_cannot_be_appended_to(url: str, message: str) -> None:
    problem = url_problem(url)
    assert problem is not None and problem.startswith(repr(url)) and message in problem


def test_a_listening_port_is_reachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert unreachable(f"http://127.0.0.1:{port}/run_code") is None


def test_a_closed_port_a_bad_port_and_an_unknown_host_are_said() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    assert unreachable(f"http://127.0.0.1:{port}") == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert unreachable("http://h:99999/") == "'http://h:99999/' has no valid host and port"
    assert unreachable("http://[::1") == "'http://[::1' has no valid host and port"
    problem = unreachable("https://sandbox.invalid/api")  # .invalid never resolves (RFC 2606)
    assert problem is not None and problem.startswith("cannot resolve 'sandbox.invalid'")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:pw@h:1/x", "http://h:1/x"),
        ("https://tok@h/a@b", "https://h/a@b"),
        ("http://[::1", "http://[::1"),
        ("http://u:p@[::1", "http://[::1"),
    ],
)
def test_credentials_are_never_shown(url: str, shown: str) -> None:
    from harness.urls import without_userinfo

    assert without_userinfo(url) == shown
    assert "p@" not in (url_problem(url.replace("/x", "?q")) or "") and ":pw" not in (url_problem(url) or "")


def test_the_direct_check_is_skipped_when_a_proxy_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    url = f"http://127.0.0.1:{port}"  # nothing listens: only a proxy could reach it
    assert unreachable(url) is not None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert unreachable(url) is None  # the requests go to the proxy
    assert unreachable(url.replace("http:", "https:")) is not None  # no proxy for https
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert unreachable(url) is not None  # NO_PROXY: direct, so checked


@pytest.mark.parametrize(
    ("no_proxy", "direct"),
    [("*", True), ("example.com", True), (".example.com", True), ("other.com", False), ("api.example.com:8080", False)],
)
def test_no_proxy_entries_name_hosts_and_domains(no_proxy: str, direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import urlsplit

    from harness.urls import _proxied

    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("ALL_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert _proxied(urlsplit("https://api.example.com/api")) is not direct
