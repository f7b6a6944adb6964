"""A toolbox body read as the daemon's gin binding reads it (an ``encoding/json`` Decoder's first value into the
handler's struct), with Go's words for what it cannot take: the scanner's messages as ``scanner.go`` words them,
``EOF`` and ``unexpected EOF`` as ``Decoder.readValue`` gives them, ``UnmarshalTypeError`` for a value that is no
object. Read from Go's source, not recorded."""

from __future__ import annotations

import pytest

from emulator.daytona import go_decode
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


#: A long body whose first value is cut short or goes wrong far in: (prefix repeated, end, Go's words).
_LONG_BODIES = [
    (b"0,", b"", "unexpected EOF"),
    (b"0,", b"0 1", "invalid character '1' after array element"),
    (b'{"k": "v\\"]", "n": [1, {"a": []}]}, ', b"[1.5e3 .", "invalid character '.' after array element"),
    (b"[[], [[]]], ", b'{"a" "b"}', "invalid character '\"' after object key"),
    (b'"x\\u00e9", ', b'"a\\u12', "unexpected EOF"),
    (b"true, ", b"-Infinity", "invalid character 'I' in numeric literal"),
    (b"[" * 300 + b"]" * 300 + b",", b'{"a": "\x01"}', "invalid character '\\x01' in string literal"),
]


@pytest.mark.parametrize(("item", "end", "error"), _LONG_BODIES)
def test_a_long_malformed_body_steps_gos_scanner_only_around_the_error(
    item: bytes, end: bytes, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C parser finds where a body stops being JSON; Go's scanner, a Python step a byte, words the error from a
    few bytes that stand for all before (a 4 MB body cut short held the server's loop for seconds when it scanned
    all of it). Its words are those of a scan of the whole body."""
    body = b'{"command": "ls", "pad": [' + item * (1_000_000 // len(item)) + end
    with pytest.raises(GoDecodeError) as whole:
        go_decode.first_value(body)
    scanned: list[int] = []
    first_value = go_decode.first_value

    def counted(data: bytes) -> bytes:
        scanned.append(len(data))
        return first_value(data)

    monkeypatch.setattr(go_decode, "first_value", counted)
    with pytest.raises(GoDecodeError) as refused:
        bind_json(body, TYPE, FIELDS)
    assert str(refused.value) == str(whole.value) == error
    assert scanned and max(scanned) < 64 + len(end)


def test_a_body_the_c_parser_reads_is_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first value followed by more (which Go never reads) is found by the C parser alone."""
    monkeypatch.setattr(go_decode, "first_value", lambda data: pytest.fail("scanned"))
    body = b'{"command": "ls", "pad": [' + b"0," * 100_000 + b"0]} trailing {"
    assert bind_json(body, TYPE, FIELDS) == {"command": "ls"}
