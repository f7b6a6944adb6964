"""Strings in numeric fields get the real server's pydantic 2.6 answers, whatever pydantic is installed.

The expected answers were taken from pydantic 2.6.4 (pydantic-core 2.16.3), the real server's: later versions strip
whitespace around a number and refuse ``"5."`` for an integer.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from emulator.sandbox_fusion.models import RunCodeRequest, RunJupyterRequest
from emulator.sandbox_fusion.numeric_strings import parse_float, parse_int
from emulator.sandbox_fusion.validation import RequestInvalid, parse_body

FLOAT_MSG = "Input should be a valid number, unable to parse string as a number"
INT_MSG = "Input should be a valid integer, unable to parse string as an integer"
URL = "https://errors.pydantic.dev/2.6/v/"
SPACED = [" 1 ", "1 ", " 1", "1e5 ", "\t1", "1\n", "\r1", "nan ", " inf", "\xa01", "5.0 "]


def _detail(body: dict[str, Any], model: type[RunCodeRequest] | type[RunJupyterRequest] = RunCodeRequest) -> Any:
    with pytest.raises(RequestInvalid) as caught:
        parse_body(model, json.dumps(body).encode(), "application/json")
    assert caught.value.status == 422
    return caught.value.detail


@pytest.mark.parametrize("text", SPACED)
@pytest.mark.parametrize("field", ["run_timeout", "compile_timeout"])
def test_a_float_with_whitespace_around_it_is_refused(text: str, field: str) -> None:
    detail = _detail({"code": "x", "language": "python", field: text})
    assert detail == [
        {"type": "float_parsing", "loc": ["body", field], "msg": FLOAT_MSG, "input": text, "url": URL + "float_parsing"}
    ]


@pytest.mark.parametrize("text", [" 1 ", "1 ", "\t1", "1\n", "5.0 ", " 5."])
def test_an_int_with_whitespace_around_it_is_refused(text: str) -> None:
    detail = _detail({"code": "x", "language": "python", "memory_limit_MB": text})
    assert detail == [
        {
            "type": "int_parsing",
            "loc": ["body", "memory_limit_MB"],
            "msg": INT_MSG,
            "input": text,
            "url": URL + "int_parsing",
        }
    ]


def test_the_jupyter_requests_numeric_fields_too() -> None:
    detail = _detail(
        {"cells": [], "total_timeout": "9 ", "cell_timeout": "1", "memory_limit_MB": "\t2"}, RunJupyterRequest
    )
    assert [(e["type"], e["loc"][1], e["input"]) for e in detail] == [
        ("float_parsing", "total_timeout", "9 "),
        ("int_parsing", "memory_limit_MB", "\t2"),
    ]


@pytest.mark.parametrize(("text", "value"), [("5.", 5), ("+5.", 5), ("5.000", 5), ("-0.0", 0), ("1_0", 10), ("007", 7)])
def test_an_int_read_as_2_6_reads_it(text: str, value: int) -> None:
    body = {"code": "x", "language": "python", "memory_limit_MB": text}
    request = parse_body(RunCodeRequest, json.dumps(body).encode(), None)
    assert request.memory_limit_MB == value and isinstance(request.memory_limit_MB, int)


@pytest.mark.parametrize(("text", "value"), [("5.", 5.0), ("1_0.5", 10.5), ("1_.5", 1.5), ("-Infinity", -math.inf)])
def test_a_float_read_as_2_6_reads_it(text: str, value: float) -> None:
    body = {"code": "x", "language": "python", "run_timeout": text}
    assert parse_body(RunCodeRequest, json.dumps(body).encode(), None).run_timeout == value


def test_a_missing_fields_error_echoes_the_body_as_sent() -> None:
    """The numbers read from strings are not what the real server echoes: the body's own strings are."""
    detail = _detail({"language": "python", "memory_limit_MB": "5.", "run_timeout": "1 "})
    assert [(e["type"], e["loc"][1], e["input"]) for e in detail] == [
        ("float_parsing", "run_timeout", "1 "),
        ("missing", "code", {"language": "python", "memory_limit_MB": "5.", "run_timeout": "1 "}),
    ]


def test_the_size_bound_of_an_integer_string() -> None:
    assert parse_int("1" * 4300) == int("1" * 4300)
    assert parse_int("1" * 4301) == "int_parsing_size"
    assert parse_int("\u0661" * 2151) == "int_parsing_size"  # bytes, not characters
    assert parse_int("1" * 4299 + " ") == "int_parsing"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1" * 19 + "__", int("1" * 19)),  # a big integer's underscores may trail or double
        ("1" * 16 + "__", "int_parsing"),  # an i64's (under 19 bytes) may not
        ("-+1", "int_parsing"),
        ("+-1", "int_parsing"),
        ("9223372036854775807", 9223372036854775807),
        ("-9223372036854775809", -9223372036854775809),
        ("1_0.", "int_parsing"),  # the fraction stripped, the underscores are not retried
        ("5.5", "int_parsing"),
        ("\u0661", "int_parsing"),
    ],
)
def test_integer_strings_at_the_edges(text: str, value: int | str) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("iNfInItY", math.inf), ("+nan", math.nan), ("5.e1", 50.0), (".5", 0.5), ("1e400", math.inf), ("1__0", None)],
)
def test_float_strings_at_the_edges(text: str, value: float | None) -> None:
    got = parse_float(text)
    if value is None:
        assert got == "float_parsing"
    elif math.isnan(value):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert got == value
