"""GSM8K arithmetic: notation to Python, safe evaluation, number formatting, prose equations."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.gsm8k.numbers import (
    FORMAT_HELPER,
    evaluate,
    format_number,
    prose_equations,
    python_candidates,
    to_python,
)


@pytest.mark.parametrize(
    ("gsm8k", "python"),
    [
        ("16-3-4", "16-3-4"),
        ("80000*1.5", "80000*1.5"),
        ("6*.1", "6*.1"),
        ("$12 x 3", "12*3"),
        ("3 \u00d7 $14", "3*14"),
        ("1,200*85/100", "1200*85/100"),
        ("2(40+9)", "2*(40+9)"),
        ("(2+3)(4)", "(2+3)*(4)"),
        ("54 \u2212 37", "54 - 37"),
        ("2^3", "2**3"),
        ("-4+11", "-4+11"),
    ],
)
def test_to_python(gsm8k: str, python: str) -> None:
    assert to_python(gsm8k) == python


def test_percent_readings() -> None:
    assert to_python("4/20 x 100%") == "4/20*100"
    assert to_python("20% * 40%", percent="divide") == "20/100 * 40/100"
    assert list(python_candidates("50%*8")) == ["50*8", "50/100*8"]
    assert list(python_candidates("3+4")) == ["3+4"]
    with pytest.raises(ValueError, match="percent"):
        to_python("1%", percent="keep")


@pytest.mark.parametrize("text", ["x+2", "X - X*25%", "30*", "", "abc", "1 1/2", "__import__('os')", "9**9**9**9"])
def test_not_arithmetic(text: str) -> None:
    assert to_python(text) is None


def test_evaluate_is_python_arithmetic_only() -> None:
    assert evaluate("16-3-4") == 9
    assert evaluate("2/8") == 0.25
    assert evaluate("7//2 + 7%2 - -1") == 5
    for bad in ("print(1)", "a+1", "1/0", "10**100000", "[1, 2]", "True+1", "'3'*2", "1 +"):
        with pytest.raises(ValueError):
            evaluate(bad)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (18, "18"),
        (18.0, "18"),
        (0.1 + 0.2, "0.3"),
        (34.25, "34.25"),
        (-2, "-2"),
        (-0.0, "0"),
        (1e16, "10000000000000000"),
    ],
)
def test_format_number(value: float, text: str) -> None:
    assert format_number(value) == text


def _program_fmt() -> object:
    namespace: dict[str, object] = {}
    exec(FORMAT_HELPER, namespace)
    return namespace["fmt"]


@given(st.one_of(st.integers(-(10**18), 10**18), st.floats(-1e12, 1e12, allow_nan=False)))
def test_programs_print_what_format_number_says(value: float) -> None:
    fmt = _program_fmt()
    assert callable(fmt)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(fmt(value))
    assert out.getvalue() == format_number(value) + "\n"


def test_prose_equations() -> None:
    solution = (
        "He has 20 + 10 = <<20+10=30>>30 dollars.\n"
        "The boots cost 99 + 5 = $104.\n"
        "Total: $12,000+$5,000= $17,000\n"
        "Then 4/20 x 100% = 20%.\n"
        "It rose to -6 + 3 = -3 degrees.\n"
        "The total is $864\u00a0+ $432 = $1,296.\n"
        "x = 25 years\n"
        "#### 104 = 1 + 103"
    )
    expected = ["20 + 10", "99 + 5", "12,000+$5,000", "4/20 x 100%", "-6 + 3", "864\u00a0+ $432"]
    assert prose_equations(solution) == expected


def test_prose_equations_with_units() -> None:
    solution = (
        "Divide: 7 puppies / 20 puppies * 100% = 35%\n"
        "It takes him 5 seconds to go on, then it will take him 5 seconds x 7 bottles = 35 seconds.\n"
        "She must walk 310 miles/day - 250 miles/day = 60 miles/day\n"
        "#### 35"
    )
    assert prose_equations(solution) == []
    with_units = prose_equations(solution, with_units=True)
    assert [to_python(e) for e in with_units] == ["7 / 20 * 100", "5*7", "310 - 250"]
