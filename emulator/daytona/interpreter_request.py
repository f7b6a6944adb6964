"""The interpreter WebSocket's first frame, read as the daemon's controller reads it.

The daemon decodes the frame into its Go ``ExecuteRequest`` (``code`` string, ``contextId`` string, ``timeout``
int64 seconds, ``envs`` map of strings; each may be null) and closes the socket on what it cannot use: 1002
``invalid JSON payload`` for a frame that is no such object (a value of another type included, such as a timeout of
``1.5``, which a lenient emulator would let a tool's bug through), then 1008 for ``code is required`` (empty or
missing), a negative timeout, and a ``contextId`` it does not know. Go matches field names without regard to case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .go_json import as_go_decodes

#: Close codes of the daemon's refusals (RFC 6455 protocol error, policy violation).
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_POLICY_VIOLATION = 1008

_INT64 = range(-(2**63), 2**63)
_FIELDS = {"code": "code", "contextid": "contextId", "timeout": "timeout", "envs": "envs"}


@dataclass(frozen=True)
class ExecuteRequest:
    code: str
    #: None: the default context (the daemon's nil pointer); any string, even empty, names a context.
    context_id: str | None
    #: Seconds; None: the daemon's default; 0: no timeout.
    timeout: int | None
    envs: dict[str, str]


@dataclass(frozen=True)
class Refusal:
    """Why the daemon closes the socket instead of running the code."""

    code: int
    reason: str


class _Invalid(Exception):
    pass


def _reject_constant(name: str) -> Any:
    raise _Invalid(name)  # NaN and Infinity are no JSON to Go


def _string(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Invalid("not a string")


def _decode(raw: str | bytes) -> dict[str, Any]:
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")  # Go keeps going past bad bytes too
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        raise _Invalid("syntax") from None
    if value is None:
        return {}  # null into a struct: nothing set
    if not isinstance(value, dict):
        raise _Invalid("not an object")
    fields: dict[str, Any] = {}
    for key, item in value.items():
        name = key if key in _FIELDS.values() else _FIELDS.get(key.lower())
        if name is not None:
            fields[name] = item  # a later duplicate wins, as Go assigns each in turn
    return fields


def parse_execute_request(raw: str | bytes, known_context: Any) -> ExecuteRequest | Refusal:
    """The request in ``raw`` (a text or binary frame), or the daemon's refusal of it.

    ``known_context(context_id) -> bool`` says whether a named context exists.
    """
    try:
        fields = _decode(raw)
        code = _string(fields.get("code")) or ""
        context_id = _string(fields.get("contextId"))
        timeout = fields.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout not in _INT64):
            raise _Invalid("timeout")
        envs_raw = fields.get("envs")
        if envs_raw is not None and not isinstance(envs_raw, dict):
            raise _Invalid("envs")
        envs = {as_go_decodes(key): as_go_decodes(_string(item) or "") for key, item in (envs_raw or {}).items()}
    except _Invalid:
        return Refusal(CLOSE_PROTOCOL_ERROR, "invalid JSON payload")
    if not code:
        return Refusal(CLOSE_POLICY_VIOLATION, "code is required")
    if timeout is not None and timeout < 0:
        return Refusal(CLOSE_POLICY_VIOLATION, "timeout must be greater than or equal to 0")
    if context_id is not None and context_id != "default" and not known_context(context_id):
        return Refusal(CLOSE_POLICY_VIOLATION, close_reason(f"context not found: {as_go_decodes(context_id)}"))
    return ExecuteRequest(as_go_decodes(code), context_id, timeout, envs)


def close_reason(text: str) -> str:
    """At most the 123 bytes a close frame holds (the daemon's longer one fails to send; the client sees 1006)."""
    data = text.encode("utf-8")
    return text if len(data) <= 123 else data[:123].decode("utf-8", "ignore")


__all__ = [
    "CLOSE_POLICY_VIOLATION",
    "CLOSE_PROTOCOL_ERROR",
    "ExecuteRequest",
    "Refusal",
    "close_reason",
    "parse_execute_request",
]
