"""Exceptions of the fault subsystem.

They are plain ``ValueError``/``RuntimeError`` subclasses so callers that do not know this
package still get a sensible exception type.
"""

from __future__ import annotations

__all__ = ["AdmissionError", "FaultPlanError", "ReplayMissError"]


class FaultPlanError(ValueError):
    """A fault plan is invalid; ``path`` names the offending key (e.g. ``rules[2].latency``)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path or "<plan>"
        self.message = message
        super().__init__(f"{self.path}: {message}")


class DelayTooLongError(FaultPlanError):
    """A delay beyond what a plan may inject (``limit`` seconds); ``seconds`` is the one given."""

    def __init__(self, path: str, seconds: float, limit: float) -> None:
        self.seconds = seconds
        self.limit = limit
        super().__init__(path, f"expected at most {limit:g} seconds (one day), got {seconds:g}")


class AdmissionError(RuntimeError):
    """An admission ticket was released twice or does not belong to this engine."""


class ReplayMissError(LookupError):
    """A strict replay was asked for a (route, key, attempt) that the log does not contain."""
