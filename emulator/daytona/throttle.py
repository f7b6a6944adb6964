"""Daytona's throttlers as NestJS's ``ThrottlerGuard`` (``@nestjs/throttler`` 6) runs them on its Redis storage
(daytona.md §4, "Rate limiting").

Per throttler and organization, a window of ``ttl_s`` opens at its first hit and counts every hit, refused ones too.
The hit past ``limit`` blocks the throttler for ``ttl_s`` from then (no ``blockDuration`` is configured, so it is the
ttl): every hit while blocked is refused, whatever the window. The guard runs the route's throttlers in order; one
that passes sets ``X-RateLimit-{Limit,Remaining,Reset}-{name}``, a refusing one sets only ``Retry-After-{name}``
(the block's seconds left) and ends the guard, so the throttlers after it neither count nor answer.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .config import ThrottlerSpec

Headers = list[tuple[str, str]]


@dataclass
class _Window:
    start: float
    hits: int = 0
    blocked_until: float | None = None


@dataclass(frozen=True)
class Verdict:
    """Whether a request passed, the headers to send, and which throttler refused it."""

    allowed: bool
    headers: Headers
    refused_by: str | None = None


class Throttlers:
    """The configured throttlers, keyed by (throttler, tracker); thread-safe."""

    def __init__(self, specs: Iterable[ThrottlerSpec], now: Callable[[], float]) -> None:
        self._specs = {s.name: s for s in specs}
        self._now = now
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}

    @property
    def specs(self) -> dict[str, ThrottlerSpec]:
        return dict(self._specs)

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()

    def hit(self, names: Iterable[str], tracker: str) -> Verdict:
        """Count one request against the named throttlers in order, up to the first that refuses it (unknown names
        are ignored)."""
        now = self._now()
        headers: Headers = []
        with self._lock:
            for name in names:
                spec = self._specs.get(name)
                if spec is None:
                    continue
                window = self._windows.get((name, tracker))
                if window is None or now - window.start >= spec.ttl_s:
                    blocked_until = window.blocked_until if window is not None else None
                    window = _Window(now, blocked_until=blocked_until)  # a block outlives the window it began in
                    self._windows[(name, tracker)] = window
                window.hits += 1
                if window.blocked_until is not None and now >= window.blocked_until:
                    window.blocked_until = None
                if window.blocked_until is None and window.hits > spec.limit:
                    window.blocked_until = now + spec.ttl_s
                if window.blocked_until is not None:
                    headers.append((f"Retry-After-{name}", str(math.ceil(window.blocked_until - now))))
                    return Verdict(False, headers, name)
                headers += [
                    (f"X-RateLimit-Limit-{name}", str(spec.limit)),
                    (f"X-RateLimit-Remaining-{name}", str(max(0, spec.limit - window.hits))),
                    (f"X-RateLimit-Reset-{name}", str(max(0, math.ceil(window.start + spec.ttl_s - now)))),
                ]
        return Verdict(True, headers)
