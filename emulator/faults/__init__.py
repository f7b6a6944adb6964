"""Fault injection for the emulator: plans as data, seeded keyed decisions, limits, a log, replay.

Pure logic: no web framework imports. The HTTP layer calls ``FaultEngine.decide(route, key)``
for every request, carries out the returned ``Decision`` and releases its admission.
"""

from __future__ import annotations

from .bodies import FAULT_LABEL_HEADER, SANDBOX_ERROR_MESSAGE
from .clock import Clock, ManualClock, RealClock
from .decision import Admission, Decision, FaultAction
from .engine import FaultEngine
from .errors import AdmissionError, DelayTooLongError, FaultPlanError, ReplayMissError
from .keyed import keyed_uniform, logical_key
from .latency import FixedLatency, LatencySpec, LognormalLatency, ParetoLatency, RampLatency, UniformLatency
from .log import DecisionLog, dump_jsonl, load_jsonl
from .plan import (
    ConcurrencyLimit,
    FaultKind,
    FaultPlan,
    FaultSpec,
    HeadersStyle,
    IntRange,
    Limit,
    OverloadSpec,
    Rule,
    TimeWindow,
    TokenBucketLimit,
    WindowLimit,
    route_matches,
)
from .profiles import PROFILES, load_plan, profile_names
from .replay import ReplayEngine

__all__ = [
    "FAULT_LABEL_HEADER",
    "PROFILES",
    "SANDBOX_ERROR_MESSAGE",
    "Admission",
    "AdmissionError",
    "Clock",
    "ConcurrencyLimit",
    "Decision",
    "DecisionLog",
    "DelayTooLongError",
    "FaultAction",
    "FaultEngine",
    "FaultKind",
    "FaultPlan",
    "FaultPlanError",
    "FaultSpec",
    "FixedLatency",
    "HeadersStyle",
    "IntRange",
    "LatencySpec",
    "Limit",
    "LognormalLatency",
    "ManualClock",
    "OverloadSpec",
    "ParetoLatency",
    "RampLatency",
    "RealClock",
    "ReplayEngine",
    "ReplayMissError",
    "Rule",
    "TimeWindow",
    "TokenBucketLimit",
    "UniformLatency",
    "WindowLimit",
    "dump_jsonl",
    "keyed_uniform",
    "load_jsonl",
    "load_plan",
    "logical_key",
    "profile_names",
    "route_matches",
]
