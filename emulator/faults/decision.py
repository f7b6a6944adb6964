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
from .plan import FAULT_KINDS, FaultKind, FaultSpec

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
    def from_dict(cls, data: Mapping[str, Any]) -> FaultAction:
        """Inverse of ``to_dict``; raises ``FaultPlanError`` on a damaged record."""
        kind = data.get("kind")
        if kind not in _ACTION_KINDS:
            raise FaultPlanError("action.kind", f"unknown action kind {kind!r}")
        try:
            return cls(
                kind=cast(ActionKind, kind),
                status=None if data.get("status") is None else int(data["status"]),
                headers=tuple((str(k), str(v)) for k, v in data.get("headers") or ()),
                body=data.get("body"),
                hang_seconds=float(data.get("hang_seconds", 0.0)),
                then_reset=bool(data.get("then_reset", False)),
                keep_fraction=float(data.get("keep_fraction", 0.5)),
                retry_after=None if data.get("retry_after") is None else float(data["retry_after"]),
                limit=data.get("limit"),
            )
        except (TypeError, ValueError) as exc:
            raise FaultPlanError("action", f"malformed action record: {exc}") from None


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
    def from_record(cls, record: Mapping[str, Any]) -> Decision:
        """Inverse of ``to_record`` (the admission is not part of a record)."""
        try:
            action_data = record.get("action")
            return cls(
                route=str(record["route"]),
                key=str(record["key"]),
                attempt=int(record["attempt"]),
                ordinal=int(record["ordinal"]),
                latency=float(record.get("latency", 0.0)),
                action=None if action_data is None else FaultAction.from_dict(action_data),
                rule_id=record.get("rule_id"),
                rules_fired=tuple(record.get("rules") or ()),
                refused=bool(record.get("refused", False)),
                limit=record.get("limit"),
                limit_headers=tuple((str(k), str(v)) for k, v in record.get("limit_headers") or ()),
                time=float(record.get("time", 0.0)),
                load=tuple((str(k), int(v)) for k, v in (record.get("load") or {}).items()),
            )
        except KeyError as exc:
            raise FaultPlanError("record", f"decision record lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise FaultPlanError("record", f"malformed decision record: {exc}") from None
