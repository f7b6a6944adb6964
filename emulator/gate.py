"""The fault gate: every emulated route passes through it, so faults, limits and the journal apply uniformly.

For each request it derives the logical key (the ``X-Emulator-Key`` header, else a hash of the body), asks the
fault engine for a decision keyed by (route, key, attempt), journals the request, waits the injected latency on the
engine's clock, and then either answers with the injected fault or lets the real handler answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from emulator import transport
from emulator.faults import FaultEngine
from emulator.faults.bodies import MALFORMED_JSON_BODY, default_status_response, sandbox_error_body
from emulator.journal import Journal, JournalEntry

#: Header a client (or a test) may send to name the logical request, instead of the body hash.
KEY_HEADER = "x-emulator-key"

Handler = Callable[[bytes], Awaitable[tuple[Response, dict[str, Any]]]]


def request_key(headers: Any, body: bytes) -> str:
    """Logical identity of a request: explicit header, else a short hash of the body."""
    explicit = headers.get(KEY_HEADER)
    if explicit:
        return str(explicit)
    return hashlib.blake2b(body, digest_size=8).hexdigest()


class _ResetResponse(Response):
    """Drops the connection instead of answering."""

    def __init__(self) -> None:
        super().__init__(b"")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport.reset(dict(scope))


class _TruncatedResponse(Response):
    """Announces a Content-Length longer than the bytes it sends, then closes."""

    def __init__(self, status: int, body: bytes, keep_fraction: float, media_type: str) -> None:
        super().__init__(b"", status_code=status)
        self._full = body
        self._keep = max(0, min(len(body) - 1, int(len(body) * keep_fraction))) if body else 0
        self._media = media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        head = (
            f"HTTP/1.1 {self.status_code} OK\r\ncontent-type: {self._media}\r\n"
            f"content-length: {len(self._full)}\r\nserver: uvicorn\r\n\r\n"
        ).encode("latin-1")
        transport.write_then_close(dict(scope), head + self._full[: self._keep])


class FaultGate:
    """Applies an engine's decisions to HTTP requests and records them in a journal."""

    def __init__(self, engine: FaultEngine, journal: Journal) -> None:
        self.engine = engine
        self.journal = journal

    async def handle(self, route: str, request: Request, handler: Handler) -> Response:
        body = await request.body()
        key = request_key(request.headers, body)
        decision = self.engine.decide(route, key)
        entry = self.journal.begin(route, request.method, request.url.path, key, decision.attempt)
        entry.injected_latency = decision.latency
        if decision.fault is not None:
            entry.fault = decision.fault.kind
        if decision.rule_id is not None:
            entry.detail["rule"] = decision.rule_id
        admission = self.engine.admit(route, key)
        try:
            if not admission.admitted:
                entry.fault = "limit"
                entry.detail["limit"] = admission.limit_name
                response = Response(
                    admission.body.encode(), status_code=admission.status, headers=dict(admission.headers)
                )
                return self._done(entry, response, "limited")
            if decision.latency > 0:
                await self.engine.clock.sleep(decision.latency)
            return await self._answer(route, entry, decision, body, request, handler)
        except BaseException:
            self.journal.end(entry, None, "cancelled")
            raise
        finally:
            self.engine.release(admission)

    def _done(self, entry: JournalEntry, response: Response, outcome: str) -> Response:
        status = None if isinstance(response, _ResetResponse | _TruncatedResponse) else response.status_code
        self.journal.end(entry, status, outcome)
        return response

    async def _answer(
        self, route: str, entry: JournalEntry, decision: Any, body: bytes, request: Request, handler: Handler
    ) -> Response:
        fault = decision.fault
        if fault is None or fault.kind == "null_stdout":
            response, payload = await handler(body)
            if fault is not None and response.status_code == 200 and isinstance(payload.get("run_result"), dict):
                payload["run_result"]["stdout"] = None
                from emulator.sandbox_fusion.routes import json_response

                response = json_response(payload)
            outcome = "ok" if response.status_code < 400 else "invalid"
            return self._done(entry, response, "fault" if fault is not None else outcome)
        if fault.kind == "hang":
            await self.engine.clock.sleep(fault.hang_seconds)
            if fault.then_reset or fault.status is None:
                return self._done(entry, _ResetResponse(), "reset")
            return self._done(entry, self._status_response(route, fault.status, fault), "fault")
        if fault.kind == "status":
            assert fault.status is not None
            return self._done(entry, self._status_response(route, fault.status, fault), "fault")
        if fault.kind == "reset":
            return self._done(entry, _ResetResponse(), "reset")
        if fault.kind == "malformed":
            text = fault.body if fault.body is not None else MALFORMED_JSON_BODY
            return self._done(entry, Response(text.encode(), media_type="application/json"), "fault")
        if fault.kind == "sandbox_error":
            text = fault.body if fault.body is not None else sandbox_error_body(**_message(fault), route=route)
            return self._done(entry, Response(text.encode(), media_type="application/json"), "fault")
        if fault.kind == "truncate":
            response, _ = await handler(body)
            return self._done(
                entry,
                _TruncatedResponse(
                    response.status_code, bytes(response.body), fault.keep_fraction, "application/json"
                ),
                "fault",
            )
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    @staticmethod
    def _status_response(route: str, status: int, fault: Any) -> Response:
        text, headers = default_status_response(status, route)
        if fault.retry_after is not None:
            headers["Retry-After"] = _seconds_header(fault.retry_after)
        if fault.body is not None:
            text = fault.body
        headers.update(dict(fault.headers))
        media = headers.pop("Content-Type", "application/json")
        return Response(text.encode(), status_code=status, headers=headers, media_type=media)


def _message(fault: Any) -> dict[str, str]:
    return {"message": fault.message} if fault.message is not None else {}


def _seconds_header(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
