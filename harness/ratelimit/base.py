"""The one limiter contract every backend (``local``, ``ray``, ``redis``) implements.

A limiter caps the executions in flight (``limit``) and optionally their start rate (``rate_per_second``, a token
bucket). ``await acquire()`` returns a :class:`Ticket`; ``await release(ticket)`` gives it back exactly once;
``async with limiter.slot():`` does both. Admission is FIFO, releases are bounded (a release without an acquire or
a second release raises :class:`LimiterError`), a cancelled acquire takes nothing, and the cluster backends lease
each ticket to its holder, which heartbeats; tickets of a dead holder are reclaimed when the lease runs out.
"""

from __future__ import annotations

import abc
import difflib
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Outcome = Literal["ok", "throttled", "error"]
OUTCOMES: tuple[str, ...] = ("ok", "throttled", "error")


class LimiterError(RuntimeError):
    """A limiter was used wrongly (double release, foreign permit, bad limit) or its backend failed."""


class LimiterConfigError(LimiterError, ValueError):
    """A limiter config is invalid, or disagrees with the config the named limiter already has (also a
    ``ValueError``, what config checks raise elsewhere)."""


#: The shortest lease: heartbeats come every ``lease_s / 3``, so a holder keeps two beats of margin, each at least
#: a third of a second, far above a Ray actor call or a Redis round trip (a shorter lease reclaims live permits).
MIN_LEASE_S = 1.0
#: The longest lease (a day): a dead holder's permits must come back within a run, not never.
MAX_LEASE_S = 86_400.0


@dataclass(frozen=True)
class AdaptiveConfig:
    """AIMD on the cap: each ``throttled`` report multiplies it by ``decrease_factor`` (at most once per
    ``cooldown_s``, never below ``min_limit``); every ``increase_every`` ``ok`` reports (default: the current cap,
    i.e. about one round of calls) add ``increase_step``, up to the configured ``limit``."""

    min_limit: int = 1
    decrease_factor: float = 0.5
    increase_step: int = 1
    increase_every: int | None = None
    cooldown_s: float = 1.0

    def __post_init__(self) -> None:
        if not _posint(self.min_limit) or not _posint(self.increase_step):
            raise LimiterConfigError("adaptive min_limit and increase_step must be positive integers")
        # Numbers, not strings or bools: "0.5" would pass a float() check here and crash on the first 429.
        if not (_number(self.decrease_factor) and 0.0 < self.decrease_factor < 1.0):
            raise LimiterConfigError(
                f"adaptive decrease_factor must be a number in (0, 1), got {self.decrease_factor!r}"
            )
        if self.increase_every is not None and not _posint(self.increase_every):
            raise LimiterConfigError("adaptive increase_every must be a positive integer or null")
        if not (_number(self.cooldown_s) and math.isfinite(self.cooldown_s) and self.cooldown_s >= 0.0):
            raise LimiterConfigError(f"adaptive cooldown_s must be a finite number >= 0, got {self.cooldown_s!r}")


@dataclass(frozen=True)
class LimiterConfig:
    """What a named limiter is. Two users of one ``name`` must pass equal configs (else :class:`LimiterConfigError`)."""

    name: str = "sandbox-rate-limiter"
    limit: int = 10
    rate_per_second: float | None = None
    burst: int | None = None
    lease_s: float = 60.0
    adaptive: AdaptiveConfig | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise LimiterConfigError(f"limiter name must be a non-empty string, got {self.name!r}")
        if not _posint(self.limit):
            raise LimiterConfigError(f"limit must be a positive integer, got {self.limit!r}")
        if self.rate_per_second is not None and not (
            _number(self.rate_per_second) and math.isfinite(self.rate_per_second) and self.rate_per_second > 0
        ):
            raise LimiterConfigError(f"rate_per_second must be a positive number or null, got {self.rate_per_second!r}")
        if self.burst is not None and not _posint(self.burst):
            raise LimiterConfigError(f"burst must be a positive integer or null, got {self.burst!r}")
        if self.burst is not None and self.rate_per_second is None:
            raise LimiterConfigError("burst is the size of the rate_per_second bucket: set rate_per_second too")
        if not (_number(self.lease_s) and MIN_LEASE_S <= self.lease_s <= MAX_LEASE_S):
            raise LimiterConfigError(
                f"lease_s must be a number of seconds from {MIN_LEASE_S:g} to {MAX_LEASE_S:g}, got {self.lease_s!r}"
            )
        if self.adaptive is not None and not isinstance(self.adaptive, AdaptiveConfig):
            raise LimiterConfigError(f"adaptive must be an AdaptiveConfig or null, got {self.adaptive!r}")
        if self.adaptive is not None and self.adaptive.min_limit > self.limit:
            raise LimiterConfigError("adaptive min_limit is above limit")

    @property
    def bucket_size(self) -> float:
        """Tokens the rate bucket holds when full (``burst``, default one second's worth, at least 1)."""
        if self.rate_per_second is None:
            return math.inf
        return float(self.burst if self.burst is not None else max(1, math.ceil(self.rate_per_second)))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.rate_per_second is not None:
            data["rate_per_second"] = float(self.rate_per_second)
        data["lease_s"] = float(self.lease_s)
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LimiterConfig:
        """Build from a YAML/JSON mapping; ``adaptive`` may be true/false or a mapping. Unknown keys are errors."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a limiter config must be a mapping or a LimiterConfig, got {data!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known, key=repr)
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {sorted(known)}"
            raise LimiterConfigError(f"unknown limiter config keys: {unknown}{hint}")
        values = dict(data)
        adaptive = values.get("adaptive")
        if adaptive is True:
            values["adaptive"] = AdaptiveConfig()
        elif adaptive is False or adaptive is None:
            values["adaptive"] = None
        elif isinstance(adaptive, Mapping):
            akeys = {f.name for f in fields(AdaptiveConfig)}
            bad = sorted(set(adaptive) - akeys, key=repr)
            if bad:
                raise LimiterConfigError(f"unknown adaptive keys: {bad}")
            values["adaptive"] = AdaptiveConfig(**adaptive)
        elif not isinstance(adaptive, AdaptiveConfig):
            raise LimiterConfigError(f"adaptive must be a bool or a mapping, got {adaptive!r}")
        try:
            return cls(**values)
        except TypeError as exc:  # pragma: no cover - defensive
            raise LimiterConfigError(str(exc)) from None

    def differences(self, other: LimiterConfig) -> list[str]:
        """Fields that differ, as ``key: existing X, requested Y`` (``self`` is the existing config)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [f"{key}: existing {mine[key]!r}, requested {theirs[key]!r}" for key in mine if mine[key] != theirs[key]]


@dataclass(frozen=True)
class Ticket:
    """Proof of one admission: give it back with ``release``. ``request_id`` is unique per acquire."""

    limiter: str
    request_id: str
    holder: str


@dataclass
class LimiterStats:
    """A snapshot of one named limiter (cluster-wide for the ``ray`` and ``redis`` backends)."""

    name: str
    backend: str
    limit: int
    cap: int
    held: int = 0
    waiting: int = 0
    max_held: int = 0
    acquires: int = 0
    releases: int = 0
    withdrawn: int = 0
    reclaimed: int = 0
    late_releases: int = 0
    throttled: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LimiterStats:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class AsyncLimiter(abc.ABC):
    """The contract. Implementations are safe to share between the tasks of one event loop."""

    backend: str = "abstract"

    def __init__(self, config: LimiterConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.name

    @abc.abstractmethod
    async def acquire(self) -> Ticket:
        """Wait (FIFO) for a slot; a cancelled wait takes nothing."""

    @abc.abstractmethod
    async def release(self, ticket: Ticket) -> None:
        """Give a ticket back; raises :class:`LimiterError` for a ticket not held (never adds capacity)."""

    @property
    @abc.abstractmethod
    def held(self) -> int:
        """Tickets held through this object now (for ``local``, the whole limiter; else this client's share)."""

    @property
    @abc.abstractmethod
    def waiting(self) -> int:
        """Callers waiting through this object now."""

    @abc.abstractmethod
    async def stats(self) -> LimiterStats:
        """Counters of the named limiter."""

    async def report(self, outcome: Outcome) -> None:
        """Tell an adaptive limiter how a call went (``throttled`` for a 429); a no-op when not adaptive."""
        if outcome not in OUTCOMES:
            raise LimiterError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        if self.config.adaptive is not None:
            await self._report(outcome)

    async def _report(self, outcome: Outcome) -> None:  # pragma: no cover - overridden by adaptive backends
        return None

    async def aclose(self) -> None:
        """Stop background work (heartbeats); tickets still held are left to their leases."""
        return None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        ticket = await self.acquire()
        try:
            yield ticket
        finally:
            await self.release(ticket)


def _posint(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class RemoteLimiter(AsyncLimiter):
    """A client of a limiter that lives elsewhere (a Ray actor, Redis): it tracks its own share of tickets.

    ``held``, ``waiting`` and ``max_held`` are this client's share (sync, for inspection); the whole limiter's
    counts come from :meth:`stats`.
    """

    def __init__(self, config: LimiterConfig) -> None:
        super().__init__(config)
        self._held: dict[str, Ticket] = {}
        self._max_held = 0
        self._waiting: set[str] = set()

    @property
    def held(self) -> int:
        """Tickets this client holds now (the whole limiter's count is in :meth:`stats`)."""
        return len(self._held)

    @property
    def waiting(self) -> int:
        """This client's callers waiting now."""
        return len(self._waiting)

    @property
    def max_held(self) -> int:
        """The most tickets this client held at once."""
        return self._max_held
