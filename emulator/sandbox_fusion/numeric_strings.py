"""Numbers given as strings, read as the real server's pydantic 2.6 (pydantic-core 2.16) reads them.

Later pydantic versions read some strings differently: they strip surrounding whitespace (``" 1 "``, ``"1e5 "``,
``"\\t1"``, ``"nan "`` are numbers there, ``float_parsing``/``int_parsing`` errors in 2.6) and no longer read
``"5."`` as the integer 5. The request's numeric fields take these rules whatever pydantic is installed.

2.6's rules: a float is Rust's ``f64`` grammar (a sign, then ``inf``, ``infinity``, ``nan`` in any case, or digits
with an optional fraction and exponent), tried again with single inner underscores removed. An integer is at most
4300 bytes (else ``int_parsing_size``); it is Rust's ``i64`` grammar below 19 bytes, a big integer's (underscores
allowed after the first digit) from 19 on, the byte length always the original string's; failing that, a string
whose fraction is all zeros (``"5."``, ``"5.00"``) is read without it, else one with single inner underscores is read
without them.
"""

from __future__ import annotations

import re

#: Rust's ``f64::from_str`` grammar (ASCII, case-insensitive).
_RUST_FLOAT = re.compile(r"[+-]?(?:inf|infinity|nan|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)", re.I)
#: Rust's ``i64::from_str`` grammar.
_RUST_I64 = re.compile(r"[+-]?[0-9]+")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
#: pydantic-core's bound on an integer string's length, in bytes (CPython's int digit limit).
_MOST_INT_BYTES = 4300
#: From this byte length on pydantic-core parses a big integer instead of an i64.
_BIG_INT_BYTES = 19

FLOAT_PARSING = "float_parsing"
INT_PARSING = "int_parsing"
INT_PARSING_SIZE = "int_parsing_size"


def _strip_underscores(text: str) -> str | None:
    """The text without its underscores, when they are all single and inner (None otherwise: nothing to retry)."""
    if "_" not in text or text.startswith("_") or text.endswith("_") or "__" in text:
        return None
    return text.replace("_", "")


def parse_float(text: str) -> float | str:
    """The float 2.6 reads from ``text``, or the error type it answers."""
    for candidate in (text, _strip_underscores(text)):
        if candidate is not None and _RUST_FLOAT.fullmatch(candidate):
            return float(candidate)
    return FLOAT_PARSING


def _big_int(text: str) -> int | None:
    """num-bigint's ``BigInt::from_str``: ``-`` or ``+`` (not both), then a digit, then digits and underscores."""
    sign = 1
    if text.startswith("-") and not text[1:].startswith("+"):
        sign, text = -1, text[1:]
    elif text.startswith("+") and not text[1:].startswith("+"):
        text = text[1:]
    if not text or not text[0].isascii() or not text[0].isdigit():
        return None
    if any(c not in "0123456789_" for c in text):
        return None
    return sign * int(text.replace("_", ""))


def _parse_int(text: str, size: int) -> int | None:
    if size < _BIG_INT_BYTES:
        if _RUST_I64.fullmatch(text) and _I64_MIN <= (value := int(text)) <= _I64_MAX:
            return value
        return None
    return _big_int(text)


def _strip_decimal_zeros(text: str) -> str | None:
    """The text before its first ``.``, when everything after it is zeros (or nothing)."""
    whole, dot, fraction = text.partition(".")
    if not dot or fraction.strip("0"):
        return None
    return whole


def parse_int(text: str) -> int | str:
    """The integer 2.6 reads from ``text``, or the error type it answers."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > _MOST_INT_BYTES:
        return INT_PARSING_SIZE
    value = _parse_int(text, size)
    if value is not None:
        return value
    retry = _strip_decimal_zeros(text)
    if retry is None:
        retry = _strip_underscores(text)
    if retry is None:
        return INT_PARSING
    value = _parse_int(retry, size)
    return INT_PARSING if value is None else value


__all__ = ["FLOAT_PARSING", "INT_PARSING", "INT_PARSING_SIZE", "parse_float", "parse_int"]
