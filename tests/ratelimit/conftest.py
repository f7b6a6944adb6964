"""Fixtures for the limiter tests: one Ray cluster per test session (shared with any other test that already
started one), a real ``redis-server`` on a free loopback port, and a factory for limiters of every backend."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

BACKENDS = ["local", "ray", "fakeredis", "redis"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private ``redis-server`` (Debian's; ``make test`` installs it) on a free loopback port, stopped at the end."""
    pytest.importorskip("redis")
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


LimiterFactory = Callable[..., Any]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "ray":
        request.getfixturevalue("ray_session")
    elif name == "redis":
        request.getfixturevalue("redis_url")
    elif name == "fakeredis":
        pytest.importorskip("fakeredis")
        pytest.importorskip("lupa")
    return name


@pytest.fixture
def make_limiter(request: pytest.FixtureRequest, backend: str) -> Iterator[LimiterFactory]:
    """``make_limiter(limit=3, ...)`` -> a limiter client on ``backend`` (call inside the running event loop).
    Every call within one test talks to the same named limiter (``name=`` to override)."""
    from harness.ratelimit import LimiterConfig, open_limiter

    default_name = f"t-{uuid.uuid4().hex[:10]}"
    names: set[str] = set()
    fake_servers: dict[str, Any] = {}

    def make(**config: Any) -> Any:
        config.setdefault("name", default_name)
        names.add(config["name"])
        cfg = LimiterConfig.from_mapping(config)
        if backend == "fakeredis":
            import fakeredis

            server = fake_servers.setdefault("server", fakeredis.FakeServer())
            return open_limiter(cfg, "redis", redis_client=fakeredis.FakeAsyncRedis(server=server))
        if backend == "redis":
            return open_limiter(cfg, "redis", redis_url=request.getfixturevalue("redis_url"))
        return open_limiter(cfg, backend)

    yield make
    if backend == "ray":
        from harness.ratelimit.ray_backend import kill

        for name in names:
            kill(name)
