"""A toolbox request's JSON body read as the daemon reads it: gin's ``ShouldBindJSON``, an ``encoding/json`` Decoder
that decodes the body's first JSON value into the handler's struct.

So the daemon's words for a body it cannot take: an empty one is ``EOF``, one cut short ``unexpected EOF``, a
malformed one the scanner's ``invalid character 'x' looking for beginning of value`` (each of its contexts), one
that is no object ``json: cannot unmarshal array into Go value of type process.ExecuteRequest``. A ``null`` body
leaves the struct empty (its validator then names the required fields); what follows the first value is never read;
a key names a field without regard to case; a byte that is no UTF-8 in a string is U+FFFD.

The C parser finds the first value's end, or where the body stops being JSON; Go's scanner, a Python step a byte,
only words the error, from a short text that leaves it in the state the body left it in (a body of megabytes cut
short would otherwise hold the server's loop for seconds).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .go_json import as_go_decodes, go_string

#: Go's ``maxNestingDepth``: a value nested deeper is a syntax error.
_MAX_DEPTH = 10000
_SPACE = frozenset(b" \t\r\n")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
#: What a string may hold that leaves the scanner in the string (its bytes, whole escapes): runs are taken at once.
_STRING_RUN = re.compile(rb'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})+')
#: A run of digits, which leaves a number's scanner where it was: taken at once.
_DIGIT_RUN = re.compile(rb"[0-9]+")
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
    its closing bracket, a scalar at the byte after it); GoDecodeError with Go's words when there is none. Stepped in
    Python, but a run of a string's characters or of a number's digits at once."""
    scanner = _Scanner()
    at, size = 0, len(data)
    while at < size:
        run = _skip(scanner, data, at)
        if run is not None:
            at = run
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


def _skip(scanner: _Scanner, data: bytes, at: int) -> int | None:
    """Where a run that leaves ``scanner`` in its state ends (a string's characters, a number's digits), if one
    starts at ``at``."""
    if scanner.step == scanner.in_string:
        run = _STRING_RUN.match(data, at)
    elif scanner.step in (scanner.digits, scanner.fraction, scanner.exponent_digits):
        run = _DIGIT_RUN.match(data, at)
    else:
        return None
    return None if run is None else run.end()


#: Finds where a body's first value ends, or where it stops being JSON, at C speed; its numbers and constants are
#: not kept (only positions are wanted).
_C_PARSER = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BLANKS = re.compile(rb"[ \t\r\n]+")
#: The bytes of the scalars once strings are ``""``.
_SCALAR_BYTES = b'"+-.0123456789Eaeflnrstu'
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
#: What stands for a container left open before the innermost one (which holds the next).
_HOLDING = {ord("["): b"[", ord("{"): b'{"":'}
#: What stands for the innermost open container, by the last byte before the scalar the prefix ends with: just
#: opened, after a separator, after a closed container (any value will do).
_INNERMOST = {
    (ord("["), ord("[")): b"[",
    (ord("{"), ord("{")): b"{",
    (ord("["), ord(",")): b'["",',
    (ord("{"), ord(",")): b'{"":"",',
    (ord("{"), ord(":")): b'{"":',
    (ord("["), ord("]")): b'[""',
    (ord("["), ord("}")): b'[""',
    (ord("{"), ord("]")): b'{"":""',
    (ord("{"), ord("}")): b'{"":""',
}


def _first_value_end(data: bytes) -> int:
    """The end of the first value of ``data`` (no UTF-8), an object or an array, found by the C parser; GoDecodeError
    with Go's words where it finds none. ValueError where the C parser cannot say."""
    text = data.decode("latin-1")  # a character a byte, so that positions are the body's
    text = text.replace("NaN", "\xffaN").replace("Infinity", "\xffnfinity")  # no JSON to Go: refused where Go does
    if not _opens_container(text):
        raise ValueError("not an object or array")
    try:
        return _C_PARSER.raw_decode(text, _blanks_before(text))[1]
    except json.JSONDecodeError as failed:
        _raise_go_error(data, failed.msg, failed.pos)


def _blanks_before(text: str) -> int:
    return len(text) - len(text.lstrip(" \t\r\n"))


def _opens_container(text: str) -> bool:
    start = _blanks_before(text)
    return text[start : start + 1] in ("{", "[")


def _raise_go_error(data: bytes, reason: str, at: int) -> NoReturn:
    """Go's error for ``data``, which the C parser refused at byte ``at`` for ``reason``, from Go's scanner run on
    the bytes around ``at`` only; ValueError if it takes them (the two parsers disagree: the caller scans all)."""
    first_value(_go_lead(data, reason, at))
    raise ValueError("Go's scanner takes what the C parser refused")


def _go_lead(data: bytes, reason: str, at: int) -> bytes:
    """Bytes that give Go's scanner the state it has at ``at``, where the C parser refused ``data`` for ``reason``
    (an open string, or a skeleton of all before), then the body from there: so only the bytes around ``at`` are
    stepped."""
    if reason.startswith(("Unterminated string", "Invalid control character", "Invalid \\")):
        back = {"Unterminated string starting at": 1, "Invalid \\uXXXX escape": -1}.get(reason, 0)
        return b'["' + data[at + back :]  # in a string, Go's words do not depend on what holds the string
    return _skeleton(data[:at]) + data[at:]


def _skeleton(prefix: bytes) -> bytes:
    """A short text that leaves Go's scanner as ``prefix`` (JSON so far, no string open) does: the containers left
    open, the last separator or bracket, then the scalar the prefix ends with as it is (the byte after it may
    continue it) and a blank after that. C code's passes over the text, then a step a bracket."""
    text = _BLANKS.sub(b"", _STRING.sub(b'""', prefix))
    body = text.rstrip(_SCALAR_BYTES)
    tail = text[len(body) :] + (b" " if prefix[-1:] in (b" ", b"\t", b"\r", b"\n") else b"")
    opened = _open_containers(body.translate(None, _NOT_BRACKETS))
    if not opened or (opened[-1], body[-1]) not in _INNERMOST:
        raise ValueError("no container open")  # not a prefix of JSON: the C parser would have said
    return b"".join(_HOLDING[c] for c in opened[:-1]) + _INNERMOST[opened[-1], body[-1]] + tail


def _open_containers(brackets: bytes) -> bytes:
    """The brackets left open in ``brackets`` (a prefix of JSON's, balanced as it goes), outermost first: the pairs
    closed inside are taken away by passes of ``bytes.replace`` while they shorten it much, the rest a bracket a
    step."""
    while True:
        folded = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(folded) * 2 > len(brackets):
            break
        brackets = folded
    stack = bytearray()
    for c in folded:
        if c in (0x5B, 0x7B):
            stack.append(c)
        else:
            stack.pop()
    return bytes(stack)


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


_VALUES = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_refuse)


def _decoded(data: bytes) -> Any:
    """The first JSON value of ``data``, found by the C parser where it can say where that ends (an object or an
    array) or the body is that value alone; Go's scanner steps only what words an error, or the whole body where the
    C parser cannot say (a scalar's end, a body nested deeper than it goes, NaN)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _decoded_from_bytes(data)
    try:
        value, end = _VALUES.raw_decode(text, _blanks_before(text))
    except json.JSONDecodeError as failed:
        if _opens_container(text):
            with contextlib.suppress(ValueError):  # the parsers disagree: Go's scanner on all of it
                _raise_go_error(data, failed.msg, len(text[: failed.pos].encode()))
        return _scanned(data)
    except RecursionError:  # nested deeper than the C parser goes
        return _scanned(data)
    except ValueError:  # NaN or Infinity, which Go refuses: found again with them made no JSON
        return _decoded_from_bytes(data)
    if isinstance(value, dict | list) or not text[end:].strip(" \t\r\n"):
        return value
    return _scanned(data)  # a scalar with more after it, which Go may not end where Python does (``1.x``)


def _decoded_from_bytes(data: bytes) -> Any:
    """The first value of a body that is no UTF-8 (or holds what Python takes for a constant): its end found by the
    C parser a byte a character, then decoded as Go decodes its bytes."""
    try:
        raw = data[: _first_value_end(data)]
    except (ValueError, RecursionError):
        raw = first_value(data)
    return _go_loads(raw)


def _scanned(data: bytes) -> Any:
    """The first value of ``data`` as Go's scanner alone finds it."""
    return _go_loads(first_value(data))


def _go_loads(raw: bytes) -> Any:
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
