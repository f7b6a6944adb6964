"""Pick a limiter backend by name; cluster backends are imported lazily (``ray``/``redis`` stay optional)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from harness.ratelimit.base import AsyncLimiter, LimiterConfig, LimiterConfigError

BACKENDS = ("local", "ray", "redis")


def ray_ready() -> bool:
    """True when this process is connected to a Ray cluster (never imports or starts Ray itself)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def check_namespace(namespace: object) -> str | None:
    """``namespace`` (the ``ray`` backend's), checked when the limiter is made: an empty or non-string one would make
    every call fail later."""
    if namespace is not None and not (isinstance(namespace, str) and namespace.strip()):
        raise LimiterConfigError(f"rate limiter namespace must be a non-empty string or null, got {namespace!r}")
    return namespace


def open_limiter(
    config: LimiterConfig | Mapping[str, Any],
    backend: str = "local",
    *,
    namespace: str | None = None,
    detached: bool = True,
    redis_url: str | None = None,
    redis_client: Any = None,
) -> AsyncLimiter:
    """A client of the named limiter on ``backend`` (``local`` | ``ray`` | ``redis``).

    The ray and redis clients check the stored config on first use and raise :class:`LimiterConfigError` when it
    differs from ``config``.
    """
    if not isinstance(config, (LimiterConfig, Mapping)):
        raise TypeError(f"open_limiter needs a LimiterConfig or a mapping, got {config!r}")
    cfg = config if isinstance(config, LimiterConfig) else LimiterConfig.from_mapping(config)
    check_namespace(namespace)
    if backend == "local":
        from harness.ratelimit.local import LocalLimiter

        return LocalLimiter(cfg)
    if backend == "ray":
        if not ray_ready():
            raise LimiterConfigError("rate limiter backend 'ray' needs a running Ray (ray.init()) in this process")
        from harness.ratelimit.ray_backend import RayLimiter

        return RayLimiter(cfg, namespace=namespace, detached=detached)
    if backend == "redis":
        from harness.ratelimit.redis_backend import RedisLimiter

        if redis_client is None and not redis_url:
            raise LimiterConfigError("rate limiter backend 'redis' needs redis_url")
        return RedisLimiter(cfg, url=redis_url, client=redis_client)
    raise LimiterConfigError(f"unknown rate limiter backend {backend!r}; expected one of {BACKENDS}")
