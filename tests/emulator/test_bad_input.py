"""Bad input never crashes the server: generated bodies get a valid answer (200 with a run status), a 422, or, for a
JSON body that cannot be decoded as text, FastAPI's 400; a 422 the real server cannot render (a non-finite number in
an echoed input, a non-JSON-typed body that is not UTF-8) is its global handler's 500, as there."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.server import EmulatorServer

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)
FIELDS: dict[str, Any] = {
    "code": st.text(max_size=40) | JSON_VALUES,
    "language": st.sampled_from(["python", "bash", "sql", "nodejs", "cobol", "js", "Python", ""]) | JSON_SCALARS,
    "run_timeout": st.floats(-1, 1.5, allow_nan=False) | st.sampled_from(["1", "x", None, True]),
    "compile_timeout": st.floats(0, 1.5) | st.sampled_from(["2", None, []]),
    "memory_limit_MB": st.integers(-5, 4096) | st.sampled_from(["64", 1.5, None]),
    "stdin": st.none() | st.text(max_size=20) | st.integers(),
    "files": st.dictionaries(st.text(max_size=12), st.none() | st.text(max_size=12) | st.just("aGk="), max_size=2)
    | JSON_SCALARS,
    "fetch_files": st.lists(st.text(max_size=12), max_size=2) | JSON_SCALARS,
    "extra": JSON_VALUES,
}
OBJECT_BODIES = st.fixed_dictionaries({}, optional=FIELDS).map(lambda d: json.dumps(d).encode())
# Python's json (on both sides) also reads the non-standard literals NaN and Infinity: a valid request runs, an invalid
# one echoes the number in its 422, which FastAPI 0.103's JSONResponse (allow_nan=False) cannot write.
NON_FINITE_VALID = b'{"code": "print(1)", "language": "python", "run_timeout": NaN}'
NON_FINITE_INVALID = b'{"code": Infinity, "language": "python"}'
NON_FINITE = st.sampled_from([NON_FINITE_VALID, NON_FINITE_INVALID])
OUT_OF_RANGE = "Out of range float values are not JSON compliant"
BODIES = OBJECT_BODIES | st.binary(max_size=120) | JSON_VALUES.map(lambda v: json.dumps(v).encode()) | NON_FINITE
CONTENT_TYPES = st.sampled_from(["application/json", "text/plain", "application/problem+json", None])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES, content_type=CONTENT_TYPES)
def test_generated_bodies_get_a_valid_answer(
    sandbox_emulator: EmulatorServer, body: bytes, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    answer = requests.post(sandbox_emulator.run_code_url, data=body, headers=headers, timeout=30)
    expected = _server_error(body, content_type)
    if expected is not None:
        assert answer.status_code == 500, answer.text[:300]
        assert answer.json()["detail"] == expected
        return
    assert answer.status_code in (200, 400, 422), answer.text[:300]
    payload = answer.json()
    if answer.status_code == 400:  # bytes json.loads cannot decode (not UTF-8, or nested past its depth)
        assert payload == {"detail": "There was an error parsing the body"}
        assert content_type is None or "json" in content_type
    elif answer.status_code == 200:
        assert payload["status"] in ("Success", "Failed", "SandboxError")
        assert set(payload) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    else:
        assert isinstance(payload["detail"], list) and payload["detail"]
        assert all({"type", "loc", "msg"} <= set(entry) for entry in payload["detail"])


def _server_error(body: bytes, content_type: str | None) -> str | None:
    """The detail of the real server's 500 for a generated body, None when it answers otherwise."""
    if content_type is not None and "json" not in content_type:  # validated as text, which the encoder decodes
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return str(exc)
        return None
    return OUT_OF_RANGE if body == NON_FINITE_INVALID else None


UNRENDERABLE = [
    ("/run_code", b'{"language": "python", "run_timeout": NaN}', "application/json", OUT_OF_RANGE),
    ("/run_code", b'{"code": Infinity, "language": "python"}', "application/json", OUT_OF_RANGE),
    ("/run_code", b'{"code": "x", "language": "python", "memory_limit_MB": -Infinity}', None, OUT_OF_RANGE),
    ("/run_code", b'{"code": 1e400, "language": "python"}', "application/json", OUT_OF_RANGE),
    ("/run_code", b'{"language": "cobol", "extra": [NaN]}', "application/json", OUT_OF_RANGE),
    ("/run_jupyter", b'{"cells": [NaN]}', "application/json", OUT_OF_RANGE),
    ("/run_code", b"\xff\xfe{", "text/plain", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    ("/run_jupyter", b"\xff", "text/plain", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
]


@pytest.mark.parametrize(("path", "body", "content_type", "detail"), UNRENDERABLE)
def test_a_422_the_real_server_cannot_render_is_its_500(
    sandbox_emulator: EmulatorServer, path: str, body: bytes, content_type: str | None, detail: str
) -> None:
    """FastAPI 0.103's 422 handler encodes the errors (bytes decoded strictly) and answers with ``allow_nan=False``:
    either raises, and the global handler answers 500 with the message and the traceback's lines."""
    headers = {"Content-Type": content_type} if content_type else {}
    answer = requests.post(sandbox_emulator.url + path, data=body, headers=headers, timeout=30)
    assert answer.status_code == 500, answer.text[:300]
    payload = answer.json()
    assert set(payload) == {"detail", "traceback"}
    assert payload["detail"] == detail
    assert payload["traceback"][0] == "Traceback (most recent call last):" and payload["traceback"][-1] == ""


@pytest.mark.parametrize(
    ("body", "content_type"), [(b'{"code": "x", "language": "python", "total": NaN}', None), (b"{}", "text/plain")]
)
def test_a_422_without_a_non_finite_input_or_bad_text_is_still_a_422(
    sandbox_emulator: EmulatorServer, body: bytes, content_type: str | None
) -> None:
    """A NaN in an extra field is never echoed (the request is valid: 200); UTF-8 text is echoed as a string."""
    headers = {"Content-Type": content_type} if content_type else {}
    answer = requests.post(sandbox_emulator.run_code_url, data=body, headers=headers, timeout=30)
    assert answer.status_code == (422 if content_type else 200), answer.text[:300]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.text(max_size=30), max_size=4) | JSON_VALUES)
def test_generated_jupyter_cells_get_a_valid_answer(sandbox_emulator: EmulatorServer, cells: Any) -> None:
    answer = requests.post(sandbox_emulator.url + "/run_jupyter", json={"cells": cells, "total_timeout": 5}, timeout=30)
    assert answer.status_code in (200, 422), answer.text[:300]
    if answer.status_code == 200:
        assert answer.json()["status"] in ("Success", "Failed", "SandboxError")


def test_server_still_serves_after_fuzzing(sandbox_emulator: EmulatorServer) -> None:
    answer = requests.post(sandbox_emulator.run_code_url, json={"code": "print('alive')", "language": "python"})
    assert answer.json()["run_result"]["stdout"] == "alive\n"


def test_an_infinite_run_timeout_lets_the_program_end(sandbox_emulator: EmulatorServer) -> None:
    """The real server's ``asyncio.wait_for(timeout=inf)`` (or 1e308) waits for the program; NaN gives up at once."""
    for token in (b"Infinity", b"1e308"):
        body = b'{"code": "print(1)", "language": "python", "run_timeout": ' + token + b"}"
        answer = requests.post(sandbox_emulator.run_code_url, data=body, timeout=30).json()
        assert (answer["status"], answer["run_result"]["stdout"]) == ("Success", "1\n"), answer
    body = b'{"code": "print(1)", "language": "python", "run_timeout": NaN}'
    answer = requests.post(sandbox_emulator.run_code_url, data=body, timeout=30).json()
    assert answer["run_result"]["status"] == "TimeLimitExceeded", answer


@pytest.mark.parametrize("language", ["python", "bash"])
@pytest.mark.parametrize("timeout", [b"0", b"-1", b"NaN"])
def test_a_run_given_no_time_still_returns_its_restored_files(
    sandbox_emulator: EmulatorServer, language: str, timeout: bytes
) -> None:
    """The real server restores ``files``, times the program out at once, then fetches as after any run: the
    restored files come back (a compiled language's did already)."""
    body = (
        b'{"code": "echo 1", "language": "' + language.encode() + b'", "run_timeout": ' + timeout + b", "
        b'"files": {"a.txt": "aGk=", "d/b.txt": "eA=="}, "fetch_files": ["a.txt", "./d/b.txt", "missing", "d"]}'
    )
    answer = requests.post(sandbox_emulator.run_code_url, data=body, timeout=30).json()
    assert answer["run_result"]["status"] == "TimeLimitExceeded", answer
    assert answer["files"] == {"a.txt": "aGk=", "./d/b.txt": "eA=="}
