"""Turn raw request bytes into a model, or into the exact 422 ``detail`` the real server answers.

The real server is FastAPI 0.103 on pydantic 2.6. We validate by hand rather than through FastAPI's body
machinery so that the answers are 2.6's whatever FastAPI and pydantic versions the emulator is installed with:
error ``url`` fields name pydantic 2.6, a body that is not JSON-typed is validated as raw text (as FastAPI 0.103
did), malformed JSON gives ``json_invalid`` with the character position, and a string in a numeric field is read
by 2.6's rules (:mod:`numeric_strings`; later versions strip whitespace around it). Other answers come from the
installed pydantic: the same as 2.6's for these models where compared, but a later version that changed an
error's ``msg`` would show it. A 422 the real server cannot render
(a NaN or an infinity in an echoed ``input``, a non-JSON-typed body that is not UTF-8) raises here as it raises
there, for the server-error answer (500).
"""

from __future__ import annotations

import functools
import json
import math
import re
from email.message import Message
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from emulator.sandbox_fusion.numeric_strings import (
    FLOAT_PARSING,
    INT_PARSING,
    INT_PARSING_SIZE,
    parse_float,
    parse_int,
)

ModelT = TypeVar("ModelT", bound=BaseModel)

#: The pydantic minor version the real server runs; it appears in every error ``url``.
SERVER_PYDANTIC_VERSION = "2.6"
_URL_VERSION = re.compile(r"^https://errors\.pydantic\.dev/[^/]+/")


class RequestInvalid(Exception):
    """A request that fails validation; ``detail`` is what FastAPI puts under ``"detail"`` (a list of errors for a
    422, the message of a 400) and ``status`` the HTTP status."""

    def __init__(self, detail: list[dict[str, Any]] | str, status: int = 422) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


#: FastAPI 0.103's answer to a JSON body whose parsing fails other than by a JSONDecodeError (bytes that are not
#: UTF-8, nesting too deep for the decoder, an integer of more digits than Python converts): its handler turns any
#: such exception into this 400.
PARSE_ERROR = "There was an error parsing the body"


@functools.lru_cache(maxsize=64)
def _is_json_content_type(value: str | None) -> bool:
    # Cached: clients send the same few values, and the email parser costs as much as the JSON decode of a body.
    if not value:
        return True  # FastAPI 0.103 parses a body without Content-Type as JSON
    message = Message()
    message["content-type"] = value
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


#: What Python's json (3.11, the real server's) raises for a NaN or an infinity under ``allow_nan=False``; fixed here,
#: since later Pythons add the value to the message.
OUT_OF_RANGE_FLOAT = "Out of range float values are not JSON compliant"


def _jsonable(value: Any) -> Any:
    """Make a pydantic error field JSON-safe the way FastAPI 0.103's encoder does, failing where the real server fails.

    Its ``jsonable_encoder`` decodes bytes strictly (a body that is not UTF-8, sent with a non-JSON type, raises
    UnicodeDecodeError) and keeps NaN and the infinities, which its JSONResponse then refuses (``allow_nan=False``):
    either exception escapes the 422 handler, and the global handler answers 500 with its message."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(OUT_OF_RANGE_FLOAT)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


#: A string every pydantic version refuses with each of these errors: it stands in for a string 2.6 refuses.
_REFUSED_AS = {FLOAT_PARSING: "x", INT_PARSING: "x", INT_PARSING_SIZE: "1" * 4301}


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> dict[str, bool]:
    """The model's int and float fields: name -> whether it is an int."""
    return {name: f.annotation is int for name, f in model.model_fields.items() if f.annotation in (int, float)}


def _as_pydantic_26(model: type[BaseModel], payload: Any) -> tuple[Any, dict[str, str]]:
    """The payload with each string in a numeric field replaced by what pydantic 2.6 reads from it (a number, or a
    string any version refuses with 2.6's error), and the replaced strings by field name (for the errors' inputs)."""
    if not isinstance(payload, dict):
        return payload, {}
    replaced: dict[str, str] = {}
    read: dict[str, Any] = {}
    for name, is_int in _numeric_fields(model).items():
        text = payload.get(name)
        if isinstance(text, str):
            value = parse_int(text) if is_int else parse_float(text)
            read[name] = _REFUSED_AS[value] if isinstance(value, str) else value
            replaced[name] = text
    return ({**payload, **read} if read else payload), replaced


def _error_entry(error: Any, payload: Any, sent: Any, replaced: dict[str, str]) -> dict[str, Any]:
    """One error as FastAPI lists it; the inputs that were replaced for validation are given back as received."""
    value = error["input"]
    if value is sent:  # a missing field's error echoes the whole body
        value = payload
    elif len(error["loc"]) == 1 and error["loc"][0] in replaced:
        value = replaced[error["loc"][0]]
    entry: dict[str, Any] = {
        "type": error["type"],
        "loc": ["body", *error["loc"]],
        "msg": error["msg"],
        "input": _jsonable(value),
    }
    if "ctx" in error:
        entry["ctx"] = _jsonable(error["ctx"])
    if "url" in error:
        entry["url"] = _URL_VERSION.sub(f"https://errors.pydantic.dev/{SERVER_PYDANTIC_VERSION}/", error["url"])
    return entry


def _missing_body() -> list[dict[str, Any]]:
    return [
        {
            "type": "missing",
            "loc": ["body"],
            "msg": "Field required",
            "input": None,
            "url": f"https://errors.pydantic.dev/{SERVER_PYDANTIC_VERSION}/v/missing",
        }
    ]


def parse_body(model: type[ModelT], body: bytes, content_type: str | None) -> ModelT:
    """Validate ``body`` against ``model``; raise :class:`RequestInvalid` with the real server's detail."""
    payload: Any
    if _is_json_content_type(content_type):
        if not body:
            raise RequestInvalid(_missing_body())
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            raise RequestInvalid(
                [
                    {
                        "type": "json_invalid",
                        "loc": ["body", exc.pos],
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": exc.msg},
                    }
                ]
            ) from None
        except Exception:  # not UTF-8, nested too deep, an integer past Python's digit limit, ...: FastAPI's 400
            raise RequestInvalid(PARSE_ERROR, status=400) from None
        if payload is None:  # FastAPI reads a JSON null as no body at all
            raise RequestInvalid(_missing_body())
    else:
        if not body:
            raise RequestInvalid(_missing_body())
        payload = body
    sent, replaced = _as_pydantic_26(model, payload)
    try:
        return model.model_validate(sent, from_attributes=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=True)
        raise RequestInvalid([_error_entry(e, payload, sent, replaced) for e in errors]) from None
