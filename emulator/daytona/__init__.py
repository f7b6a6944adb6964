"""The Daytona service: control plane (``/sandbox``), per-sandbox toolbox and the interpreter WebSocket.

Built from ``shared/research/daytona.md`` (daytona SDK 0.226.1) so that the unmodified SDK works against it.
"""

from .config import DEFAULT_API_KEY, TIERS, DaytonaConfig, Quotas, ThrottlerSpec, tier_quotas, tier_throttlers
from .report import SandboxRecord, SandboxReport, code_digest, interpreter_runs, sandbox_report

__all__ = [
    "DEFAULT_API_KEY",
    "TIERS",
    "DaytonaConfig",
    "Quotas",
    "SandboxRecord",
    "SandboxReport",
    "ThrottlerSpec",
    "code_digest",
    "interpreter_runs",
    "sandbox_report",
    "tier_quotas",
    "tier_throttlers",
]
