"""What the engine tells the HTTP layer: a resolved fault action and a decision record.

Kept separate from the engine so the replay engine and the HTTP layer can build and read
decisions without pulling in limiter state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .bodies import JSON_CONTENT_TYPE, MALFORMED_JSON_BODY, default_status_response, sandbox_error_body
from .errors import FaultPlanError
from .plan import FAULT_KINDS, FaultKind, FaultSpec, _delay, _int, _number, check_header, check_status, value_repr

__all__ = ["ActionKind", "Admission", "Decision", "FaultAction", "resolve_fault"]

ActionKind = FaultKind | Literal["limited"]
_ACTION_KINDS: tuple[str, ...] = (*FAULT_KINDS, "limited")

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FaultAction:
    """A fully resolved instruction for the HTTP layer. Order of operations there:

    1. sleep ``Decision.latency``;
    2. ``hang``: sleep ``hang_seconds``, then answer ``status``/``body`` or drop the connection
       (``then_reset``);
    3. ``reset``: drop the connection without any answer;
    4. ``status`` / ``malformed`` / ``sandbox_error`` / ``limited``: answer ``status`` with
       ``headers`` and ``body`` without running the request;
    5. ``truncate``: send the full ``Content-Length`` of ``body`` (or of the real response when
       ``body`` is None) but only ``floor(len * keep_fraction)`` bytes, then close;
    6. ``null_stdout``: run the request for real, then set ``stdout`` to null in the answer.

    ``executes`` says whether the real handler must run.
    """

    kind: ActionKind
    status: int | None = None
    headers: Headers = ()
    body: str | None = None
    hang_seconds: float = 0.0
    then_reset: bool = False
    keep_fraction: float = 0.5
    retry_after: float | None = None
    limit: str | None = None

    @property
    def executes(self) -> bool:
        """True when the real request must run (its answer is then altered)."""
        return self.kind == "null_stdout" or (self.kind == "truncate" and self.body is None)

    @property
    def closes_connection(self) -> bool:
        """True when the connection is dropped instead of (or in the middle of) an answer."""
        return self.kind in ("reset", "truncate") or (self.kind == "hang" and self.then_reset)

    def header_dict(self) -> dict[str, str]:
        """Headers as a dict (later duplicates win)."""
        return dict(self.headers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; ``from_dict`` rebuilds an equal action."""
        return {
            "kind": self.kind,
            "status": self.status,
            "headers": [list(h) for h in self.headers],
            "body": self.body,
            "hang_seconds": self.hang_seconds,
            "then_reset": self.then_reset,
            "keep_fraction": self.keep_fraction,
            "retry_after": self.retry_after,
            "limit": self.limit,
        }

    @classmethod
    def from_dict(cls, data: object, path: str = "action") -> FaultAction:
        """Inverse of ``to_dict``; a damaged record (a wrong type, a value no plan could make) raises
        ``FaultPlanError`` naming the field, so a replay never answers with what the engine would not."""
        m = _record_mapping(data, path)
        kind = m.get("kind")
        if kind not in _ACTION_KINDS:
            raise FaultPlanError(f"{path}.kind", f"unknown action kind {value_repr(kind)}")
        status = m.get("status")
        return cls(
            kind=cast(ActionKind, kind),
            status=None if status is None else _strict_status(status, f"{path}.status"),
            headers=_record_headers(m.get("headers"), f"{path}.headers"),
            body=_optional_str(m.get("body"), f"{path}.body"),
            hang_seconds=_delay(m.get("hang_seconds", 0.0), f"{path}.hang_seconds"),
            then_reset=_bool(m.get("then_reset", False), f"{path}.then_reset"),
            keep_fraction=_fraction(m.get("keep_fraction", 0.5), f"{path}.keep_fraction"),
            retry_after=None if m.get("retry_after") is None else _delay(m["retry_after"], f"{path}.retry_after"),
            limit=_optional_str(m.get("limit"), f"{path}.limit"),
        )


# --------------------------------------------------------------------------- record fields, checked as a plan's


def _record_mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FaultPlanError(path, f"expected a mapping, got {type(value).__name__} {value_repr(value)}")
    return cast(Mapping[str, Any], value)


def _strict_status(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultPlanError(path, f"expected an HTTP status code, got {value_repr(value)}")
    return check_status(value, path)


def _optional_str(value: object, path: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise FaultPlanError(path, f"expected a string or null, got {value_repr(value)}")
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise FaultPlanError(path, f"expected true or false, got {value_repr(value)}")
    return value


def _fraction(value: object, path: str) -> float:
    f = _number(value, path)
    if f >= 1.0:
        raise FaultPlanError(path, f"expected a fraction in [0, 1), got {f}")
    return f


def _record_headers(value: object, path: str) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise FaultPlanError(path, f"expected a list of [name, value] pairs, got {value_repr(value)}")
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise FaultPlanError(f"{path}[{i}]", f"expected a [name, value] pair of strings, got {value_repr(pair)}")
        check_header(pair[0], pair[1], f"{path}[{i}]")
        out.append((pair[0], pair[1]))
    return tuple(out)


def retry_after_header(seconds: float) -> str:
    """HTTP ``Retry-After`` delta-seconds must be an integer; round up so clients never retry early."""
    return str(max(0, math.ceil(seconds - 1e-9)))


def _merge(*parts: Mapping[str, str] | Headers) -> Headers:
    merged: dict[str, str] = {}
    lower_to_key: dict[str, str] = {}
    for part in parts:
        items = part.items() if isinstance(part, Mapping) else part
        for k, v in items:
            old = lower_to_key.pop(k.lower(), None)
            if old is not None:
                merged.pop(old, None)
            merged[k] = v
            lower_to_key[k.lower()] = k
    return tuple(merged.items())


def resolve_fault(spec: FaultSpec, route: str) -> FaultAction:
    """Fill route-dependent default bodies/headers (from ``bodies.py``) into a plan's fault spec."""
    overrides = spec.headers
    if spec.kind == "status":
        assert spec.status is not None
        body, headers = default_status_response(spec.status, route)
        extra = {"Retry-After": retry_after_header(spec.retry_after)} if spec.retry_after is not None else {}
        return FaultAction(
            "status",
            status=spec.status,
            headers=_merge(headers, extra, overrides),
            body=spec.body if spec.body is not None else body,
            retry_after=spec.retry_after,
        )
    if spec.kind == "hang":
        if spec.then_reset:
            return FaultAction("hang", hang_seconds=spec.hang_seconds, then_reset=True)
        assert spec.status is not None
        body, headers = default_status_response(spec.status, route)
        return FaultAction(
            "hang",
            status=spec.status,
            headers=_merge(headers, overrides),
            body=spec.body if spec.body is not None else body,
            hang_seconds=spec.hang_seconds,
        )
    if spec.kind == "reset":
        return FaultAction("reset")
    if spec.kind == "truncate":
        ct = {"Content-Type": JSON_CONTENT_TYPE}
        return FaultAction(
            "truncate", status=200, headers=_merge(ct, overrides), body=spec.body, keep_fraction=spec.keep_fraction
        )
    if spec.kind == "malformed":
        body = spec.body if spec.body is not None else MALFORMED_JSON_BODY
        ct = {"Content-Type": JSON_CONTENT_TYPE}
        return FaultAction("malformed", status=200, headers=_merge(ct, overrides), body=body)
    if spec.kind == "sandbox_error":
        if spec.body is not None:
            body = spec.body
        elif spec.message is not None:
            body = sandbox_error_body(spec.message, route)
        else:
            body = sandbox_error_body(route=route)
        return FaultAction(
            "sandbox_error", status=200, headers=_merge({"Content-Type": JSON_CONTENT_TYPE}, overrides), body=body
        )
    return FaultAction("null_stdout")


@dataclass(frozen=True, eq=False)
class Admission:
    """Result of admission control for one request.

    ``granted`` False means a limit refused it (``limit``, ``retry_after``). ``headers`` are
    rate-limit headers to add to the response (Daytona style adds them to every response).
    A granted or refused admission from ``admit``/``decide`` must be released exactly once.
    ``loaded`` marks a granted request counted in the route's load for ``overload`` rules.
    """

    ticket: int
    route: str
    key: str
    granted: bool
    limit: str | None = None
    retry_after: float | None = None
    headers: Headers = ()
    held: tuple[str, ...] = ()
    epoch: int = 0
    loaded: bool = False


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one arrival: delay, optional fault, and identity.

    ``rule_id`` is the rule that chose the fault (None if none); ``rules_fired`` lists every rule
    that fired, latency-only ones included. ``refused`` is True when a limit answered 429.
    ``limit_headers`` are rate-limit headers to attach to whatever response is sent. ``time`` is plan time (seconds
    since the engine started) and ``load`` the in-flight count each ``overload`` rule saw, this request included:
    both are logged, so decisions that depended on them replay exactly.
    """

    route: str
    key: str
    attempt: int
    ordinal: int
    latency: float = 0.0
    action: FaultAction | None = None
    rule_id: str | None = None
    rules_fired: tuple[str, ...] = ()
    refused: bool = False
    limit: str | None = None
    limit_headers: Headers = ()
    time: float = 0.0
    load: tuple[tuple[str, int], ...] = ()
    admission: Admission | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """Action kind, or ``"pass"`` when nothing is injected beyond latency."""
        return self.action.kind if self.action is not None else "pass"

    @property
    def status(self) -> int | None:
        """HTTP status the fault answers with, if any."""
        return self.action.status if self.action is not None else None

    def to_record(self) -> dict[str, Any]:
        """JSON-serialisable log record (flat summary fields plus the full action for replay)."""
        return {
            "ordinal": self.ordinal,
            "route": self.route,
            "key": self.key,
            "attempt": self.attempt,
            "rule_id": self.rule_id,
            "rules": list(self.rules_fired),
            "kind": self.kind,
            "status": self.status,
            "latency": self.latency,
            "refused": self.refused,
            "limit": self.limit,
            "limit_headers": [list(h) for h in self.limit_headers],
            "time": self.time,
            "load": dict(self.load),
            "action": None if self.action is None else self.action.to_dict(),
        }

    @classmethod
    def from_record(cls, record: object) -> Decision:
        """Inverse of ``to_record`` (the admission is not part of a record). A missing key, a wrong type or a value
        beyond a plan's bounds raises ``FaultPlanError`` naming the field (``latency``, ``action.kind``)."""
        m = _record_mapping(record, "record")
        for required in ("route", "key", "attempt", "ordinal"):
            if required not in m:
                raise FaultPlanError(required, "required key is missing")
        route, key = m["route"], m["key"]
        for name, text in (("route", route), ("key", key)):
            if not isinstance(text, str):
                raise FaultPlanError(name, f"expected a string, got {value_repr(text)}")
        load = m.get("load") or {}
        if not isinstance(load, Mapping):
            raise FaultPlanError("load", f"expected a mapping of rule ids to counts, got {value_repr(load)}")
        rules = m.get("rules") or []
        if not isinstance(rules, list | tuple) or not all(isinstance(r, str) for r in rules):
            raise FaultPlanError("rules", f"expected a list of rule ids, got {value_repr(rules)}")
        action = m.get("action")
        return cls(
            route=route,
            key=key,
            attempt=_int(m["attempt"], "attempt", minimum=1),
            ordinal=_int(m["ordinal"], "ordinal", minimum=1),
            latency=_delay(m.get("latency", 0.0), "latency"),
            action=None if action is None else FaultAction.from_dict(action),
            rule_id=_optional_str(m.get("rule_id"), "rule_id"),
            rules_fired=tuple(rules),
            refused=_bool(m.get("refused", False), "refused"),
            limit=_optional_str(m.get("limit"), "limit"),
            limit_headers=_record_headers(m.get("limit_headers"), "limit_headers"),
            time=_number(m.get("time", 0.0), "time"),
            load=tuple((str(k), _int(v, f"load.{k}", minimum=0)) for k, v in load.items()),
        )
