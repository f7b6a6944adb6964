"""GSM8K arithmetic: turn the notation of its solutions into Python, evaluate it safely, print numbers its way.

GSM8K writes calculations as ``<<16-3-4=9>>`` annotations and as prose equations (``99 + 5 = $104``), with ``x``
or the multiplication sign for times, ``$`` signs, digit-grouping commas, ``%`` and implicit products
(``2(40+9)``). The scripted policy sends such expressions to a sandbox as Python; this module decides which texts
are plain arithmetic, what Python they become, and what value Python gives them, without ever calling ``eval``.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Iterator

Number = int | float

# Typography GSM8K uses in its prose (written as escapes: they look like x, - and ').
MINUS = "\u2212"
EN_DASH = "\u2013"
TIMES = "\u00d7"
DIVIDE = "\u00f7"
APOSTROPHE = "\u2019"
NO_BREAK_SPACE = "\u00a0"

#: The helper every generated program defines: GSM8K style numbers (no ``.0``, no float noise, no trailing zeros).
FORMAT_HELPER = '''def fmt(x):
    """GSM8K writes 18, not 18.0, and 0.35, not 0.35000000000000003."""
    if isinstance(x, float):
        text = f"{x:.6f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(x)
'''

#: Largest exponent and operand size the evaluator accepts (a sandbox would take too long, and so would we).
MAX_EXPONENT = 64
MAX_DIGITS = 60

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}

_GROUPING_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TIMES = re.compile(r"(?<=[\d).%])\s*[x\u00d7X]\s*(?=[\d(.$])")
_IMPLICIT_BEFORE_PAREN = re.compile(r"(?<=[\d)])\s*\(")
_IMPLICIT_AFTER_PAREN = re.compile(r"\)\s*(?=[\d.])")
_ALLOWED = re.compile(r"[\d.+\-*/()%\s]+")
_PROSE_RESULT = re.compile(r"=\s*\$?\s*-?" + r"(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
#: Characters a prose equation's left-hand side may contain (letters end it).
_PROSE_CHARS = set("0123456789.,$%+-*/x() \t" + MINUS + EN_DASH + TIMES + DIVIDE + NO_BREAK_SPACE)
_WORD_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'" + APOSTROPHE)
#: A word between numbers (``g`` in ``300g``, ``/day`` in ``miles/day``), except ``x`` (times).
_UNIT_WORD = re.compile(r"(?<=[A-Za-z])/(?=[A-Za-z])|(?<![A-Za-z])(?!x\b)[A-Za-z][A-Za-z'\u2019]*")


def format_number(value: Number) -> str:
    """A number as GSM8K writes it; the same text the generated programs' ``fmt`` prints."""
    if isinstance(value, float):
        text = f"{value:.6f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(value)


def to_python(expression: str, *, percent: str = "drop") -> str | None:
    """``expression`` in GSM8K notation as a Python arithmetic expression, or None when it is not plain arithmetic.

    ``percent``: ``"drop"`` reads ``20%`` as ``20`` (GSM8K's habit: ``4/20 x 100% = 20%``), ``"divide"`` as
    ``20/100``.
    """
    text = expression.strip().replace("$", "").replace(MINUS, "-").replace(EN_DASH, "-").replace(DIVIDE, "/")
    text = text.replace("^", "**")
    text = _GROUPING_COMMA.sub("", text)
    text = _TIMES.sub("*", text)
    text = _IMPLICIT_BEFORE_PAREN.sub("*(", text)
    text = _IMPLICIT_AFTER_PAREN.sub(")*", text)
    if percent == "divide":
        text = text.replace("%", "/100")
    elif percent == "drop":
        text = text.replace("%", "")
    else:
        raise ValueError(f"percent must be 'drop' or 'divide', got {percent!r}")
    text = " ".join(text.split())
    if not text or not _ALLOWED.fullmatch(text) or not re.search(r"\d", text):
        return None
    try:
        evaluate(text)
    except ValueError:
        return None
    return text


def evaluate(expression: str) -> Number:
    """The value Python gives a plain arithmetic expression; ValueError for anything else (names, calls, huge
    powers, division by zero)."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return _value(tree.body, expression)


def _value(node: ast.AST, source: str) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, source))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, source), _value(node.right, source)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > 10**MAX_DIGITS):
            raise ValueError(f"power too large in {source!r}")
        try:
            result = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError) as exc:
            raise ValueError(f"{exc} in {source!r}") from None
        if isinstance(result, complex):
            raise ValueError(f"complex result in {source!r}")
        if isinstance(result, float) and not math.isfinite(result):
            raise ValueError(f"non-finite result in {source!r}")
        if isinstance(result, int) and abs(result) >= 10**MAX_DIGITS:
            raise ValueError(f"number too large in {source!r}")
        return result
    raise ValueError(f"not plain arithmetic: {source!r}")


def prose_equations(solution: str, *, with_units: bool = False) -> list[str]:
    """Left-hand sides of the ``arithmetic = number`` equations written in a solution's prose, in order, as GSM8K
    wrote them (annotations removed first; the ``#### answer`` line ignored). Not yet converted to Python.

    ``with_units``: also read equations with unit words between the numbers (``7 puppies / 20 puppies * 100%``),
    the words dropped."""
    body = re.sub(r"<<[^<>]*>>", "", solution).split("####", 1)[0]
    found: list[str] = []
    for line in body.splitlines():
        for match in _PROSE_RESULT.finditer(line):
            left = _left_run(line, match.start(), with_units)
            if left:
                found.append(left)
    return found


def _left_run(line: str, end: int, with_units: bool) -> str:
    """The arithmetic text just left of position ``end``: back to the first character prose equations never hold
    (letters too, unless ``with_units``, which then drops the words), then forward to where a number starts."""
    start = end
    while start > 0:
        char = line[start - 1]
        if with_units and char in ",.:;" and line[start : start + 1] == " ":
            break  # the end of the previous clause
        if char not in _PROSE_CHARS and not (with_units and char in _WORD_CHARS):
            break
        start -= 1
    run = line[start:end]
    if with_units:
        run = _UNIT_WORD.sub(" ", run)
    first = re.search(r"-?\d|-?\.\d|\(", run)
    if first is None:
        return ""
    run = run[first.start() :].strip()
    # An operator needs two sides: a run like "5" or "(3" is not an equation worth computing.
    return run if re.search(r"[\d.)%]\s*[-+*/x(\u00d7\u00f7\u2212\u2013]\s*[\d.($]", run) else ""


def python_candidates(expression: str) -> Iterator[str]:
    """The Python readings of a GSM8K expression, most literal first (``%`` dropped, then ``%`` as ``/100``)."""
    seen: set[str] = set()
    for percent in ("drop", "divide"):
        python = to_python(expression, percent=percent)
        if python is not None and python not in seen:
            seen.add(python)
            yield python
