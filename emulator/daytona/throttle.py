"""NestJS-style fixed-window throttlers with Daytona's headers (daytona.md §4, "Rate limiting").

Every response of a throttled route carries ``X-RateLimit-{Limit,Remaining,Reset}-{name}`` for each throttler that
covers it; a refusal is a 429 with ``Retry-After-{name}`` and the ThrottlerException body.
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
        """Count one request against each named throttler (unknown names are ignored)."""
        now = self._now()
        headers: Headers = []
        refused: str | None = None
        with self._lock:
            for name in names:
                spec = self._specs.get(name)
                if spec is None:
                    continue
                window = self._windows.get((name, tracker))
                if window is None or now - window.start >= spec.ttl_s:
                    window = _Window(now)
                    self._windows[(name, tracker)] = window
                reset = max(0, math.ceil(window.start + spec.ttl_s - now))
                if refused is None and window.hits >= spec.limit:
                    refused = name
                    headers += [
                        (f"X-RateLimit-Limit-{name}", str(spec.limit)),
                        (f"X-RateLimit-Remaining-{name}", "0"),
                        (f"X-RateLimit-Reset-{name}", str(reset)),
                        (f"Retry-After-{name}", str(reset)),
                    ]
                    continue
                if refused is None:
                    window.hits += 1
                headers += [
                    (f"X-RateLimit-Limit-{name}", str(spec.limit)),
                    (f"X-RateLimit-Remaining-{name}", str(max(0, spec.limit - window.hits))),
                    (f"X-RateLimit-Reset-{name}", str(reset)),
                ]
        return Verdict(refused is None, headers, refused)
