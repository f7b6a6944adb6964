"""Named built-in fault profiles (plain dicts) and ``load_plan`` to turn any plan spec into a ``FaultPlan``.

Profiles are data, not code, so users can copy one into a YAML file and edit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import FaultPlanError
from .plan import FaultPlan

__all__ = ["PROFILES", "load_plan", "profile_names"]

PROFILES: dict[str, dict[str, Any]] = {
    # Nothing injected: the baseline a test gets when it asks for no faults.
    "calm": {
        "seed": 0,
        "description": "No latency, no faults, no limits.",
        "rules": [],
        "limits": [],
    },
    # Sandbox Fusion behind the veFaaS / API gateway that verl's examples point at
    # (sandbox_fusion.md §2.2): the server itself never sends 429/5xx, the gateway does.
    # Bodies are nginx-style gateway pages (plausible, unverified). No Retry-After: none is
    # documented for that gateway, and verl ignores it anyway.
    "vefaas-gateway": {
        "seed": 0,
        "description": "Occasional gateway 429 and 504 (HTML bodies) and lognormal latency before Sandbox Fusion.",
        "rules": [
            {
                "id": "gateway-latency",
                "route": "sandbox_fusion.*",
                "latency": {"lognormal": {"p50": 0.05, "p99": 0.8}},
            },
            {"id": "gateway-429", "route": "sandbox_fusion.*", "probability": 0.02, "fault": {"status": 429}},
            {"id": "gateway-504", "route": "sandbox_fusion.*", "probability": 0.03, "fault": {"status": 504}},
            {"id": "gateway-502", "route": "sandbox_fusion.*", "probability": 0.005, "fault": {"status": 502}},
        ],
        "limits": [],
    },
    # A generally unreliable network and backend: connection resets, 503s with Retry-After,
    # occasional SandboxError bodies and truncated replies, with a heavy latency tail.
    "flaky": {
        "seed": 0,
        "description": "A mix of resets, 502/503, SandboxError, truncation, and heavy-tailed latency on every route.",
        "rules": [
            {"id": "base-latency", "route": "*", "latency": {"lognormal": {"p50": 0.02, "p99": 0.5}}},
            {
                "id": "tail-latency",
                "route": "*",
                "probability": 0.05,
                "latency": {"pareto": {"scale": 0.1, "alpha": 1.5, "cap": 5.0}},
            },
            {"id": "reset", "route": "*", "probability": 0.03, "fault": "reset"},
            {"id": "unavailable", "route": "*", "probability": 0.05, "fault": {"status": 503, "retry_after": 1}},
            {"id": "bad-gateway", "route": "*", "probability": 0.02, "fault": {"status": 502}},
            {"id": "sandbox-error", "route": "sandbox_fusion.run_*", "probability": 0.02, "fault": "sandbox_error"},
            {"id": "truncate", "route": "*", "probability": 0.01, "fault": "truncate"},
        ],
        "limits": [],
    },
}


def profile_names() -> list[str]:
    """Sorted names of the built-in profiles."""
    return sorted(PROFILES)


def load_plan(spec: str | Path | Mapping[str, Any] | FaultPlan | None, *, seed: int | None = None) -> FaultPlan:
    """Build a plan from a profile name, a YAML/JSON file path, a mapping, a plan, or None (``calm``).

    ``seed`` overrides the plan's seed (e.g. one derived from a test id).
    """
    plan: FaultPlan
    if spec is None:
        plan = FaultPlan.from_dict(PROFILES["calm"])
    elif isinstance(spec, FaultPlan):
        plan = spec
    elif isinstance(spec, Mapping):
        plan = FaultPlan.from_dict(spec)
    elif isinstance(spec, Path):
        plan = FaultPlan.from_file(spec)
    elif isinstance(spec, str):
        if spec in PROFILES:
            plan = FaultPlan.from_dict(PROFILES[spec])
        elif Path(spec).suffix.lower() in (".yaml", ".yml", ".json") or Path(spec).is_file():
            plan = FaultPlan.from_file(spec)
        else:
            raise FaultPlanError(
                "<profile>",
                f"unknown fault profile {spec!r} and no such plan file; known profiles: {', '.join(profile_names())}",
            )
    else:
        raise FaultPlanError(
            "<plan>", f"expected a profile name, a path, a mapping or a FaultPlan, got {type(spec).__name__}"
        )
    return plan if seed is None else plan.with_seed(seed)
