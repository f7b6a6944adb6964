"""Default bodies and headers for injected faults, in one place so their provenance is auditable.

Every constant says where its shape comes from. "Recorded" means it was observed from the
real service (see ``shared/research/sandbox_fusion.md`` and ``daytona.md``); "plausible,
unverified" means no public sample exists and the shape is a reasonable gateway reply.
Bodies are ``str``; the HTTP layer encodes them as UTF-8.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any

__all__ = [
    "DAYTONA_429_BODY",
    "FAULT_LABEL_HEADER",
    "HTML_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "MALFORMED_JSON_BODY",
    "SANDBOX_ERROR_MESSAGE",
    "SANDBOX_FUSION_500_BODY",
    "daytona_rate_limit_headers",
    "default_status_response",
    "gateway_html",
    "now_iso",
    "reason_phrase",
    "sandbox_error_body",
    "with_request_fields",
]

JSON_CONTENT_TYPE = "application/json"
HTML_CONTENT_TYPE = "text/html"

# Header the HTTP layer may add to label injected faults (anchors.md §9.4: every injected fault
# should be identifiable). Not added by the engine itself, to keep the default wire shape faithful.
FAULT_LABEL_HEADER = "X-Emulator-Fault"

# Status codes for which the default reply comes from a gateway in front of the server
# (veFaaS / API gateway / nginx), not from Sandbox Fusion itself: the server never emits 429,
# 502, 503 or 504 (sandbox_fusion.md §2.1).
GATEWAY_STATUSES = frozenset({429, 502, 503, 504})


def _compact(payload: Any) -> str:
    """JSON as the real services write it: no spaces (Starlette's JSONResponse, NestJS and Go alike), non-ASCII as
    UTF-8."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def reason_phrase(status: int) -> str:
    """Return the standard reason phrase, or ``"Unknown"`` for non-standard codes."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def gateway_html(status: int) -> str:
    """An nginx-style error page for ``status``.

    Shape: nginx's built-in error page (``<title>504 Gateway Time-out</title>`` etc.), which
    is what most nginx-based API gateways return. For the veFaaS/APIG gateway in front of
    Sandbox Fusion the exact body is plausible, unverified (sandbox_fusion.md §2.2).
    """
    phrase = "Gateway Time-out" if status == 504 else reason_phrase(status)
    title = f"{status} {phrase}"
    return (
        "<html>\r\n"
        f"<head><title>{title}</title></head>\r\n"
        "<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n"
        "<hr><center>nginx</center>\r\n"
        "</body>\r\n"
        "</html>\r\n"
    )


# Recorded: Sandbox Fusion's global exception handler answers 500 with
# ``{"detail": str(exc), "traceback": [...]}`` (sandbox_fusion.md §1.5, last table row).
SANDBOX_FUSION_500_BODY = _compact(
    {
        "detail": "injected fault: internal server error",
        "traceback": ["Traceback (most recent call last):", "RuntimeError: injected fault", ""],
    }
)

# Recorded: the SandboxError message from verl issue #4074 (official image server-20250609 under
# parallel load; sandbox_fusion.md §1.5). The temp path and transport address are placeholders
# with the recorded format.
SANDBOX_ERROR_MESSAGE = (
    "exception on running command python /tmp/tmp8k2j4f0q/tmpw3n9x1ab.py: unable to perform operation on "
    "<WriteUnixTransport closed=True reading=False 0x7f3c2a1b4e50>; the handler is closed | None"
)


def sandbox_error_body(message: str = SANDBOX_ERROR_MESSAGE, route: str = "sandbox_fusion.run_code") -> str:
    """The HTTP-200 SandboxError body.

    ``run_code`` shape is recorded (verl #4074: ``run_result.status`` ``Error``, stdout null, stderr
    equal to the message). The ``run_jupyter`` variant is plausible, unverified: the same top-level
    status/message with the jupyter response fields (``driver``, ``cells``) emptied.
    """
    body: dict[str, Any]
    if route.endswith("run_jupyter"):
        body = {
            "status": "SandboxError",
            "message": message,
            "driver": None,
            "cells": [],
            "executor_pod_name": None,
            "files": {},
        }
    else:
        body = {
            "status": "SandboxError",
            "message": message,
            "compile_result": None,
            "run_result": {
                "status": "Error",
                "execution_time": None,
                "return_code": None,
                "stdout": None,
                "stderr": message,
            },
            "executor_pod_name": None,
            "files": {},
        }
    return _compact(body)


# Plausible, unverified: a 200 whose JSON was cut mid-object (what a client sees when a proxy
# or a crashing worker truncates the stream but the status line already went out).
MALFORMED_JSON_BODY = '{"status":"Success","message":"","compile_result":null,"run_result":{"status":"Fini'

# Recorded (source-derived): Daytona's NestJS throttler 429 body (daytona.md, "Rate limiting").
# The real envelope also carries ``path`` and ``timestamp``: the HTTP layer adds them (``with_request_fields``).
DAYTONA_429_BODY = _compact(
    {"statusCode": 429, "message": "ThrottlerException: Too Many Requests", "error": "Too Many Requests"}
)


def daytona_rate_limit_headers(
    name: str, limit: int, remaining: int, reset_s: int, retry_after_s: int | None
) -> dict[str, str]:
    """Daytona throttler headers (daytona.md): on every response ``X-RateLimit-{Limit,Remaining,Reset}-{name}``;
    on a 429 also ``Retry-After-{name}`` (no plain ``Retry-After`` for named throttlers)."""
    headers = {
        f"X-RateLimit-Limit-{name}": str(limit),
        f"X-RateLimit-Remaining-{name}": str(max(0, remaining)),
        f"X-RateLimit-Reset-{name}": str(max(0, reset_s)),
    }
    if retry_after_s is not None:
        headers[f"Retry-After-{name}"] = str(max(0, retry_after_s))
    return headers


def default_status_response(status: int, route: str) -> tuple[str, dict[str, str]]:
    """Default (body, headers) for an injected plain ``status`` fault.

    Gateway statuses (429/502/503/504) get an nginx-style HTML page (plausible, unverified);
    on ``daytona.*`` routes a 429 gets the Daytona throttler body. 500 gets Sandbox Fusion's
    recorded exception-handler body. Anything else gets FastAPI's ``{"detail": <reason>}``
    shape (recorded for 404/405, sandbox_fusion.md §1.5).
    """
    if route.startswith("daytona.") and status == 429:
        return DAYTONA_429_BODY, {"Content-Type": JSON_CONTENT_TYPE}
    if route.startswith("daytona.") and status >= 400:
        # Daytona's error envelope (daytona.md, "Real API error envelope"); the HTTP layer adds path and timestamp.
        body = _compact({"statusCode": status, "error": reason_phrase(status), "message": "injected fault"})
        return body, {"Content-Type": JSON_CONTENT_TYPE}
    if status in GATEWAY_STATUSES:
        return gateway_html(status), {"Content-Type": HTML_CONTENT_TYPE}
    if status == 500:
        return SANDBOX_FUSION_500_BODY, {"Content-Type": JSON_CONTENT_TYPE}
    return _compact({"detail": reason_phrase(status)}), {"Content-Type": JSON_CONTENT_TYPE}


def now_iso() -> str:
    """ISO 8601 UTC with milliseconds and ``Z``, as JavaScript's ``toISOString`` (Daytona's envelopes)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def with_request_fields(body: str, status: int, route: str, path: str, method: str) -> str:
    """A default Daytona fault body completed with what the real envelope says of the request; others unchanged.

    The API's envelope carries ``path`` and ``timestamp``; the daemon's (toolbox and interpreter routes) also
    ``method`` (daytona.md, "Real API error envelope"). The toolbox client's ``ErrorResponse`` requires ``path`` and
    ``timestamp``, so without them the SDK cannot parse an injected 4xx/5xx. These fields vary per request, so the
    engine's decision (replayable, logged) holds the envelope without them and the HTTP layer adds them here. A body
    the fault plan gives is the plan's and is sent as written.
    """
    if not route.startswith("daytona."):
        return body
    try:
        envelope = json.loads(body)
    except ValueError:
        return body
    defaults = (DAYTONA_429_BODY, default_status_response(status, route)[0])
    if not any(envelope == json.loads(default) for default in defaults):  # JSON, not text: a log's older spacing too
        return body
    envelope["path"] = path
    envelope["timestamp"] = now_iso()
    if not route.startswith("daytona.sandbox"):
        envelope["method"] = method
    return _compact(envelope)
