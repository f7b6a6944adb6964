"""JSON values as the daemon's Go decoder holds them (Go strings are bytes: a lone surrogate cannot be one)."""

from __future__ import annotations

import codecs
import json
from typing import Any

#: The codecs error handler of :func:`go_string`.
_EACH_BYTE = "emulator-go-each-byte"


def _each_byte(error: UnicodeError) -> tuple[str, int]:
    """One U+FFFD for each byte of the invalid run, as Go's encoder steps over an invalid byte one at a time."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error(_EACH_BYTE, _each_byte)


def go_string(data: bytes) -> str:
    """``data`` as Go's ``encoding/json`` writes a string made of those bytes: valid UTF-8 as it is, each byte that
    is not part of it as U+FFFD (``b"a\\xff\\xfe"`` is ``"a\\ufffd\\ufffd"``; a cut sequence ``b"\\xe2\\x82"``,
    two)."""
    return data.decode("utf-8", _EACH_BYTE)


def as_go_decodes(value: Any) -> Any:
    """``value`` with a lone surrogate escape (``"\\ud800"``) in any string or key turned into U+FFFD, as Go's
    decoder turns it."""
    if isinstance(value, dict):
        return {as_go_decodes(key): as_go_decodes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_go_decodes(item) for item in value]
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in value)
    return value


def go_text(text: str) -> str:
    """``text`` (a path the emulator holds with each byte that is no UTF-8 as a surrogate, ``surrogateescape``) as
    Go's JSON encoder writes a string of those bytes: each such byte U+FFFD."""
    return go_string(text.encode("utf-8", "surrogateescape"))


def go_marshal(value: Any) -> bytes:
    """``value`` as Go's ``json.Marshal`` (and gin's ``c.JSON``) writes it: compact, non-ASCII as UTF-8, and
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (only strings can hold them). Strings must be :func:`go_text`'s."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text.encode()


__all__ = ["as_go_decodes", "go_marshal", "go_string", "go_text"]
