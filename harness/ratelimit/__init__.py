"""Limiters for sandbox calls. ``local``: one process, asyncio. (Cluster-wide backends build on the same contract.)"""

from harness.ratelimit.local import ConcurrencyLimiter, LimiterError, Permit

__all__ = ["ConcurrencyLimiter", "LimiterError", "Permit"]
