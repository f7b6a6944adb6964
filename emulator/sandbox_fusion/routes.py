"""Sandbox Fusion's HTTP surface: ``POST /run_code``, ``POST /run_jupyter``, ``GET /v1/ping``.

Handlers take the raw body (the fault gate reads it first to key its decisions), validate it exactly as the real
server does, and answer compact JSON with raw UTF-8, in the real key order. Once a request validates the answer is
HTTP 200 whatever happened to the program.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from emulator.sandbox_fusion.jupyter import JupyterRunner
from emulator.sandbox_fusion.models import RunCodeRequest, RunJupyterRequest
from emulator.sandbox_fusion.runners import CodeRunner
from emulator.sandbox_fusion.validation import RequestInvalid, parse_body

ROUTE_RUN_CODE = "sandbox_fusion.run_code"
ROUTE_RUN_JUPYTER = "sandbox_fusion.run_jupyter"
ROUTE_PING = "sandbox_fusion.ping"


def json_bytes(payload: Any) -> bytes:
    """The real server's wire format: no spaces, non-ASCII as raw UTF-8."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_bytes(payload), status_code=status, media_type="application/json", headers=headers)


def invalid_response(exc: RequestInvalid) -> Response:
    return json_response({"detail": exc.detail}, status=exc.status)


class SandboxFusionService:
    """Binds the runners to HTTP answers; one per emulator."""

    def __init__(self, code_runner: CodeRunner, jupyter_runner: JupyterRunner) -> None:
        self.code_runner = code_runner
        self.jupyter_runner = jupyter_runner

    async def run_code(self, body: bytes, content_type: str | None) -> tuple[Response, dict[str, Any]]:
        """Answer a /run_code body; the dict is the response payload (for the journal and null-stdout faults)."""
        try:
            request = parse_body(RunCodeRequest, body, content_type)
        except RequestInvalid as exc:
            return invalid_response(exc), {}
        payload = await self.code_runner.run_payload(request)
        return json_response(payload), payload

    async def run_jupyter(self, body: bytes, content_type: str | None) -> tuple[Response, dict[str, Any]]:
        try:
            request = parse_body(RunJupyterRequest, body, content_type)
        except RequestInvalid as exc:
            return invalid_response(exc), {}
        payload = (await self.jupyter_runner.run(request)).model_dump(mode="json")
        return json_response(payload), payload

    @staticmethod
    def ping() -> Response:
        return json_response("pong")
