"""The fault plan: immutable data describing which requests get which faults.

A plan is parsed once, validated strictly (unknown keys are errors, so typos do not silently
disable a fault) and then only read by the engine. All collections are tuples so plans are
hashable and safe to share between threads.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, cast

from .errors import DelayTooLongError, FaultPlanError
from .latency import (
    MAX_DELAY_S,
    FixedLatency,
    LatencySpec,
    LognormalLatency,
    ParetoLatency,
    RampLatency,
    UniformLatency,
)
from .strict_load import load_json, load_yaml

__all__ = [
    "FAULT_KINDS",
    "ConcurrencyLimit",
    "FaultKind",
    "FaultPlan",
    "FaultSpec",
    "HeadersStyle",
    "IntRange",
    "Limit",
    "OverloadSpec",
    "Rule",
    "TimeWindow",
    "TokenBucketLimit",
    "WindowLimit",
    "parse_latency",
    "parse_ranges",
    "route_matches",
]

FaultKind = Literal["status", "hang", "reset", "truncate", "malformed", "sandbox_error", "null_stdout"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "status",
    "hang",
    "reset",
    "truncate",
    "malformed",
    "sandbox_error",
    "null_stdout",
)
HeadersStyle = Literal["retry-after", "daytona", "none"]
_HEADERS_STYLES: tuple[HeadersStyle, ...] = ("retry-after", "daytona", "none")


# --------------------------------------------------------------------------- data


def route_matches(route: str, pattern: str) -> bool:
    """True when ``route`` matches the glob ``pattern`` or one of its ``|``-separated alternatives."""
    return any(fnmatchcase(route, alt) for alt in pattern.split("|"))


@dataclass(frozen=True)
class TimeWindow:
    """Half-open span ``[start, end)`` of plan time (seconds since the engine started or was reset)."""

    start: float = 0.0
    end: float | None = None

    def __contains__(self, t: object) -> bool:
        return (
            isinstance(t, (int, float))
            and not isinstance(t, bool)
            and t >= self.start
            and (self.end is None or t < self.end)
        )

    def to_dict(self) -> dict[str, float]:
        """Plan-syntax form."""
        out = {"start": self.start}
        if self.end is not None:
            out["end"] = self.end
        return out


@dataclass(frozen=True)
class OverloadSpec:
    """Closed-loop load response, M/M/c-like: beyond ``capacity`` requests in flight on the rule's routes, each
    excess request adds ``latency_per_excess`` seconds of queueing delay and ``p429_per_excess`` to the chance of
    the rule's fault (a 429 unless the rule names another), capped at ``max_probability``."""

    capacity: int
    latency_per_excess: float = 0.0
    p429_per_excess: float = 0.0
    max_probability: float = 1.0

    def excess(self, in_flight: int) -> int:
        """Requests beyond capacity (0 when under it)."""
        return max(0, in_flight - self.capacity)

    def latency(self, in_flight: int) -> float:
        """Added queueing delay at this load."""
        return self.latency_per_excess * self.excess(in_flight)

    def probability(self, in_flight: int) -> float:
        """Chance of the overload fault at this load."""
        return min(self.max_probability, self.p429_per_excess * self.excess(in_flight))

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form."""
        return {
            "capacity": self.capacity,
            "latency_per_excess": self.latency_per_excess,
            "p429_per_excess": self.p429_per_excess,
            "max_probability": self.max_probability,
        }


@dataclass(frozen=True)
class IntRange:
    """Inclusive range of 1-based ordinals; ``stop=None`` means open-ended."""

    start: int
    stop: int | None

    def __contains__(self, n: object) -> bool:
        return isinstance(n, int) and n >= self.start and (self.stop is None or n <= self.stop)

    def to_text(self) -> str:
        """Plan-syntax form (``"3-5"``, ``"7"``, ``"10-"``)."""
        if self.stop is None:
            return f"{self.start}-"
        return str(self.start) if self.start == self.stop else f"{self.start}-{self.stop}"


@dataclass(frozen=True)
class FaultSpec:
    """One fault as written in the plan; route-dependent defaults are filled in by the engine.

    ``status`` is the HTTP status for ``status`` faults and the answer after a ``hang``
    (``None`` with ``then_reset``). ``body``/``headers`` override the defaults from ``bodies.py``.
    """

    kind: FaultKind
    status: int | None = None
    retry_after: float | None = None
    hang_seconds: float = 0.0
    then_reset: bool = False
    message: str | None = None
    keep_fraction: float = 0.5
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form (parses back to an equal spec)."""
        out: dict[str, Any]
        if self.kind == "status":
            out = {"status": self.status}
            if self.retry_after is not None:
                out["retry_after"] = self.retry_after
        elif self.kind == "hang":
            out = {"hang": {"seconds": self.hang_seconds, "then": "reset" if self.then_reset else self.status}}
        elif self.kind == "sandbox_error":
            out = {"sandbox_error": {"message": self.message} if self.message is not None else {}}
        elif self.kind == "truncate":
            out = {"truncate": {"keep_fraction": self.keep_fraction}}
        else:
            out = {self.kind: {}}
        if self.body is not None:
            out["body"] = self.body
        if self.headers:
            out["headers"] = dict(self.headers)
        return out


@dataclass(frozen=True)
class Rule:
    """Match a route (glob), optional key glob, attempt and arrival-ordinal ranges; then fire with ``probability``.

    Empty ``attempts``/``requests`` mean "any". ``requests`` is a scripted schedule over the
    per-route arrival ordinal and is therefore order-dependent by nature; everything else is
    keyed on the logical request and order-independent. ``window`` restricts the rule to a span
    of plan time; ``overload`` makes its latency and fault depend on the load in flight (both
    are logged, so a replay reproduces them).
    """

    id: str
    route: str = "*"
    key: str | None = None
    attempts: tuple[IntRange, ...] = ()
    requests: tuple[IntRange, ...] = ()
    probability: float = 1.0
    latency: LatencySpec | None = None
    fault: FaultSpec | None = None
    window: TimeWindow | None = None
    overload: OverloadSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form."""
        out: dict[str, Any] = {"id": self.id, "route": self.route}
        if self.key is not None:
            out["key"] = self.key
        if self.attempts:
            out["attempts"] = ",".join(r.to_text() for r in self.attempts)
        if self.requests:
            out["requests"] = ",".join(r.to_text() for r in self.requests)
        if self.probability != 1.0:
            out["probability"] = self.probability
        if self.latency is not None:
            out["latency"] = self.latency.to_dict()
        if self.fault is not None:
            out["fault"] = self.fault.to_dict()
        if self.window is not None:
            out["window"] = self.window.to_dict()
        if self.overload is not None:
            out["overload"] = self.overload.to_dict()
        return out


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most ``max_in_flight`` admitted requests at once on routes matching ``route``; the rest get 429."""

    name: str
    route: str
    max_in_flight: int
    headers_style: HeadersStyle = "retry-after"
    retry_after: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form."""
        return {
            "name": self.name,
            "route": self.route,
            "max_in_flight": self.max_in_flight,
            "headers_style": self.headers_style,
            "retry_after": self.retry_after,
        }


@dataclass(frozen=True)
class TokenBucketLimit:
    """Token bucket of capacity ``burst`` refilled at ``rate`` tokens/s; an empty bucket answers 429."""

    name: str
    route: str
    rate: float
    burst: int
    headers_style: HeadersStyle = "retry-after"

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form."""
        return {
            "name": self.name,
            "route": self.route,
            "rate": self.rate,
            "burst": self.burst,
            "headers_style": self.headers_style,
        }


@dataclass(frozen=True)
class WindowLimit:
    """At most ``max_requests`` per fixed window of ``per`` seconds, the window opening at its first request; the
    rest of the window answers 429 (a gateway's counter: the Daytona service's own throttlers block as NestJS's do,
    see :mod:`emulator.daytona.throttle`)."""

    name: str
    route: str
    max_requests: int
    per: float
    headers_style: HeadersStyle = "retry-after"

    def to_dict(self) -> dict[str, Any]:
        """Plan-syntax form."""
        return {
            "name": self.name,
            "route": self.route,
            "max_requests": self.max_requests,
            "per": self.per,
            "headers_style": self.headers_style,
        }


Limit = ConcurrencyLimit | TokenBucketLimit | WindowLimit


#: Why an empty plan file (or a bare ``null``) is refused: it is more often a mistake than a wish for no faults.
_EMPTY_PLAN = "the plan is empty; write {} (or use the 'calm' profile) for a plan with no faults"


@dataclass(frozen=True)
class FaultPlan:
    """A seed plus ordered rules and limits. Build with ``from_dict``/``from_yaml``/``from_file``."""

    seed: int = 0
    rules: tuple[Rule, ...] = ()
    limits: tuple[Limit, ...] = ()
    description: str = field(default="", compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultPlan:
        """Validate and build a plan from plain data; raises ``FaultPlanError`` naming the bad path."""
        return _parse_plan(data)

    @classmethod
    def from_yaml(cls, text: str) -> FaultPlan:
        """Parse YAML (or JSON, a YAML subset) text; a key twice in one mapping is an error, not the last one kept."""
        return cls._from_yaml(text, "<yaml>")

    @classmethod
    def _from_yaml(cls, text: str, where: str) -> FaultPlan:
        data = load_yaml(text, where)
        if data is None:
            raise FaultPlanError(where, _EMPTY_PLAN)
        return _parse_plan(data)

    @classmethod
    def from_file(cls, path: str | Path) -> FaultPlan:
        """Load a ``.yaml``/``.yml``/``.json`` file."""
        p = Path(path)
        if p.is_dir():
            raise FaultPlanError(str(p), "is a directory, not a plan file")
        if p.exists() and not p.is_file():  # a pipe or a device would block the read or never end
            raise FaultPlanError(str(p), "is not a regular file")
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise FaultPlanError(str(p), f"cannot read plan file: {exc}") from None
        if p.suffix.lower() == ".json":
            data = load_json(text, str(p))
            if data is None:
                raise FaultPlanError(str(p), _EMPTY_PLAN)
        else:
            data = load_yaml(text, str(p))
            if data is None:
                raise FaultPlanError(str(p), _EMPTY_PLAN)
        try:
            return _parse_plan(data)
        except FaultPlanError as exc:  # the file, then the key: one line that says where, whatever the format
            raise FaultPlanError(f"{p}:{exc.path}", exc.message) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form that ``from_dict`` turns back into an equal plan."""
        out: dict[str, Any] = {
            "seed": self.seed,
            "rules": [r.to_dict() for r in self.rules],
            "limits": [lim.to_dict() for lim in self.limits],
        }
        if self.description:
            out["description"] = self.description
        return out

    def with_seed(self, seed: int) -> FaultPlan:
        """Same rules, different seed (e.g. derived from a pytest node id)."""
        return replace(self, seed=seed)


# --------------------------------------------------------------------------- parsing helpers


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _fail(path: str, expected: str, got: object) -> FaultPlanError:
    return FaultPlanError(path, f"expected {expected}, got {_type_name(got)} {value_repr(got)}")


def value_repr(value: object) -> str:
    """Short repr for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "a mapping", value)
    for k in value:
        if not isinstance(k, str):
            raise FaultPlanError(path, f"keys must be strings, got {_type_name(k)} {value_repr(k)}")
    return cast(Mapping[str, Any], value)


def _check_keys(m: Mapping[str, Any], allowed: Iterable[str], path: str, required: Iterable[str] = ()) -> None:
    allowed_list = list(allowed)
    for k in m:
        if k not in allowed_list:
            hint = difflib.get_close_matches(k, allowed_list, n=1)
            did = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise FaultPlanError(f"{path}.{k}" if path else k, f"unknown key{did}; allowed: {', '.join(allowed_list)}")
    for k in required:
        if k not in m:
            raise FaultPlanError(f"{path}.{k}" if path else k, "required key is missing")


def _int(value: object, path: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, "an integer", value)
    if minimum is not None and value < minimum:
        raise FaultPlanError(path, f"expected an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise FaultPlanError(path, f"expected an integer <= {maximum}, got {value}")
    return value


#: A number with an exponent that PyYAML leaves a string (no dot, or no sign): ``1e9``, ``2.5e3``.
_YAML_EXPONENT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _number(value: object, path: str, *, minimum: float = 0.0, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        error = _fail(path, "a number", value)
        if isinstance(value, str) and _YAML_EXPONENT.fullmatch(value.strip()):
            # YAML 1.1 (PyYAML) reads an exponent without a dot as a string: 1e9 is text, 1.0e+9 a number.
            hint = "YAML reads an exponent as a number only with a dot and a sign, as 1.0e+9"
            error = FaultPlanError(path, f"{error.message} ({hint})")
        raise error
    f = float(value)
    if not math.isfinite(f):
        raise FaultPlanError(path, f"expected a finite number, got {value}")
    if positive and f <= 0:
        raise FaultPlanError(path, f"expected a number > 0, got {value}")
    if f < minimum:
        raise FaultPlanError(path, f"expected a number >= {minimum}, got {value}")
    return f


def _delay(value: object, path: str, *, positive: bool = False) -> float:
    """Seconds to wait: a finite number >= 0 (> 0 with ``positive``), at most :data:`MAX_DELAY_S`."""
    f = _number(value, path, positive=positive)
    if f > MAX_DELAY_S:
        raise DelayTooLongError(path, f, MAX_DELAY_S)
    return f


def _str(value: object, path: str, *, nonempty: bool = True) -> str:
    if not isinstance(value, str):
        raise _fail(path, "a string", value)
    if nonempty and not value:
        raise FaultPlanError(path, "expected a non-empty string")
    return value


#: A status written as text: three ASCII digits ("503"; not "0503", nor another script's digits, which int() reads).
_STATUS_TEXT = re.compile(r"[1-9][0-9]{2}")

#: Statuses whose answer has no body (RFC 9110 §15.3.5, §15.4.5): a fault's answer always has one, and the server
#: fails sending it.
_BODYLESS_STATUSES = (204, 304)


def check_status(value: object, path: str) -> int:
    """An HTTP status a fault may answer with: 200-599 but 204 and 304.

    A 1xx is an interim answer, not a response: 100 left the client waiting for the real one, 101 switched protocols
    and broke the connection."""
    if isinstance(value, str) and _STATUS_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 599:
        raise _fail(path, "an HTTP status code 200-599", value)
    if value < 200:
        raise FaultPlanError(path, f"expected an HTTP status code 200-599, got {value} (a 1xx is an interim answer)")
    if value in _BODYLESS_STATUSES:
        raise FaultPlanError(path, f"a fault's answer has a body, which a {value} answer cannot carry")
    return value


_status = check_status


def _flag_options(value: object, path: str) -> Mapping[str, Any]:
    """Kinds written as ``reset: true`` / ``reset: {}`` / ``reset: null`` take an options mapping."""
    if value is None or value is True:
        return {}
    if value is False:
        raise FaultPlanError(path, "a fault kind cannot be false; remove the fault instead")
    return _mapping(value, path)


# --------------------------------------------------------------------------- ranges

#: ASCII digits only: ``\d`` and ``int()`` also read other scripts' digits (an Arabic-Indic one as 1).
_RANGE_RE = re.compile(r"^\s*([0-9]+)\s*(?:(-)\s*([0-9]+)?)?\s*$", re.ASCII)


def _one_range(value: object, path: str) -> IntRange:
    if isinstance(value, bool):
        raise _fail(path, "an ordinal, 'a-b' or [a, b]", value)
    if isinstance(value, int):
        return _make_range(value, value, path)
    if isinstance(value, str):
        m = _RANGE_RE.match(value)
        if not m:
            raise FaultPlanError(path, f"expected 'N', 'A-B' or 'A-' (ordinals start at 1), got {value!r}")
        start = int(m.group(1))
        if m.group(2) is None:
            return _make_range(start, start, path)
        return _make_range(start, int(m.group(3)) if m.group(3) is not None else None, path)
    if isinstance(value, Sequence) and len(value) == 2:
        a = _int(value[0], f"{path}[0]")
        b = _int(value[1], f"{path}[1]")
        return _make_range(a, b, path)
    if isinstance(value, Mapping):
        m2 = _mapping(value, path)
        _check_keys(m2, ("from", "to"), path, required=("from",))
        start = _int(m2["from"], f"{path}.from")
        stop = m2.get("to")
        return _make_range(start, None if stop is None else _int(stop, f"{path}.to"), path)
    raise _fail(path, "an ordinal, 'a-b', [a, b] or {from, to}", value)


def _make_range(start: int, stop: int | None, path: str) -> IntRange:
    if start < 1:
        raise FaultPlanError(path, f"ordinals start at 1, got {start}")
    if stop is not None and stop < start:
        raise FaultPlanError(path, f"range end {stop} is before its start {start}")
    return IntRange(start, stop)


def parse_ranges(value: object, path: str) -> tuple[IntRange, ...]:
    """Parse ``3``, ``"3-5"``, ``"1-2,7,10-"``, ``[3, 5]`` (a range) or a list of such items (a union)."""
    if value is None:
        return ()
    if isinstance(value, str) and "," in value:
        return tuple(_one_range(part, path) for part in value.split(","))
    if isinstance(value, (list, tuple)):
        if not value:
            raise FaultPlanError(path, "expected at least one ordinal or range, got an empty list")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if len(value) != 2:
                raise FaultPlanError(
                    path,
                    f"a list of integers means [start, end] and needs exactly 2, got {len(value)}; "
                    "write separate ordinals as '3,5,7'",
                )
            return (_one_range(value, path),)
        return tuple(_one_range(v, f"{path}[{i}]") for i, v in enumerate(value))
    return (_one_range(value, path),)


# --------------------------------------------------------------------------- latency

_LATENCY_KINDS = ("fixed", "uniform", "lognormal", "pareto", "ramp")


def parse_latency(value: object, path: str) -> LatencySpec:
    """Parse a bare number (fixed seconds) or ``{fixed|uniform|lognormal|pareto|ramp: ...}``."""
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
        isinstance(value, str) and _YAML_EXPONENT.fullmatch(value.strip())
    ):
        return FixedLatency(_delay(value, path))  # a number, or text YAML made of one (refused with a hint)
    m = _mapping(value, path)
    _check_keys(m, _LATENCY_KINDS, path)
    if len(m) != 1:
        raise FaultPlanError(path, f"expected exactly one of {', '.join(_LATENCY_KINDS)}, got {len(m)} keys")
    kind, arg = next(iter(m.items()))
    sub = f"{path}.{kind}"
    if kind == "fixed":
        return FixedLatency(_delay(arg, sub))
    if kind == "uniform":
        if isinstance(arg, Mapping):
            am = _mapping(arg, sub)
            _check_keys(am, ("low", "high"), sub, required=("low", "high"))
            low, high = _delay(am["low"], f"{sub}.low"), _delay(am["high"], f"{sub}.high")
        elif isinstance(arg, (list, tuple)) and len(arg) == 2:
            low, high = _delay(arg[0], f"{sub}[0]"), _delay(arg[1], f"{sub}[1]")
        else:
            raise _fail(sub, "[low, high]", arg)
        if high < low:
            raise FaultPlanError(sub, f"high ({high}) must be >= low ({low})")
        return UniformLatency(low, high)
    am = _mapping(arg, sub)
    if kind == "ramp":
        return _parse_ramp(am, sub)
    if kind == "lognormal":
        _check_keys(am, ("p50", "p99"), sub, required=("p50", "p99"))
        p50 = _delay(am["p50"], f"{sub}.p50", positive=True)
        p99 = _delay(am["p99"], f"{sub}.p99", positive=True)
        if p99 < p50:
            raise FaultPlanError(sub, f"p99 ({p99}) must be >= p50 ({p50})")
        return LognormalLatency(p50, p99)
    _check_keys(am, ("scale", "alpha", "cap"), sub, required=("scale", "alpha"))
    scale = _delay(am["scale"], f"{sub}.scale", positive=True)
    alpha = _number(am["alpha"], f"{sub}.alpha", positive=True)
    cap = None if am.get("cap") is None else _delay(am["cap"], f"{sub}.cap", positive=True)
    if cap is not None and cap < scale:
        raise FaultPlanError(f"{sub}.cap", f"cap ({cap}) must be >= scale ({scale})")
    return ParetoLatency(scale, alpha, cap)


def _parse_ramp(m: Mapping[str, Any], path: str) -> RampLatency:
    _check_keys(m, ("from", "to", "over", "start", "jitter"), path, required=("from", "to", "over"))
    jitter = 0.0 if m.get("jitter") is None else _number(m["jitter"], f"{path}.jitter")
    if jitter > 1.0:
        raise FaultPlanError(f"{path}.jitter", f"expected a fraction in [0, 1], got {jitter}")
    return RampLatency(
        start_value=_delay(m["from"], f"{path}.from"),
        end_value=_delay(m["to"], f"{path}.to"),
        over=_number(m["over"], f"{path}.over", positive=True),
        start=0.0 if m.get("start") is None else _number(m["start"], f"{path}.start"),
        jitter=jitter,
    )


def _parse_window(value: object, path: str) -> TimeWindow:
    m = _mapping(value, path)
    _check_keys(m, ("start", "end"), path)
    if not m:
        raise FaultPlanError(path, "expected 'start' and/or 'end' (seconds of plan time)")
    start = 0.0 if m.get("start") is None else _number(m["start"], f"{path}.start")
    end = None if m.get("end") is None else _number(m["end"], f"{path}.end")
    if end is not None and end <= start:
        raise FaultPlanError(f"{path}.end", f"window end ({end}) must be after its start ({start})")
    return TimeWindow(start, end)


_OVERLOAD_KEYS = ("capacity", "latency_per_excess", "p429_per_excess", "max_probability")


def _parse_overload(value: object, path: str) -> OverloadSpec:
    m = _mapping(value, path)
    _check_keys(m, _OVERLOAD_KEYS, path, required=("capacity",))
    latency = (
        0.0 if m.get("latency_per_excess") is None else _delay(m["latency_per_excess"], f"{path}.latency_per_excess")
    )
    p = 0.0 if m.get("p429_per_excess") is None else _probability(m["p429_per_excess"], f"{path}.p429_per_excess")
    cap = 1.0 if m.get("max_probability") is None else _probability(m["max_probability"], f"{path}.max_probability")
    if latency == 0.0 and p == 0.0:
        raise FaultPlanError(path, "set latency_per_excess and/or p429_per_excess, otherwise overload does nothing")
    return OverloadSpec(_int(m["capacity"], f"{path}.capacity", minimum=0), latency, p, cap)


def _probability(value: object, path: str) -> float:
    p = _number(value, path)
    if p > 1.0:
        raise FaultPlanError(path, f"expected a probability in [0, 1], got {p}")
    return p


# --------------------------------------------------------------------------- faults

_COMMON_FAULT_KEYS = ("body", "headers")


#: RFC 9110 §5.6.2 token: what a header name is made of (uvicorn and h11 refuse anything else, and the client got an
#: empty reply).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN_CHARS = "letters, digits and !#$%&'*+-.^_`|~"

#: A header value the server sends as written: Latin-1 text without control characters (a tab inside is allowed) and
#: without spaces at its ends. A CR or LF gave an empty reply, a character beyond Latin-1 a 500.
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")


def check_header(name: str, value: str, path: str) -> None:
    """Refuse a header the server cannot send as written; ``path`` names it in the error."""
    if not _TOKEN.fullmatch(name):
        raise FaultPlanError(path, f"a header name is a token ({_TOKEN_CHARS}), got {name!r}")
    if not _HEADER_VALUE.fullmatch(value):
        raise FaultPlanError(
            path,
            "a header value is Latin-1 text without control characters (CR, LF...) or spaces at its ends, "
            f"got {value_repr(value)}",
        )


def _headers(value: object, path: str) -> tuple[tuple[str, str], ...]:
    m = _mapping(value, path)
    out: list[tuple[str, str]] = []
    for k, v in m.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _fail(f"{path}.{k}", "a string or number header value", v)
        check_header(k, str(v), f"{path}.{k}")
        out.append((k, str(v)))
    return tuple(out)


def _parse_fault(value: object, path: str) -> FaultSpec:
    if isinstance(value, int) and not isinstance(value, bool):
        return FaultSpec("status", status=_status(value, path))
    if isinstance(value, str):
        if value.isascii() and value.isdigit():
            return FaultSpec("status", status=_status(value, path))
        if value in ("reset", "truncate", "malformed", "sandbox_error", "null_stdout"):
            return FaultSpec(cast(FaultKind, value))
        if value == "status":
            raise FaultPlanError(path, "a 'status' fault needs its code: write e.g. 503 or {status: 503}")
        hint = difflib.get_close_matches(value, FAULT_KINDS, n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise FaultPlanError(path, f"unknown fault kind {value!r}{did}; expected one of {', '.join(FAULT_KINDS)}")
    m = _mapping(value, path)
    kinds = [k for k in m if k in FAULT_KINDS]
    if len(kinds) != 1:
        _check_keys(m, (*FAULT_KINDS, *_COMMON_FAULT_KEYS, "retry_after"), path)
        raise FaultPlanError(
            path,
            f"expected exactly one fault kind ({', '.join(FAULT_KINDS)}), got "
            + (", ".join(kinds) if kinds else "none"),
        )
    kind = kinds[0]
    extra: tuple[str, ...] = ("retry_after",) if kind == "status" else ()
    common: tuple[str, ...] = () if kind in ("reset", "null_stdout") else _COMMON_FAULT_KEYS
    _check_keys(m, (kind, *common, *extra), path)
    body = None if m.get("body") is None else _str(m["body"], f"{path}.body", nonempty=False)
    headers = _headers(m["headers"], f"{path}.headers") if m.get("headers") is not None else ()
    arg = m[kind]
    sub = f"{path}.{kind}"
    if kind == "status":
        retry_after = None if m.get("retry_after") is None else _delay(m["retry_after"], f"{path}.retry_after")
        return FaultSpec("status", status=_status(arg, sub), retry_after=retry_after, body=body, headers=headers)
    if kind == "hang":
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            return FaultSpec("hang", status=504, hang_seconds=_delay(arg, sub), body=body, headers=headers)
        am = _mapping(arg, sub)
        _check_keys(am, ("seconds", "then"), sub, required=("seconds",))
        seconds = _delay(am["seconds"], f"{sub}.seconds")
        then = am.get("then", 504)
        if then == "reset":
            for ignored in _COMMON_FAULT_KEYS:
                if m.get(ignored) is not None:
                    raise FaultPlanError(
                        f"{path}.{ignored}", f"a hang that ends in a reset sends no answer, so no {ignored}"
                    )
            return FaultSpec("hang", hang_seconds=seconds, then_reset=True)
        try:
            status = _status(then, f"{sub}.then")
        except FaultPlanError:
            raise _fail(f"{sub}.then", "an HTTP status code or 'reset'", then) from None
        return FaultSpec("hang", status=status, hang_seconds=seconds, body=body, headers=headers)
    if kind == "sandbox_error" and isinstance(arg, str):
        return FaultSpec("sandbox_error", message=arg, body=body, headers=headers)
    opts = _flag_options(arg, sub)
    if kind == "sandbox_error":
        _check_keys(opts, ("message",), sub)
        msg = None if opts.get("message") is None else _str(opts["message"], f"{sub}.message", nonempty=False)
        return FaultSpec("sandbox_error", message=msg, body=body, headers=headers)
    if kind == "truncate":
        _check_keys(opts, ("keep_fraction",), sub)
        frac = 0.5 if "keep_fraction" not in opts else _number(opts["keep_fraction"], f"{sub}.keep_fraction")
        if frac >= 1.0:
            raise FaultPlanError(f"{sub}.keep_fraction", f"expected a fraction in [0, 1), got {frac}")
        return FaultSpec("truncate", keep_fraction=frac, body=body, headers=headers)
    _check_keys(opts, (), sub)
    return FaultSpec(kind, body=body, headers=headers)


# --------------------------------------------------------------------------- rules, limits, plan

_RULE_KEYS = ("id", "route", "key", "attempts", "requests", "window", "probability", "latency", "fault", "overload")


def _route(value: object, path: str) -> str:
    """A glob, or a list of globs stored as ``|``-separated alternatives."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise FaultPlanError(path, "expected at least one route glob, got an empty list")
        parts = [_str(v, f"{path}[{i}]") for i, v in enumerate(value)]
    else:
        parts = _str(value, path).split("|")
    for part in parts:
        if not part or "|" in part:
            raise FaultPlanError(path, f"expected route globs without empty alternatives, got {value_repr(value)}")
    return "|".join(parts)


def _parse_rule(value: object, index: int, path: str) -> Rule:
    m = _mapping(value, path)
    _check_keys(m, _RULE_KEYS, path)
    rule_id = _str(m["id"], f"{path}.id") if m.get("id") is not None else f"r{index}"
    route = _route(m.get("route", "*"), f"{path}.route")
    key = None if m.get("key") is None else _str(m["key"], f"{path}.key")
    probability = 1.0 if m.get("probability") is None else _probability(m["probability"], f"{path}.probability")
    latency = None if m.get("latency") is None else parse_latency(m["latency"], f"{path}.latency")
    fault = None if m.get("fault") is None else _parse_fault(m["fault"], f"{path}.fault")
    window = None if m.get("window") is None else _parse_window(m["window"], f"{path}.window")
    overload = None if m.get("overload") is None else _parse_overload(m["overload"], f"{path}.overload")
    if latency is None and fault is None and overload is None:
        raise FaultPlanError(path, "a rule needs 'latency', 'fault' and/or 'overload', otherwise it does nothing")
    return Rule(
        id=rule_id,
        route=route,
        key=key,
        attempts=parse_ranges(m.get("attempts"), f"{path}.attempts"),
        requests=parse_ranges(m.get("requests"), f"{path}.requests"),
        probability=probability,
        latency=latency,
        fault=fault,
        window=window,
        overload=overload,
    )


def _headers_style(value: object, path: str) -> HeadersStyle:
    if value not in _HEADERS_STYLES:
        raise _fail(path, "one of " + ", ".join(_HEADERS_STYLES), value)
    return value


#: The slowest token bucket: one token a day.
_MIN_RATE = 1.0 / MAX_DELAY_S

_LIMIT_KINDS = (
    "'max_in_flight' (concurrency cap), 'rate' and 'burst' (token bucket) or 'max_requests' and 'per' (fixed window)"
)


def _parse_limit(value: object, index: int, path: str) -> Limit:
    m = _mapping(value, path)
    is_cap = "max_in_flight" in m
    is_bucket = "rate" in m or "burst" in m
    is_window = "max_requests" in m or "per" in m
    if is_cap + is_bucket + is_window > 1:
        raise FaultPlanError(path, f"a limit is either one kind or another, not several: {_LIMIT_KINDS}")
    if not (is_cap or is_bucket or is_window):
        _check_keys(
            m,
            ("name", "route", "max_in_flight", "rate", "burst", "max_requests", "per", "headers_style", "retry_after"),
            path,
        )
        raise FaultPlanError(path, f"expected {_LIMIT_KINDS}")
    name = _str(m["name"], f"{path}.name") if m.get("name") is not None else f"limit{index}"
    route = _route(m.get("route", "*"), f"{path}.route")
    style = _headers_style(m.get("headers_style", "retry-after"), f"{path}.headers_style")
    if style == "daytona" and not _TOKEN.fullmatch(name):
        raise FaultPlanError(
            f"{path}.name",
            f"with headers_style daytona the name ends header names (X-RateLimit-Limit-{{name}}), so it is a token "
            f"({_TOKEN_CHARS}), got {name!r}",
        )
    if is_cap:
        _check_keys(m, ("name", "route", "max_in_flight", "headers_style", "retry_after"), path)
        retry_after = 1.0 if m.get("retry_after") is None else _delay(m["retry_after"], f"{path}.retry_after")
        cap = _int(m["max_in_flight"], f"{path}.max_in_flight", minimum=0)
        return ConcurrencyLimit(name, route, cap, style, retry_after)
    if is_window:
        _check_keys(
            m, ("name", "route", "max_requests", "per", "headers_style"), path, required=("max_requests", "per")
        )
        max_requests = _int(m["max_requests"], f"{path}.max_requests", minimum=1)
        # A refusal waits out the rest of the window: no longer than any other delay.
        return WindowLimit(name, route, max_requests, _delay(m["per"], f"{path}.per", positive=True), style)
    _check_keys(m, ("name", "route", "rate", "burst", "headers_style"), path, required=("rate", "burst"))
    rate = _number(m["rate"], f"{path}.rate", positive=True)
    if rate < _MIN_RATE:  # a refusal's wait for the next token, 1/rate, would be beyond a day (or infinite)
        raise FaultPlanError(f"{path}.rate", f"expected at least one token a day (>= 1/{MAX_DELAY_S:g}), got {rate:g}")
    burst = _int(m["burst"], f"{path}.burst", minimum=1)
    return TokenBucketLimit(name, route, rate, burst, style)


def _parse_list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _fail(path, "a list", value)
    return list(value)


def _parse_plan(data: object) -> FaultPlan:
    if isinstance(data, FaultPlan):
        return data
    m = _mapping(data, "<plan>")
    _check_keys(m, ("seed", "rules", "limits", "description"), "")
    seed = 0 if m.get("seed") is None else _int(m["seed"], "seed")
    rules = tuple(_parse_rule(r, i, f"rules[{i}]") for i, r in enumerate(_parse_list(m.get("rules"), "rules")))
    seen: dict[str, int] = {}
    for i, r in enumerate(rules):
        if r.id in seen:
            raise FaultPlanError(f"rules[{i}].id", f"duplicate rule id {r.id!r} (also rules[{seen[r.id]}])")
        seen[r.id] = i
    limits = tuple(_parse_limit(x, i, f"limits[{i}]") for i, x in enumerate(_parse_list(m.get("limits"), "limits")))
    names: dict[str, int] = {}
    for i, lim in enumerate(limits):
        if lim.name in names:
            other = names[lim.name]
            raise FaultPlanError(f"limits[{i}].name", f"duplicate limit name {lim.name!r} (also limits[{other}])")
        names[lim.name] = i
    description = "" if m.get("description") is None else _str(m["description"], "description", nonempty=False)
    return FaultPlan(seed=seed, rules=rules, limits=limits, description=description)
