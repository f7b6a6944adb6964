"""The interpreter WebSocket's first frame is read as the daemon's controller reads it (``controller.go``'s
``Execute``, decoding into the Go ``ExecuteRequest``): 1002 for what does not decode, 1008 for what it refuses."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.daytona.interpreter_request import (
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    ExecuteRequest,
    Refusal,
    parse_execute_request,
)


def _parse(raw: str | bytes, known: frozenset[str] = frozenset({"ctx-1"})) -> ExecuteRequest | Refusal:
    return parse_execute_request(raw, known.__contains__)


@pytest.mark.parametrize(
    "raw",
    [
        "garbage",
        "[1]",
        '"print(1)"',
        '{"code": 1}',
        '{"code": "print(1)", "timeout": 1.5}',  # an int64 in Go: a float literal does not decode
        '{"code": "print(1)", "timeout": 1e3}',
        '{"code": "print(1)", "timeout": "5"}',
        '{"code": "print(1)", "timeout": true}',
        '{"code": "print(1)", "timeout": 9223372036854775808}',  # past int64
        '{"code": "print(1)", "timeout": NaN}',
        '{"code": "print(1)", "envs": {"A": 1}}',  # map[string]string
        '{"code": "print(1)", "envs": ["A"]}',
        '{"code": "print(1)", "contextId": 7}',
    ],
)
def test_what_does_not_decode_is_a_protocol_error(raw: str) -> None:
    assert _parse(raw) == Refusal(CLOSE_PROTOCOL_ERROR, "invalid JSON payload")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("null", "code is required"),
        ("{}", "code is required"),
        ('{"code": ""}', "code is required"),
        ('{"code": null, "timeout": 5}', "code is required"),
        ('{"code": "print(1)", "timeout": -1}', "timeout must be greater than or equal to 0"),
        ('{"code": "print(1)", "contextId": "nope"}', "context not found: nope"),
        ('{"code": "print(1)", "contextId": ""}', "context not found: "),  # only a missing id means the default
    ],
)
def test_what_the_daemon_refuses_is_a_policy_violation(raw: str, reason: str) -> None:
    assert _parse(raw) == Refusal(CLOSE_POLICY_VIOLATION, reason)


def test_fields_match_without_regard_to_case_and_nulls_are_unset() -> None:
    request = _parse('{"CODE": "print(1)", "ContextID": "ctx-1", "Timeout": null, "ENVS": {"A": "1", "B": null}}')
    assert request == ExecuteRequest("print(1)", "ctx-1", None, {"A": "1", "B": ""})


def test_the_default_context_by_name_and_a_zero_timeout() -> None:
    assert _parse('{"code": "x", "contextId": "default", "timeout": 0}') == ExecuteRequest("x", "default", 0, {})


def test_a_binary_frame_and_lone_surrogates_read_as_go_reads_them() -> None:
    request = _parse(b'{"code": "print(\'\\ud800\')", "envs": {"\\udfff": "\\ud800"}, "unknown": 1}')
    assert request == ExecuteRequest("print('\ufffd')", None, None, {"\ufffd": "\ufffd"})


def test_a_long_context_id_is_cut_to_what_a_close_frame_holds() -> None:
    refusal = _parse(json.dumps({"code": "x", "contextId": "é" * 200}))
    assert isinstance(refusal, Refusal) and refusal.code == CLOSE_POLICY_VIOLATION
    assert refusal.reason.startswith("context not found: é") and len(refusal.reason.encode()) <= 123


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))  # what a client's str holds and encodes


@given(
    st.fixed_dictionaries(
        {"code": st.text(st.characters(blacklist_categories=("Cs",)), min_size=1)},
        optional={
            "timeout": st.integers(min_value=0, max_value=2**63 - 1),
            "envs": st.dictionaries(_TEXT, _TEXT),
            "contextId": st.sampled_from(["default", "ctx-1"]),
        },
    )
)
def test_any_request_the_sdk_can_send_is_taken(fields: dict[str, object]) -> None:
    request = _parse(json.dumps(fields))
    assert isinstance(request, ExecuteRequest)
    assert request.timeout == fields.get("timeout")
    assert request.context_id == fields.get("contextId")
    assert len(request.envs) == len(fields.get("envs", {}))  # type: ignore[arg-type]
