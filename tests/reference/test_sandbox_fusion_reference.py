"""Every recorded Sandbox Fusion answer, replayed against the emulator (or the live service given with
``--reference-url``) and compared after normalisation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from emulator.app import Emulator, EmulatorConfig
from emulator.executor import ExecutorConfig
from emulator.server import EmulatorServer
from harness.reference.normalize import KNOWN_DIVERGENCES, normalize_run_code
from harness.reference.runtimes import find_python

REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "sandbox_fusion"
# run_code_cases.json also carries the 3.10 recordings under "py310/..." keys; those run against a 3.10 runtime.
CASES: dict[str, dict[str, Any]] = {
    k: v for k, v in json.loads((REFERENCE / "run_code_cases.json").read_text()).items() if not k.startswith("py310/")
}
CASES_310: dict[str, dict[str, Any]] = json.loads((REFERENCE / "run_code_cases_py310.json").read_text())
OTHER: dict[str, Any] = json.loads((REFERENCE / "other_cases.json").read_text())


def _post(url: str, payload: Any) -> requests.Response:
    return requests.post(url, json=payload, timeout=60)


@pytest.mark.parametrize("case_id", sorted(set(CASES) - set(KNOWN_DIVERGENCES)))
def test_recorded_run_code_case(case_id: str, reference_sandbox_fusion_url: str) -> None:
    case = CASES[case_id]
    answer = _post(reference_sandbox_fusion_url + "/run_code", case["request"])
    assert answer.status_code == case["http_status"]
    assert normalize_run_code(answer.json()) == normalize_run_code(case["response"])


def test_numpy_under_memory_limit_fails_like_the_real_server(reference_sandbox_fusion_url: str) -> None:
    """Case 32: OpenBLAS cannot start threads under the 1 GiB stack quirk, then dies by SIGINT."""
    case = CASES["32_numpy_with_memlimit_1024"]
    got = _post(reference_sandbox_fusion_url + "/run_code", case["request"]).json()
    want = case["response"]
    assert got["status"] == want["status"] == "Failed"
    assert got["run_result"]["status"] == "Finished"
    assert got["run_result"]["return_code"] == want["run_result"]["return_code"] == -2
    stderr = got["run_result"]["stderr"]
    assert stderr.startswith("OpenBLAS blas_thread_init: pthread_create failed for thread 1 of")
    assert stderr.rstrip("\n").endswith("KeyboardInterrupt")


@pytest.fixture(scope="module")
def py310_server() -> Iterator[EmulatorServer]:
    python = find_python("3.10")
    if python is None:
        pytest.skip("no Python 3.10 interpreter on this machine to compare the 3.10 recordings with")
    emulator = Emulator(EmulatorConfig(executor=ExecutorConfig(python=python)))
    with EmulatorServer(emulator) as server:
        yield server


@pytest.mark.parametrize("case_id", sorted(CASES_310))
def test_recorded_py310_case(case_id: str, py310_server: EmulatorServer) -> None:
    case = CASES_310[case_id]
    answer = _post(py310_server.run_code_url, case["request"])
    assert answer.status_code == 200
    assert normalize_run_code(answer.json()) == normalize_run_code(case["response"])


def _raw_case(name: str) -> tuple[Any, int]:
    text, _, status = OTHER["raw_http_cases"][name].rpartition(" [")
    return json.loads(text), int(status.rstrip("]"))


def test_malformed_json(reference_sandbox_fusion_url: str) -> None:
    want, status = _raw_case("23_malformed_json")
    answer = requests.post(
        reference_sandbox_fusion_url + "/run_code",
        data=b'{"code": "print(1)", "language": }',
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert (answer.status_code, answer.json()) == (status, want)


def test_get_run_code_is_405(reference_sandbox_fusion_url: str) -> None:
    want, status = _raw_case("24_get_run_code")
    answer = requests.get(reference_sandbox_fusion_url + "/run_code", timeout=30)
    assert (answer.status_code, answer.json()) == (status, want)


def test_unknown_path_is_404(reference_sandbox_fusion_url: str) -> None:
    want, status = _raw_case("25_404")
    answer = requests.post(reference_sandbox_fusion_url + "/no_such_route", json={}, timeout=30)
    assert (answer.status_code, answer.json()) == (status, want)


def test_form_content_type_is_validated_as_text(reference_sandbox_fusion_url: str) -> None:
    want, status = _raw_case("26_no_content_type")
    answer = requests.post(
        reference_sandbox_fusion_url + "/run_code",
        data=b'{"code":"print(1)","language":"python"}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
    )
    assert (answer.status_code, answer.json()) == (status, want)


def test_run_jupyter_answer_is_the_recorded_one(reference_sandbox_fusion_url: str) -> None:
    """The whole answer, the kernel's warning and IPython's ANSI traceback included; only the time differs."""
    recorded = json.loads(OTHER["run_jupyter"].rpartition(" [")[0])
    cells = json.loads(recorded["driver"]["stdout"].split("config: \n", 1)[1])["cells"]
    answer = requests.post(reference_sandbox_fusion_url + "/run_jupyter", json={"cells": cells}, timeout=60)
    assert answer.status_code == 200
    got = answer.json()
    assert isinstance(got["driver"].pop("execution_time"), float)
    recorded["driver"].pop("execution_time")
    assert json.dumps(got) == json.dumps(recorded)  # the keys' order too
