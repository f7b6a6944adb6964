"""What the normalisers leave alone: a key the answer lacks is not a key that is null."""

from __future__ import annotations

from harness.reference.check import compare_case
from harness.reference.normalize import normalize_run_code
from harness.reference.suite import Answer, Case


def test_run_code_keeps_an_absent_result_absent() -> None:
    assert normalize_run_code({"status": "Success", "message": ""}) == {"status": "Success", "message": ""}
    normalised = normalize_run_code({"status": "Success", "run_result": {"stdout": "x", "execution_time": 0.1}})
    assert normalised == {"status": "Success", "run_result": {"stdout": "x"}}
    assert normalize_run_code({"status": "Success", "compile_result": None}) == {
        "status": "Success",
        "compile_result": None,
    }


def test_a_missing_result_differs_from_a_null_one() -> None:
    case = Case("01_print", "sandbox-fusion", "POST", "/run_code", normalize="run_code")
    recorded = {"status": 200, "body": {"status": "Success", "compile_result": None, "run_result": None}}
    result = compare_case(case, recorded, Answer(200, {"status": "Success"}), [])
    assert result.outcome == "failed"
    assert {d.path for d in result.differences} == {"body.compile_result", "body.run_result"}
