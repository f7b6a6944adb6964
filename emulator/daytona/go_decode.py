"""A toolbox request's JSON body read as the daemon reads it: gin's ``ShouldBindJSON``, an ``encoding/json`` Decoder
that decodes the body's first JSON value into the handler's struct.

So the daemon's words for a body it cannot take: an empty one is ``EOF``, one cut short ``unexpected EOF``, a
malformed one the scanner's ``invalid character 'x' looking for beginning of value`` (each of its contexts), one
that is no object ``json: cannot unmarshal array into Go value of type process.ExecuteRequest``. A ``null`` body
leaves the struct empty (its validator then names the required fields); what follows the first value is never read;
a key names a field without regard to case; a byte that is no UTF-8 in a string is U+FFFD.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from .go_json import as_go_decodes, go_string

#: Go's ``maxNestingDepth``: a value nested deeper is a syntax error.
_MAX_DEPTH = 10000
_SPACE = frozenset(b" \t\r\n")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
#: The bytes a string may hold that end no step of the scanner: whole runs of them are taken at once.
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]+')
_OBJECT_KEY, _OBJECT_VALUE, _ARRAY_VALUE = range(3)
_CONTINUE, _END, _ERROR = range(3)


class GoDecodeError(Exception):
    """The body does not decode into the handler's struct; ``str`` is Go's error."""


def _quote_char(c: int) -> str:
    """Go's ``quoteChar``: the byte as a rune, quoted as ``strconv.Quote`` quotes it, in single quotes."""
    if c == ord("'"):
        return "'\\''"
    if c == ord('"'):
        return "'\"'"
    char = chr(c)
    if char == "\\":
        return "'\\\\'"
    if char.isprintable():
        return f"'{char}'"
    named = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    if char in named:
        return f"'{named[char]}'"
    return f"'\\x{c:02x}'" if c < 0x20 or c == 0x7F else f"'\\u{c:04x}'"


class _Scanner:
    """Go's JSON scanner (``encoding/json/scanner.go``), stepped one byte at a time, as a Decoder steps it."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.step: Callable[[int], int] = self.begin_value
        self.error_text = ""
        self.nested_end = False  # the last step closed an object or array

    def error(self, c: int, context: str) -> int:
        self.step = self.errored
        self.error_text = f"invalid character {_quote_char(c)} {context}"
        return _ERROR

    def errored(self, c: int) -> int:
        return _ERROR

    def push(self, c: int, state: int) -> int:
        self.stack.append(state)
        return _CONTINUE if len(self.stack) <= _MAX_DEPTH else self.error(c, "exceeded max depth")

    def begin_value(self, c: int) -> int:
        if c in _SPACE:
            return _CONTINUE
        if c == ord("{"):
            self.step = self.begin_key_or_empty
            return self.push(c, _OBJECT_KEY)
        if c == ord("["):
            self.step = self.begin_value_or_empty
            return self.push(c, _ARRAY_VALUE)
        literal = {
            ord('"'): self.in_string,
            ord("-"): self.negative,
            ord("0"): self.zero,
            ord("t"): self.literal("rue", "true"),
            ord("f"): self.literal("alse", "false"),
            ord("n"): self.literal("ull", "null"),
        }.get(c)
        if literal is None and ord("1") <= c <= ord("9"):
            literal = self.digits
        if literal is None:
            return self.error(c, "looking for beginning of value")
        self.step = literal
        return _CONTINUE

    def begin_value_or_empty(self, c: int) -> int:
        if c in _SPACE:
            return _CONTINUE
        return self.end_value(c) if c == ord("]") else self.begin_value(c)

    def begin_key_or_empty(self, c: int) -> int:
        if c in _SPACE:
            return _CONTINUE
        if c == ord("}"):
            self.stack[-1] = _OBJECT_VALUE
            return self.end_value(c)
        return self.begin_key(c)

    def begin_key(self, c: int) -> int:
        if c in _SPACE:
            return _CONTINUE
        if c == ord('"'):
            self.step = self.in_string
            return _CONTINUE
        return self.error(c, "looking for beginning of object key string")

    def end_value(self, c: int) -> int:
        if not self.stack:
            self.step = self.end_top
            return self.end_top(c)
        if c in _SPACE:
            self.step = self.end_value
            return _CONTINUE
        state = self.stack[-1]
        if state == _OBJECT_KEY:
            if c == ord(":"):
                self.stack[-1] = _OBJECT_VALUE
                self.step = self.begin_value
                return _CONTINUE
            return self.error(c, "after object key")
        if state == _OBJECT_VALUE:
            if c == ord(","):
                self.stack[-1] = _OBJECT_KEY
                self.step = self.begin_key
                return _CONTINUE
            if c == ord("}"):
                return self.pop()
            return self.error(c, "after object key:value pair")
        if c == ord(","):
            self.step = self.begin_value
            return _CONTINUE
        if c == ord("]"):
            return self.pop()
        return self.error(c, "after array element")

    def pop(self) -> int:
        self.stack.pop()
        self.step = self.end_value if self.stack else self.end_top
        self.nested_end = True
        return _CONTINUE

    def end_top(self, c: int) -> int:
        return _END  # whatever follows the first value is never read

    def in_string(self, c: int) -> int:
        if c == ord('"'):
            self.step = self.end_value
        elif c == ord("\\"):
            self.step = self.in_escape
        elif c < 0x20:
            return self.error(c, "in string literal")
        return _CONTINUE

    def in_escape(self, c: int) -> int:
        if c in b'bfnrt\\/"':
            self.step = self.in_string
            return _CONTINUE
        if c == ord("u"):
            self.step = self.hex_digits(4)
            return _CONTINUE
        return self.error(c, "in string escape code")

    def hex_digits(self, left: int) -> Callable[[int], int]:
        def step(c: int) -> int:
            if c not in _HEX:
                return self.error(c, "in \\u hexadecimal character escape")
            self.step = self.in_string if left == 1 else self.hex_digits(left - 1)
            return _CONTINUE

        return step

    def negative(self, c: int) -> int:
        if c == ord("0"):
            self.step = self.zero
        elif ord("1") <= c <= ord("9"):
            self.step = self.digits
        else:
            return self.error(c, "in numeric literal")
        return _CONTINUE

    def digits(self, c: int) -> int:
        return _CONTINUE if c in _DIGITS else self.zero(c)

    def zero(self, c: int) -> int:
        if c == ord("."):
            self.step = self.dot
            return _CONTINUE
        return self.exponent_or_end(c)

    def dot(self, c: int) -> int:
        if c not in _DIGITS:
            return self.error(c, "after decimal point in numeric literal")
        self.step = self.fraction
        return _CONTINUE

    def fraction(self, c: int) -> int:
        return _CONTINUE if c in _DIGITS else self.exponent_or_end(c)

    def exponent_or_end(self, c: int) -> int:
        if c in b"eE":
            self.step = self.exponent
            return _CONTINUE
        return self.end_value(c)

    def exponent(self, c: int) -> int:
        if c in b"+-":
            self.step = self.exponent_sign
            return _CONTINUE
        return self.exponent_sign(c)

    def exponent_sign(self, c: int) -> int:
        if c not in _DIGITS:
            return self.error(c, "in exponent of numeric literal")
        self.step = self.exponent_digits
        return _CONTINUE

    def exponent_digits(self, c: int) -> int:
        return _CONTINUE if c in _DIGITS else self.end_value(c)

    def literal(self, rest: str, word: str) -> Callable[[int], int]:
        """The steps of ``true``, ``false`` or ``null`` after its first letter."""

        def step(c: int) -> int:
            if c != ord(rest[0]):
                return self.error(c, f"in literal {word} (expecting '{rest[0]}')")
            self.step = self.end_value if len(rest) == 1 else self.literal(rest[1:], word)
            return _CONTINUE

        return step


def first_value(data: bytes) -> bytes:
    """The bytes of ``data``'s first JSON value, as Go's ``Decoder.readValue`` finds its end (an object or array at
    its closing bracket, a scalar at the byte after it); GoDecodeError with Go's words when there is none."""
    scanner = _Scanner()
    at, size = 0, len(data)
    while at < size:
        if scanner.step == scanner.in_string:
            run = _STRING_RUN.match(data, at)
            if run is not None:
                at = run.end()
                continue
        scanner.nested_end = False
        result = scanner.step(data[at])
        if result == _ERROR:
            raise GoDecodeError(scanner.error_text)
        if result == _END:
            return data[:at]
        at += 1
        if scanner.nested_end and not scanner.stack:
            return data[:at]  # the closing bracket ends it: the next byte is not waited for
    if scanner.step(ord(" ")) == _END:
        return data
    raise GoDecodeError("unexpected EOF" if any(c not in _SPACE for c in data) else "EOF")


class _Object(dict[str, Any]):
    """A decoded JSON object that keeps its keys in order, repeated ones too (Go sets a field at each)."""

    pairs: list[tuple[str, Any]]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    made = _Object(pairs)
    made.pairs = pairs
    return made


def _fold(name: str) -> str:
    """A key as Go's ``foldName`` compares it with a field's name: ASCII letters without case, and the two
    non-ASCII letters that fold to ASCII ones (U+017F long s, U+212A Kelvin sign)."""
    return (
        name.lower()
        if name.isascii()
        else "".join(_FOLDS.get(char, char.lower() if char.isascii() else char) for char in name)
    )


_FOLDS = {"\u017f": "s", "\u212a": "k"}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "array"


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is no JSON")


def _decoded(data: bytes) -> Any:
    """The first JSON value of ``data``. A body that is one strict JSON value in UTF-8 (every body a client sends)
    is read as it is; any other is scanned as Go scans it first, for its end or Go's error."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_object, parse_constant=_refuse)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, more after the value, nested too deep
        pass
    raw = first_value(data)
    try:
        return json.loads(go_string(raw), object_pairs_hook=_object)
    except RecursionError:  # deeper than Python's parser goes (Go's own limit is 10,000)
        raise GoDecodeError("exceeded max depth") from None


def bind_json(data: bytes, go_type: str, fields: Sequence[str]) -> dict[str, Any]:
    """``data`` decoded into the struct ``go_type`` (``package.Name``) whose JSON fields are ``fields``: the object's
    keys that name a field (exactly, else without regard to case), under the field's own name, the last of a field's
    keys winning; others left out. GoDecodeError with Go's words for a body that does not decode."""
    value = _decoded(data)
    if value is None:  # a null leaves the struct as it was
        return {}
    if not isinstance(value, _Object):
        raise GoDecodeError(f"json: cannot unmarshal {_kind(value)} into Go value of type {go_type}")
    exact = set(fields)
    folded = {_fold(name): name for name in fields}
    bound: dict[str, Any] = {}
    for key, item in value.pairs:
        name = key if key in exact else folded.get(_fold(key))
        if name is not None:
            bound[name] = item
    result: dict[str, Any] = as_go_decodes(bound)
    return result


__all__ = ["GoDecodeError", "bind_json", "first_value"]
