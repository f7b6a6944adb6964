"""The one check behind every URL option (bench, record, check-reference, rollout, grpo, the pytest plugin)."""

from __future__ import annotations

import pytest

from harness.urls import url_problem


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "https://app.daytona.io/api", "http://[::1]:9/v1", "HTTP://h"]
)
def test_http_urls_with_a_host_pass(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize("url", ["localhost:8080", "127.0.0.1:8080/run_code", "ftp://h", "http://", "https:///x", ""])
def test_anything_else_is_said_with_the_value(url: str) -> None:
    assert url_problem(url) == f"{url!r} is not an http(s) URL with a host"
