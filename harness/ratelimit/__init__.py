"""Limiters for sandbox calls, one contract (:class:`AsyncLimiter`) and three backends.

``local`` (:class:`LocalLimiter`, one process), ``ray`` (a named actor per limiter, cluster-wide) and ``redis`` (Lua
scripts on one Redis, for trainers without Ray). :func:`open_limiter` picks one by name; ``ray`` and ``redis`` are
imported only when asked for. :class:`ConcurrencyLimiter` is the minimal synchronous-release in-process cap.
"""

from harness.ratelimit.base import (
    MAX_LEASE_S,
    MIN_LEASE_S,
    AdaptiveConfig,
    AsyncLimiter,
    LimiterConfig,
    LimiterConfigError,
    LimiterError,
    LimiterStats,
    Outcome,
    Ticket,
)
from harness.ratelimit.factory import BACKENDS, check_namespace, open_limiter, ray_ready
from harness.ratelimit.local import ConcurrencyLimiter, LocalLimiter, Permit

__all__ = [
    "BACKENDS",
    "MAX_LEASE_S",
    "MIN_LEASE_S",
    "AdaptiveConfig",
    "AsyncLimiter",
    "ConcurrencyLimiter",
    "LimiterConfig",
    "LimiterConfigError",
    "LimiterError",
    "LimiterStats",
    "LocalLimiter",
    "Outcome",
    "Permit",
    "Ticket",
    "check_namespace",
    "open_limiter",
    "ray_ready",
]
