"""The /run_code answer is built as a dict by hand; it must be exactly what the pydantic models would send.

A scripted executor returns arbitrary results (hypothesis); the runner's payload must be a fixed point of
``RunCodeResponse`` (validate, dump: same keys, same order, same values, same JSON bytes), and the status rule must
be the real server's.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.executor import DeferredWorkdir, ExecutionRequest, ExecutionResult, Workdir
from emulator.sandbox_fusion.models import CommandRunResult, CommandRunStatus, RunCodeRequest, RunCodeResponse
from emulator.sandbox_fusion.routes import json_bytes
from emulator.sandbox_fusion.runners import CodeRunner, command_payload

_TEXT = st.text(max_size=20)
_RESULTS = st.one_of(
    st.builds(
        ExecutionResult,
        status=st.sampled_from(["Finished", "TimeLimitExceeded"]),
        execution_time=st.floats(min_value=0, max_value=1e4),
        return_code=st.one_of(st.none(), st.integers(-255, 255)),
        stdout=_TEXT,
        stderr=_TEXT,
    ),
    st.builds(ExecutionResult, status=st.just("Error"), execution_time=st.none(), return_code=st.none(),
              stdout=st.none(), stderr=_TEXT),
)  # fmt: skip


class ScriptedExecutor:
    """Answers each run with the next scripted result; work dirs under a private temp dir."""

    def __init__(self, results: Sequence[ExecutionResult], root: str) -> None:
        self.results = list(results)
        self.root = root

    def deferred_workdir(self) -> DeferredWorkdir:
        return DeferredWorkdir(self.root)

    def workdir(self) -> Workdir:
        return Workdir(self.root)

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        return self.results.pop(0)


def _ordered(value: Any) -> Any:
    """A value with every dict as its list of items, so that key order counts in comparisons."""
    if isinstance(value, dict):
        return [(key, _ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def _answer(language: str, results: Sequence[ExecutionResult], pod: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        runner = CodeRunner(ScriptedExecutor(results, root), "python3", pod)  # type: ignore[arg-type]
        request = RunCodeRequest(code="print(1)", language=language)  # type: ignore[arg-type]
        return asyncio.run(runner.run_payload(request))


def _carries(payload: dict[str, Any] | None, result: ExecutionResult, command: str) -> bool:
    """``payload`` is ``result`` on the wire; a failure to start names the command, which begins with ``command``."""
    if payload is None or result.status != "Error":
        return payload == command_payload(result, command)
    prefix, tail = f"exception on running command {command}", f": {result.stderr} | None"
    stderr = payload["stderr"]
    named = stderr.startswith(prefix) and stderr.endswith(tail) and ":" not in stderr[len(prefix) : -len(tail)]
    return named and {**payload, "stderr": None} == {**command_payload(result, command), "stderr": None}


@settings(max_examples=200, deadline=None)
@given(result=_RESULTS)
def test_command_payload_is_the_models_dump(result: ExecutionResult) -> None:
    payload = command_payload(result, "python /tmp/tmpabc/tmpdef.py")
    if result.status == "Error":
        stderr = f"exception on running command python /tmp/tmpabc/tmpdef.py: {result.stderr} | None"
        model = CommandRunResult(status=CommandRunStatus.Error, stderr=stderr)
    else:
        model = CommandRunResult(
            status=CommandRunStatus(result.status),
            execution_time=result.execution_time,
            return_code=result.return_code,
            stdout=result.stdout,
            stderr=result.stderr,
        )
    assert _ordered(payload) == _ordered(model.model_dump(mode="json"))
    assert json_bytes(payload) == json_bytes(model.model_dump(mode="json"))


@settings(max_examples=100, deadline=None)
@given(
    compiled=st.booleans(),
    first=_RESULTS,
    second=_RESULTS,
    pod=st.one_of(st.none(), st.just("pod-1")),
)
def test_answer_is_a_fixed_point_of_the_response_model(
    compiled: bool, first: ExecutionResult, second: ExecutionResult, pod: str | None
) -> None:
    payload = _answer("cpp" if compiled else "python", [first, second], pod)
    dumped = RunCodeResponse.model_validate(payload).model_dump(mode="json")
    assert _ordered(payload) == _ordered(dumped)
    assert json_bytes(payload) == json_bytes(dumped)

    compile_result, run_result = (payload["compile_result"], payload["run_result"])
    if not compiled:
        assert compile_result is None and _carries(run_result, first, "python ")
    elif first.status == "Finished" and first.return_code == 0:
        assert _carries(compile_result, first, "g++ -std=c++17 ") and _carries(run_result, second, "./test")
    else:  # a failed compile: nothing runs
        assert _carries(compile_result, first, "g++ -std=c++17 ") and run_result is None
    results = [r for r in (compile_result, run_result) if r is not None]
    errors = [r for r in results if r["status"] == "Error"]
    if errors:
        assert (payload["status"], payload["message"]) == ("SandboxError", errors[0]["stderr"])
    elif any(r["status"] == "TimeLimitExceeded" or r["return_code"] not in (None, 0) for r in results):
        assert (payload["status"], payload["message"]) == ("Failed", "")
    else:
        assert (payload["status"], payload["message"]) == ("Success", "")
    assert payload["executor_pod_name"] == pod
    assert payload["files"] == {}


def test_a_runner_exception_is_a_sandbox_error_answer() -> None:
    payload = _answer("python", [], None)  # the scripted executor has nothing to answer: IndexError
    assert payload["status"] == "SandboxError"
    assert payload["message"].startswith("exception on running code print(1): ") and payload["message"].endswith(
        " None"
    )
    assert (payload["compile_result"], payload["run_result"], payload["files"]) == (None, None, {})
    assert _ordered(payload) == _ordered(RunCodeResponse.model_validate(payload).model_dump(mode="json"))
