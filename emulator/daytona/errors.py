"""Error envelopes: the API's NestJS filter shape and the daemon's (toolbox) shape (daytona.md §4)."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

from emulator.faults.bodies import now_iso


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(data, status_code=status, media_type="application/json", headers=headers)


def api_error(
    status: int, message: str, path: str, *, code: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """The API's envelope: ``{path, timestamp, statusCode, error, message}`` (+ ``code``/``source``)."""
    body: dict[str, Any] = {
        "path": path,
        "timestamp": now_iso(),
        "statusCode": status,
        "error": reason(status),
        "message": message,
    }
    if code is not None:
        body["code"] = code
        body["source"] = "DAYTONA_API"
    return json_response(body, status, headers)


def proxy_error(status: int, message: str, path: str, method: str, code: str) -> Response:
    """The toolbox proxy's envelope (common-go's error middleware): ``{statusCode, message, code, timestamp, path,
    method}``, no ``source``: the proxy answers before any daemon is reached."""
    body: dict[str, Any] = {
        "statusCode": status,
        "message": message,
        "code": code,
        "timestamp": now_iso(),
        "path": path,
        "method": method,
    }
    return json_response(body, status)


def daemon_error(status: int, message: str, path: str, method: str, code: str | None = None) -> Response:
    """The daemon's envelope: ``{statusCode, message, code, source, timestamp, path, method}``. ``source`` lets the
    SDK (0.226) raise its precise class for a code, ``DaytonaFileNotFoundError`` for ``FILE_NOT_FOUND`` say."""
    body: dict[str, Any] = {
        "statusCode": status,
        "message": message,
        "code": code or _daemon_code(status),
        "source": DAEMON_SOURCE,
        "timestamp": now_iso(),
        "path": path,
        "method": method,
    }
    return json_response(body, status)


#: The ``source`` of the daemon's errors, as the SDK's error mapping names it.
DAEMON_SOURCE = "DAYTONA_DAEMON"


def _daemon_code(status: int) -> str:
    return {
        400: "BAD_REQUEST",
        404: "NOT_FOUND",
        408: "REQUEST_TIMEOUT",
        409: "CONFLICT",
        500: "INTERNAL_SERVER_ERROR",
    }.get(status, reason(status).upper().replace(" ", "_"))


class ApiError(Exception):
    """Raised inside handlers; turned into :func:`api_error` (or :func:`daemon_error` on the toolbox)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class FileError(ApiError):
    """An error of a file route, answered in the daemon's envelope as the daemon that pairs with the SDK 0.226 answers
    it (its handlers give typed errors to common-go's error middleware, ``c.Error``): ``code`` ``FILE_NOT_FOUND`` for
    a 404, ``FILE_ACCESS_DENIED`` for a 403, else the status's own (``BAD_REQUEST``, ``CONFLICT``) unless one is given.
    The daemon at 8b6f9b14a answered these with ``ctx.AbortWithError``, the status and an empty body."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(status, message, code or FILE_CODES.get(status))


#: The codes of the daemon's typed file errors (``common.NewFileNotFoundError``, ``NewFileAccessDeniedError``).
FILE_CODES = {404: "FILE_NOT_FOUND", 403: "FILE_ACCESS_DENIED"}


class StartFailed(ApiError):
    """A program could not be started at all (descriptors or processes run out): a 500, except where the daemon
    answers its ``cmd.Start`` error otherwise (``/process/execute``: 200 with exit code -1)."""
