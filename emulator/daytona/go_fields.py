"""Request fields as the daemon's Go handlers bind them (``c.ShouldBindJSON`` into typed structs).

A value of the wrong type fails the whole body with Go's own message (``json: cannot unmarshal number -1 into Go
struct field ExecuteRequest.timeout of type uint32``), which the handlers answer with 400; so does an environment
name the daemon's ``ValidateEnvKeys`` refuses. Emulating the types, not only the names, is what lets a tool's bug
(a timeout of ``1.5``, an env value that is a number) show here rather than on the real service.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ApiError

_UINT32 = range(0, 2**32)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _json_kind(value: Any, go_type: str) -> str:
    """How Go names the JSON value in its error: a number with its literal only where it parsed one (an integer)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {value!r}" if go_type.startswith(("int", "uint")) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


#: The prefix of common-go's ``NewInvalidBodyRequestError``, whose error the middleware answers with this code.
INVALID_BODY = "invalid body request: "
INVALID_BODY_CODE = "INVALID_REQUEST_BODY"


def type_error(prefix: str, value: Any, struct: str, name: str, go_type: str) -> ApiError:
    """The 400 of a body whose ``name`` holds ``value``, which Go cannot put in a ``go_type``."""
    what = _json_kind(value, go_type)
    return ApiError(
        400,
        f"{prefix}json: cannot unmarshal {what} into Go struct field {struct}.{name} of type {go_type}",
        INVALID_BODY_CODE if prefix == INVALID_BODY else None,
    )


def string_field(body: dict[str, Any], name: str, struct: str, prefix: str = "invalid request body: ") -> str | None:
    """A ``string`` field: None when absent or null."""
    value = body.get(name)
    if value is None or isinstance(value, str):
        return value
    raise type_error(prefix, value, struct, name, "string")


def uint32_field(body: dict[str, Any], name: str, struct: str, prefix: str = "invalid request body: ") -> int | None:
    """A ``*uint32`` field (a timeout): None when absent or null; a fraction, a negative or a larger number fails."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in _UINT32:
        raise type_error(prefix, value, struct, name, "uint32")
    return value


def envs_field(
    body: dict[str, Any], struct: str, prefix: str = "invalid request body: ", *, refused: str = ""
) -> dict[str, str]:
    """A ``map[string]string`` of environment variables, each name one the daemon's ``ValidateEnvKeys`` takes; a name
    it refuses is a 400 whose message starts with ``refused`` (the prefix of the handler's typed error)."""
    value = body.get("envs")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise type_error(prefix, value, struct, "envs", "map[string]string")
    envs: dict[str, str] = {}
    for key, item in value.items():
        if item is not None and not isinstance(item, str):
            raise type_error(prefix, item, struct, "envs", "string")
        envs[key] = item or ""
    for key in envs:
        if not _ENV_NAME.match(key):
            raise ApiError(400, f"{refused}invalid environment variable name: '{key}'")
    return envs


__all__ = ["INVALID_BODY", "INVALID_BODY_CODE", "envs_field", "string_field", "type_error", "uint32_field"]
