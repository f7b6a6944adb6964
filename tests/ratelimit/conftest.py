"""A factory for limiters of every backend; the Ray cluster and the real ``redis-server`` it uses are the root
conftest's session fixtures."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

BACKENDS = ["local", "ray", "fakeredis", "redis"]


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
