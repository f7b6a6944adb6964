"""Latency distributions sampled by inverse CDF from one keyed uniform draw.

Inverse-CDF sampling keeps latency a pure function of the keyed uniform (see ``keyed.py``) and, for the time-shaped
``RampLatency``, of the engine's clock: the same logical request at the same plan time always gets the same delay.
Every ``sample`` takes ``t`` (seconds since the engine started); the stationary distributions ignore it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "MAX_DELAY_S",
    "Z99",
    "FixedLatency",
    "LatencySpec",
    "LognormalLatency",
    "ParetoLatency",
    "RampLatency",
    "UniformLatency",
]

#: The longest delay a plan may inject: one day, for each latency, for the sum of the latencies one request gets from
#: several rules, and for a hang (a hang comes after the latency, so one request can wait up to two). Longer is no
#: fault a client could wait out, and near 1e9 s the event loop's timers overflow.
MAX_DELAY_S = 86_400.0

_LOG_MAX_DELAY = math.log(MAX_DELAY_S)

#: The largest draw whose normal quantile is taken: a keyed draw can round to 1.0, which has none.
_U_MAX = 1.0 - 2.0**-53

# 99th percentile of the standard normal; used to turn (p50, p99) into (mu, sigma).
Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class FixedLatency:
    """Always the same delay."""

    seconds: float

    def sample(self, u: float, t: float = 0.0) -> float:
        """Return the fixed delay regardless of ``u``."""
        return self.seconds

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form, for round-tripping and logs."""
        return {"fixed": self.seconds}


@dataclass(frozen=True)
class UniformLatency:
    """Delay uniform on ``[low, high]``: simple jitter."""

    low: float
    high: float

    def sample(self, u: float, t: float = 0.0) -> float:
        """Map ``u`` linearly onto the interval."""
        return self.low + (self.high - self.low) * u

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form."""
        return {"uniform": [self.low, self.high]}


@dataclass(frozen=True)
class LognormalLatency:
    """Lognormal delay given by its median and 99th percentile, the numbers people actually know."""

    p50: float
    p99: float

    @property
    def mu(self) -> float:
        """Log-scale location: ``ln(p50)``."""
        return math.log(self.p50)

    @property
    def sigma(self) -> float:
        """Log-scale spread: ``(ln(p99) - ln(p50)) / z_0.99``."""
        return (math.log(self.p99) - math.log(self.p50)) / Z99

    def sample(self, u: float, t: float = 0.0) -> float:
        """Inverse CDF: ``exp(mu + sigma * Phi^-1(u))``, at most :data:`MAX_DELAY_S` (a wide spread's far tail would
        overflow ``exp``; a ``u`` rounded to 1 has no quantile)."""
        if self.sigma == 0.0:
            return self.p50
        u = min(u, _U_MAX)
        exponent = self.mu + self.sigma * NormalDist().inv_cdf(u)
        return MAX_DELAY_S if exponent >= _LOG_MAX_DELAY else math.exp(exponent)

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form."""
        return {"lognormal": {"p50": self.p50, "p99": self.p99}}


@dataclass(frozen=True)
class ParetoLatency:
    """Pareto (type I) heavy tail: ``P(X > x) = (scale / x) ** alpha`` for ``x >= scale``.

    ``cap`` bounds the tail so a single draw cannot stall a test for hours.
    """

    scale: float
    alpha: float
    cap: float | None = None

    def sample(self, u: float, t: float = 0.0) -> float:
        """Inverse CDF ``scale / (1 - u) ** (1 / alpha)``, clipped to ``cap`` (else to :data:`MAX_DELAY_S`).

        Computed in log space: for a small ``alpha`` the power underflows to 0 (a division by zero) and for ``u`` near
        1 the draw is beyond any bound; both are the bound."""
        bound = self.cap if self.cap is not None else MAX_DELAY_S
        tail = 1.0 - u
        if tail <= 0.0:
            return bound
        log_ratio = -math.log(tail) / self.alpha
        if log_ratio >= math.log(bound / self.scale):
            return bound
        return self.scale * math.exp(log_ratio)

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form."""
        body: dict[str, object] = {"scale": self.scale, "alpha": self.alpha}
        if self.cap is not None:
            body["cap"] = self.cap
        return {"pareto": body}


@dataclass(frozen=True)
class RampLatency:
    """A delay that moves linearly from ``start_value`` to ``end_value`` over ``over`` seconds of plan time.

    The ramp begins ``start`` seconds after the engine started and holds ``end_value`` afterwards: a brownout.
    ``jitter`` spreads each delay uniformly over ``value * (1 +/- jitter)`` so requests are not in lockstep.
    """

    start_value: float
    end_value: float
    over: float
    start: float = 0.0
    jitter: float = 0.0

    def value_at(self, t: float) -> float:
        """The ramp's centre value at plan time ``t``."""
        progress = min(1.0, max(0.0, (t - self.start) / self.over))
        return self.start_value + (self.end_value - self.start_value) * progress

    def sample(self, u: float, t: float = 0.0) -> float:
        """Centre value at ``t``, spread by ``jitter`` according to ``u``."""
        return max(0.0, self.value_at(t) * (1.0 + self.jitter * (2.0 * u - 1.0)))

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form."""
        body: dict[str, object] = {"from": self.start_value, "to": self.end_value, "over": self.over}
        if self.start:
            body["start"] = self.start
        if self.jitter:
            body["jitter"] = self.jitter
        return {"ramp": body}


LatencySpec = FixedLatency | UniformLatency | LognormalLatency | ParetoLatency | RampLatency
