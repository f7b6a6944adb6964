"""A toolbox body read as the daemon's gin binding reads it (an ``encoding/json`` Decoder's first value into the
handler's struct), with Go's words for what it cannot take: the scanner's messages as ``scanner.go`` words them,
``EOF`` and ``unexpected EOF`` as ``Decoder.readValue`` gives them, ``UnmarshalTypeError`` for a value that is no
object. Read from Go's source, not recorded."""

from __future__ import annotations

import pytest

from emulator.daytona.go_decode import GoDecodeError, bind_json

FIELDS = ("command", "timeout", "cwd", "envs")
TYPE = "process.ExecuteRequest"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"", "EOF"),
        (b" \t\r\n", "EOF"),
        (b"{", "unexpected EOF"),
        (b'{"command": "ls"', "unexpected EOF"),
        (b"fals", "unexpected EOF"),
        (b"-", "unexpected EOF"),
        (b"x", "invalid character 'x' looking for beginning of value"),
        (b"{x", "invalid character 'x' looking for beginning of object key string"),
        (b"{'a': 1}", "invalid character '\\'' looking for beginning of object key string"),
        (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
        (b'{"a" 1}', "invalid character '1' after object key"),
        (b'{"a": 1 2}', "invalid character '2' after object key:value pair"),
        (b'{"a": [1 2]}', "invalid character '2' after array element"),
        (b'{"a": [1,]}', "invalid character ']' looking for beginning of value"),
        (b'{"a": "\x01"}', "invalid character '\\x01' in string literal"),
        (b'{"a": "\t"}', "invalid character '\\t' in string literal"),
        (b'{"a": "\\x"}', "invalid character 'x' in string escape code"),
        (b'{"a": "\\u12g4"}', "invalid character 'g' in \\u hexadecimal character escape"),
        (b'{"a": -x}', "invalid character 'x' in numeric literal"),
        (b'{"a": 1.}', "invalid character '}' after decimal point in numeric literal"),
        (b'{"a": 1e}', "invalid character '}' in exponent of numeric literal"),
        (b'{"a": tx}', "invalid character 'x' in literal true (expecting 'r')"),
        (b'{"a": nul}', "invalid character '}' in literal null (expecting 'l')"),
        (b'{"a": NaN}', "invalid character 'N' looking for beginning of value"),
        (b'{"a": "b"\\}', "invalid character '\\\\' after object key:value pair"),
        (b'{"a": "b"\xc3\xa9}', "invalid character '\u00c3' after object key:value pair"),
        (b'{"a": \xa0}', "invalid character '\\u00a0' looking for beginning of value"),
        (b"[]", f"json: cannot unmarshal array into Go value of type {TYPE}"),
        (b'"ls"', f"json: cannot unmarshal string into Go value of type {TYPE}"),
        (b"12", f"json: cannot unmarshal number into Go value of type {TYPE}"),
        (b"12abc", f"json: cannot unmarshal number into Go value of type {TYPE}"),
        (b"true", f"json: cannot unmarshal bool into Go value of type {TYPE}"),
        (b"[" * 10001, "invalid character '[' exceeded max depth"),
    ],
)
def test_a_body_go_cannot_decode_is_refused_in_gos_words(body: bytes, error: str) -> None:
    with pytest.raises(GoDecodeError) as refused:
        bind_json(body, TYPE, FIELDS)
    assert str(refused.value) == error


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        (b"null", {}),  # the struct stays empty: its validator speaks next
        (b'{"command": "ls"} and more', {"command": "ls"}),  # the Decoder reads the first value only
        (b'{"command": "ls"}{', {"command": "ls"}),
        (b'{"COMMAND": "ls", "Timeout": 3, "other": 1}', {"command": "ls", "timeout": 3}),
        (b'{"command": "a", "Command": "b"}', {"command": "b"}),  # each key sets the field: the last wins
        (b'{"command": "a\xffb\xe2\x82"}', {"command": "a\ufffdb\ufffd\ufffd"}),  # each invalid byte U+FFFD
        (b'{"command": "\\ud800"}', {"command": "\ufffd"}),
        (b'{"envs": {"A": "1", "a": "2"}}', {"envs": {"A": "1", "a": "2"}}),  # a map's keys are exact
    ],
)
def test_a_body_go_decodes(body: bytes, bound: dict[str, object]) -> None:
    assert bind_json(body, TYPE, FIELDS) == bound


def test_a_key_names_a_field_as_gos_fold_compares_them() -> None:
    """Go folds U+017F (long s) to s and U+212A (Kelvin sign) to k; no other letter folds to an ASCII one."""
    fields = ("sessionId",)
    assert bind_json('{"\u017fESSIONID": "x"}'.encode(), "session.CreateSessionRequest", fields) == {"sessionId": "x"}
    assert bind_json('{"\u00dfessionId": "x"}'.encode(), "session.CreateSessionRequest", fields) == {}
