"""Runtime state of the plan's limits: concurrency caps and token buckets.

Not thread-safe on its own; the engine serialises access under its lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .plan import ConcurrencyLimit, TokenBucketLimit, WindowLimit

__all__ = ["BucketState", "CapState", "WindowState"]


@dataclass
class CapState:
    """In-flight counter for one ``ConcurrencyLimit``, with a high-water mark for invariant checks."""

    spec: ConcurrencyLimit
    in_flight: int = 0
    high_water: int = 0

    def has_room(self) -> bool:
        """True when one more request may be admitted."""
        return self.in_flight < self.spec.max_in_flight

    def acquire(self) -> None:
        """Take a slot (caller checked ``has_room``)."""
        self.in_flight += 1
        self.high_water = max(self.high_water, self.in_flight)

    def release(self) -> None:
        """Give a slot back."""
        self.in_flight = max(0, self.in_flight - 1)

    @property
    def remaining(self) -> int:
        """Free slots."""
        return max(0, self.spec.max_in_flight - self.in_flight)


@dataclass
class BucketState:
    """Token bucket: starts full (``burst``), refills continuously at ``rate`` per second."""

    spec: TokenBucketLimit
    tokens: float
    updated: float
    admitted: int = 0

    @classmethod
    def full(cls, spec: TokenBucketLimit, now: float) -> BucketState:
        """A fresh, full bucket at time ``now``."""
        return cls(spec, float(spec.burst), now)

    def refill(self, now: float) -> None:
        """Add the tokens earned since the last update, capped at ``burst``."""
        if now > self.updated:
            self.tokens = min(float(self.spec.burst), self.tokens + (now - self.updated) * self.spec.rate)
            self.updated = now

    def has_token(self) -> bool:
        """True when a whole token is available (call ``refill`` first)."""
        return self.tokens >= 1.0 - 1e-9

    def take(self) -> None:
        """Consume one token (caller checked ``has_token``)."""
        self.tokens = max(0.0, self.tokens - 1.0)
        self.admitted += 1

    def wait_for_token(self) -> float:
        """Seconds until one whole token is available."""
        return max(0.0, (1.0 - self.tokens) / self.spec.rate)

    def seconds_to_full(self) -> float:
        """Seconds until the bucket is full again (used for ``X-RateLimit-Reset``)."""
        return max(0.0, (self.spec.burst - self.tokens) / self.spec.rate)

    @property
    def remaining(self) -> int:
        """Whole tokens left."""
        return math.floor(self.tokens + 1e-9)


@dataclass
class WindowState:
    """Fixed-window counter: the window opens at the first request after the previous one closed."""

    spec: WindowLimit
    start: float | None = None
    hits: int = 0

    def roll(self, now: float) -> None:
        """Open a fresh window when none is open or the open one has run its ``per`` seconds."""
        if self.start is None or now - self.start >= self.spec.per:
            self.start = now
            self.hits = 0

    def has_room(self) -> bool:
        """True when the open window still admits a request (call ``roll`` first)."""
        return self.hits < self.spec.max_requests

    def take(self) -> None:
        """Count one admitted request."""
        self.hits += 1

    def seconds_to_reset(self, now: float) -> float:
        """Seconds until the open window closes (0 when none is open)."""
        return 0.0 if self.start is None else max(0.0, self.start + self.spec.per - now)

    @property
    def remaining(self) -> int:
        """Requests the open window still admits."""
        return max(0, self.spec.max_requests - self.hits)
