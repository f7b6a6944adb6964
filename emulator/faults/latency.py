"""Latency distributions sampled by inverse CDF from one keyed uniform draw.

Inverse-CDF sampling keeps latency a pure function of the keyed uniform (see ``keyed.py``),
so the same logical request always gets the same delay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "Z99",
    "FixedLatency",
    "LatencySpec",
    "LognormalLatency",
    "ParetoLatency",
    "UniformLatency",
]

# 99th percentile of the standard normal; used to turn (p50, p99) into (mu, sigma).
Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class FixedLatency:
    """Always the same delay."""

    seconds: float

    def sample(self, u: float) -> float:
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

    def sample(self, u: float) -> float:
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

    def sample(self, u: float) -> float:
        """Inverse CDF: ``exp(mu + sigma * Phi^-1(u))``."""
        if self.sigma == 0.0:
            return self.p50
        return math.exp(self.mu + self.sigma * NormalDist().inv_cdf(u))

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

    def sample(self, u: float) -> float:
        """Inverse CDF ``scale / (1 - u) ** (1 / alpha)``, clipped to ``cap``."""
        value = self.scale / float((1.0 - u) ** (1.0 / self.alpha))
        return min(value, self.cap) if self.cap is not None else value

    def to_dict(self) -> dict[str, object]:
        """Plan-syntax form."""
        body: dict[str, object] = {"scale": self.scale, "alpha": self.alpha}
        if self.cap is not None:
            body["cap"] = self.cap
        return {"pareto": body}


LatencySpec = FixedLatency | UniformLatency | LognormalLatency | ParetoLatency
