"""Retry policy for sandbox calls: exponential backoff with full jitter, ``Retry-After`` honoured, a budget.

verl 0.7.1's tool retried only 504 (linear 1 s, 2 s) and showed every other failure to the model as if the program
had printed nothing. Infrastructure faults are not the model's doing, so the tools retry them; when the budget is
spent they say so in a distinct observation instead of inventing program output.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from harness.tools.config import check_keys, finite_number

#: HTTP statuses that mean "the service, not the program, failed": retried.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

#: The largest ``retry.max_attempts`` accepted (a larger budget is a stall, not a retry policy).
MAX_ATTEMPTS_LIMIT = 100


@dataclass(frozen=True)
class RetryPolicy:
    """How a tool retries one call. ``max_attempts`` counts the first try (4 = 1 try + 3 retries)."""

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: Longest ``Retry-After`` obeyed; a longer one ends the retries at once (better an honest fault than a stall).
    max_retry_after: float = 30.0
    retry_statuses: frozenset[int] = field(default=RETRYABLE_STATUSES)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RetryPolicy:
        """Read the ``retry`` section of a tool config (all keys optional)."""
        section = config.get("retry") or {}
        if not isinstance(section, Mapping):
            raise ValueError(f"tool config 'retry' must be a mapping, got {type(section).__name__}")
        known = {"max_attempts", "base_delay", "max_delay", "max_retry_after", "retry_statuses"}
        check_keys(section, known, "tool config 'retry'")
        kwargs: dict[str, Any] = {}
        if "max_attempts" in section:
            value = section["max_attempts"]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
                raise ValueError(f"retry.max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}, got {value!r}")
            kwargs["max_attempts"] = value
        for key in ("base_delay", "max_delay", "max_retry_after"):
            if key in section:
                kwargs[key] = finite_number(section, key, 0.0, positive=False, name=f"retry.{key}")
        if "retry_statuses" in section:
            statuses = section["retry_statuses"]
            if not isinstance(statuses, (list, tuple)) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 100 <= s <= 599 for s in statuses
            ):
                raise ValueError(f"retry.retry_statuses must be a list of HTTP statuses (100-599), got {statuses!r}")
            kwargs["retry_statuses"] = frozenset(statuses)
        return cls(**kwargs)

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter delay before attempt ``attempt + 1`` (so retry waves never synchronise)."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return rng.uniform(0.0, ceiling)

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """The wait before attempt ``attempt + 1``: the backoff, or ``Retry-After`` PLUS the backoff's jitter.

        Not ``max(backoff, Retry-After)``: every client throttled at the same moment gets the same ``Retry-After``,
        and the larger-of-the-two would send them all back at the same instant (a synchronised retry wave)."""
        jitter = self.backoff(attempt, rng)
        return jitter if retry_after is None else retry_after + jitter


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``Retry-After`` or Daytona's ``Retry-After-<throttler>`` (the largest wins)."""
    waits: list[float] = []
    for name, value in headers.items():
        lower = name.lower()
        if lower != "retry-after" and not lower.startswith("retry-after-"):
            continue
        value = value.strip()
        try:
            waits.append(max(0.0, float(value)))
            continue
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        waits.append(max(0.0, (when - datetime.now(timezone.utc)).total_seconds()))
    return max(waits) if waits else None
