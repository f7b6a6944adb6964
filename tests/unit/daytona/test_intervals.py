"""JavaScript's ``Number(string)``, which the API's ``ValidationPipe`` applies to a lifecycle route's interval."""

from __future__ import annotations

import math

import pytest

from emulator.daytona.intervals import js_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("15", 15.0),
        ("", 0.0),
        ("\u00a0 7\n\ufeff", 7.0),  # JavaScript's white space, NBSP and BOM included
        (".5", 0.5),
        ("1.", 1.0),
        ("-2e3", -2000.0),
        ("+Infinity", math.inf),
        ("-Infinity", -math.inf),
        ("0x1F", 31.0),
        ("0o17", 15.0),
        ("0b101", 5.0),
        ("0x" + "f" * 300, math.inf),  # past the largest double
        ("1e400", math.inf),
    ],
)
def test_numbers_javascript_reads(text: str, value: float) -> None:
    assert js_number(text) == value


@pytest.mark.parametrize("text", ["abc", "1_000", "-0x10", "0x", "5e", "inf", "NaN", "\x1c5", "\u0663", "1 2"])
def test_what_javascript_reads_as_nan(text: str) -> None:
    assert math.isnan(js_number(text))
