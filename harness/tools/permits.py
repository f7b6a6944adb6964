"""How a tool holds a rate-limiter permit around one call to the sandbox service.

The limiter is infrastructure, like the sandbox service: when it fails (its Redis is down, its Ray actor is gone)
the call is an infrastructure fault with the retry policy's backoff, never an exception out of ``execute``; and
a permit that cannot be handed back after the call ran never costs the call's result (the limiter's lease
reclaims the permit).
"""

from __future__ import annotations

import logging
import time

from harness.ratelimit import AsyncLimiter, LimiterConfigError, Outcome, Ticket

log = logging.getLogger(__name__)

#: Seconds between two warnings about one limiter's failures (an outage fails every call in flight at once).
WARN_EVERY_S = 30.0


class LimiterUnavailable(Exception):
    """The limiter could not grant a permit; ``retryable`` is false when it never will (a config clash)."""

    def __init__(self, reason: str, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


_last_warned: dict[tuple[str, str], float] = {}


def _warn(limiter: AsyncLimiter, what: str, exc: BaseException) -> None:
    key = (limiter.name, what)
    now = time.monotonic()
    if now - _last_warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
        _last_warned[key] = now
        log.warning("rate limiter %r (%s) %s: %s", limiter.name, limiter.backend, what, _describe(exc))


def _describe(exc: BaseException) -> str:
    """One line: Ray's errors run to several (the actor's id, pid, namespace)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:200]


async def take_permit(limiter: AsyncLimiter | None) -> Ticket | None:
    """A permit from ``limiter`` (``None`` without one); raises :class:`LimiterUnavailable` when it fails."""
    if limiter is None:
        return None
    try:
        return await limiter.acquire()
    except LimiterConfigError as exc:
        # Another user of this limiter name set a different config: retrying cannot help.
        _warn(limiter, "refused this tool's config", exc)
        raise LimiterUnavailable(f"rate limiter misconfigured: {_describe(exc)}", retryable=False) from None
    except Exception as exc:
        _warn(limiter, "failed to grant a permit", exc)
        raise LimiterUnavailable(f"rate limiter unavailable: {_describe(exc)}", retryable=True) from None


async def return_permit(limiter: AsyncLimiter | None, permit: Ticket | None, outcome: Outcome) -> None:
    """Give ``permit`` back and report ``outcome`` (adaptive limiters shrink on 429s); failures are logged only."""
    if limiter is None or permit is None:
        return
    try:
        await limiter.release(permit)
    except Exception as exc:
        _warn(limiter, "could not take a permit back (its lease will reclaim it)", exc)
    try:
        await limiter.report(outcome)
    except Exception as exc:
        _warn(limiter, "could not record a call's outcome", exc)
