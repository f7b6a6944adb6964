"""Named built-in fault profiles (plain dicts) and ``load_plan`` to turn any plan spec into a ``FaultPlan``.

Profiles are data, not code, so users can copy one into a YAML file and edit it. The package holds the canonical
copies (the emulator never reads a repository's files at run time); the repository's ``fixtures/chaos/*.yaml`` are
checked to be equal to them.
"""

from __future__ import annotations

import os
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
    # Daytona's documented Tier 1 limits (daytona.md, "Rate limiting") as fault-plan limits: a fixed window per
    # minute opened by the first request (the API's own NestJS throttlers, emulated by the Daytona service itself,
    # also block for a minute from the refused hit), the X-RateLimit-*-{name} headers on every control-plane answer
    # and Retry-After-{name} on a 429. Toolbox traffic is not throttled. The fork/resize/archive routes the real
    # throttlers also cover are not emulated.
    "daytona-tier1": {
        "seed": 0,
        "description": (
            "Daytona Tier 1 throttlers per minute: authenticated 10,000 (the control-plane routes but creation "
            "and the lifecycle), sandbox-create 300, sandbox-lifecycle 10,000 (delete, start, stop, pause, recover), "
            "with Daytona's headers."
        ),
        "rules": [],
        "limits": [
            {
                "name": "authenticated",
                # The API's creation and lifecycle routes skip it (@SkipThrottle({authenticated: true})).
                "route": [
                    "daytona.sandbox.list",
                    "daytona.sandbox.get",
                    "daytona.sandbox.toolbox_proxy_url",
                    "daytona.sandbox.labels",
                    "daytona.sandbox.autostop",
                    "daytona.sandbox.autodelete",
                    "daytona.sandbox.autoarchive",
                    "daytona.sandbox.public",
                    "daytona.sandbox.last_activity",
                    "daytona.not_emulated",  # the 501 of an API route not emulated, which the API throttles
                ],
                "max_requests": 10000,
                "per": 60,
                "headers_style": "daytona",
            },
            {
                "name": "sandbox-create",
                "route": "daytona.sandbox.create",
                "max_requests": 300,
                "per": 60,
                "headers_style": "daytona",
            },
            {
                "name": "sandbox-lifecycle",
                "route": [
                    "daytona.sandbox.delete",
                    "daytona.sandbox.start",
                    "daytona.sandbox.stop",
                    "daytona.sandbox.pause",
                    "daytona.sandbox.recover",
                ],
                "max_requests": 10000,
                "per": 60,
                "headers_style": "daytona",
            },
        ],
    },
    # A closed loop, M/M/c-like: a service with a few workers, where every request beyond the capacity in
    # flight waits longer and is more likely to be shed with a 429. Clients that pile on make it worse;
    # clients that back off see it recover.
    "overload": {
        "seed": 0,
        "description": (
            "Beyond 8 requests in flight per service, each excess request adds 50 ms of queueing and 8% chance "
            "of a 429 (Retry-After: 1), up to 95%; lognormal service time underneath."
        ),
        "rules": [
            {
                "id": "service-time",
                "route": ["sandbox_fusion.*", "daytona.toolbox.*", "daytona.interpreter.*"],
                "latency": {"lognormal": {"p50": 0.05, "p99": 0.5}},
            },
            {
                "id": "sandbox-fusion-overload",
                "route": "sandbox_fusion.*",
                "overload": {
                    "capacity": 8,
                    "latency_per_excess": 0.05,
                    "p429_per_excess": 0.08,
                    "max_probability": 0.95,
                },
                "fault": {"status": 429, "retry_after": 1},
            },
            {
                "id": "daytona-toolbox-overload",
                "route": ["daytona.toolbox.*", "daytona.interpreter.*"],
                "overload": {
                    "capacity": 8,
                    "latency_per_excess": 0.05,
                    "p429_per_excess": 0.08,
                    "max_probability": 0.95,
                },
                "fault": {"status": 429, "retry_after": 1},
            },
        ],
        "limits": [],
    },
    # A ten-minute outage one minute in: connections reset or 503 with Retry-After on every route, then full
    # recovery. On the virtual clock the whole story runs in well under a second.
    "outage": {
        "seed": 0,
        "description": (
            "From 60 s to 660 s of plan time every request fails: 30% connection resets, the rest 503 with "
            "Retry-After: 10; normal service before and after."
        ),
        "rules": [
            {
                "id": "outage-reset",
                "route": "*",
                "window": {"start": 60, "end": 660},
                "probability": 0.3,
                "fault": "reset",
            },
            {
                "id": "outage-503",
                "route": "*",
                "window": {"start": 60, "end": 660},
                "fault": {"status": 503, "retry_after": 10},
            },
        ],
        "limits": [],
    },
    # A brownout: nothing fails outright, everything gets slower. Latency ramps from 50 ms to 3 s over ten
    # minutes starting one minute in, and stays there; +/-20% jitter keeps requests out of lockstep.
    "brownout": {
        "seed": 0,
        "description": (
            "Latency on every route ramps from 0.05 s to 3 s (+/-20% jitter) between 60 s and 660 s of plan time, "
            "then stays at 3 s; no errors."
        ),
        "rules": [
            {
                "id": "brownout-latency",
                "route": "*",
                "latency": {"ramp": {"from": 0.05, "to": 3.0, "over": 600, "start": 60, "jitter": 0.2}},
            },
        ],
        "limits": [],
    },
}


def profile_names() -> list[str]:
    """Names of the built-in profiles: ``calm`` (the baseline) first, then alphabetical."""
    return sorted(PROFILES, key=lambda name: (name != "calm", name))


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
        if not spec.strip():
            raise FaultPlanError("<profile>", f"an empty name names no profile and no plan file: {spec!r}")
        if spec in PROFILES:
            plan = FaultPlan.from_dict(PROFILES[spec])
        elif Path(spec).suffix.lower() in (".yaml", ".yml", ".json") or Path(spec).exists() or os.sep in spec:
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
