"""The unit plan's tool and rate-limiter items, run against verl 0.7.1's OWN ``SandboxFusionTool`` and
``TokenBucketWorker`` (built by 0.7.1's ``initialize_tools_from_config``) with the emulator as the sandbox.

The tool is driven directly (``create`` / ``execute`` / ``release``), not through ``ToolAgentLoop``: 0.7.1's loop
builds a fresh execution-pool actor per trajectory, and the defects live in the tool, not the loop.

Where 0.7.1 is wrong the test asserts the CORRECT behaviour and is a strict expected failure naming the defect
(``raises=AssertionError``: only the assertion may fail it, not a crash of the test itself); if 0.7.1 ever behaved
correctly the strict xfail would turn the run red. The emulator's journal shows what reached the sandbox.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from emulator.journal import Journal

RUN_CODE = "sandbox_fusion.run_code"
PRINT_2 = "print(1 + 1)"
LIMITER_ACTOR = "rate-limiter"  # verl 0.7.1's TokenBucketWorker, a named actor


def defect(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"verl 0.7.1 defect: {reason}")


async def call(tool: Any, code: str) -> Any:
    """One trajectory's use of the tool: create, execute, release. Returns ``execute``'s ToolResponse."""
    instance_id, _ = await tool.create()
    try:
        response, _reward, _metrics = await tool.execute(instance_id, {"code": code})
    finally:
        await tool.release(instance_id)
    return response


async def call_or_error(tool: Any, code: str) -> Any:
    try:
        return await call(tool, code)
    except Exception as exc:  # 0.7.1 may raise out of execute (RayTaskError)
        return exc


def limiter_count() -> int:
    import ray

    count: int = ray.get(ray.get_actor(LIMITER_ACTOR).get_current_count.remote())
    return count


def settled_limiter_count(timeout: float = 5.0) -> int:
    """The limiter's count once the fire-and-forget ``release.remote()`` calls have landed."""
    deadline = time.monotonic() + timeout
    count = limiter_count()
    while count and time.monotonic() < deadline:
        time.sleep(0.05)
        count = limiter_count()
    return count


def test_basic_tool_call(make_tools: Any, emulator_journal: Journal) -> None:
    (tool,) = make_tools({"rate_limit": 10})
    response = asyncio.run(call(tool, PRINT_2))
    assert response.text == "2\n"
    entries = emulator_journal.entries(RUN_CODE)
    assert [(e.status, e.outcome) for e in entries] == [(200, "ok")]


def test_stderr_is_appended_to_stdout(make_tools: Any) -> None:
    (tool,) = make_tools({"rate_limit": 10})
    response = asyncio.run(call(tool, "import sys\nprint('out')\nprint('err', file=sys.stderr)"))
    assert response.text == "out\nerr\n"


@defect("a 429 from the sandbox gateway is not retried; the model is shown 'no stdout here'")
@pytest.mark.faults({"rules": [{"id": "throttle", "route": RUN_CODE, "attempts": "1", "fault": {"status": 429}}]})
def test_429_is_retried(make_tools: Any, emulator_journal: Journal) -> None:
    (tool,) = make_tools({"rate_limit": 10})
    response = asyncio.run(call(tool, PRINT_2))
    statuses = [e.status for e in emulator_journal.entries(RUN_CODE)]
    # 0.7.1: statuses == [429] (one request, no retry) and response.text == "no stdout here".
    assert statuses == [429, 200], f"journal statuses {statuses}, observation {response.text!r}"
    assert response.text == "2\n"


@defect("enable_global_rate_limit: false crashes every call ('NoneType' object has no attribute 'release')")
def test_without_global_rate_limit(make_tools: Any, emulator_journal: Journal) -> None:
    (tool,) = make_tools({"enable_global_rate_limit": False})

    async def three() -> list[Any]:
        return [await call_or_error(tool, PRINT_2) for _ in range(3)]

    results = asyncio.run(three())
    reached = len(emulator_journal.entries(RUN_CODE))
    # 0.7.1: three RayTaskError(AttributeError), and not one request reached the sandbox (reached == 0).
    assert [getattr(r, "text", r) for r in results] == ["2\n"] * 3, f"results {results!r}; requests {reached}"
    assert reached == 3


@defect("two tool configs with different rate_limit share the one 'rate-limiter' actor; the first config wins silently")
def test_second_config_rate_limit_is_honoured(make_tools: Any, emulator_journal: Journal) -> None:
    import ray

    (first,) = make_tools({"rate_limit": 4})
    assert asyncio.run(call(first, PRINT_2)).text == "2\n"  # the first config has created "rate-limiter" (limit 4)
    (second,) = make_tools({"rate_limit": 1})
    emulator_journal.clear()

    async def burst() -> list[Any]:
        code = "import time\ntime.sleep(0.4)\nprint('x')"
        return await asyncio.gather(*(call(second, code) for _ in range(4)))

    try:
        results = asyncio.run(burst())
    except Exception as exc:  # a clear configuration error would also be correct
        assert "rate_limit" in str(exc) or "rate-limit" in str(exc), repr(exc)
        return
    assert [r.text for r in results] == ["x\n"] * 4
    seen = emulator_journal.max_in_flight(RUN_CODE)
    limiter = ray.get_actor(LIMITER_ACTOR)
    # 0.7.1: seen == 4, the first config's limit; the second tool asked for 1 and was never told.
    assert seen <= 1, f"second tool (rate_limit 1) had {seen} requests in flight at the sandbox; actor {limiter}"


@defect("an exception inside the execution is swallowed into an empty observation (ToolResponse(text=None))")
@pytest.mark.faults({"rules": [{"id": "null", "route": RUN_CODE, "fault": "null_stdout"}]})
def test_execution_exception_is_reported(make_tools: Any, emulator_journal: Journal) -> None:
    (tool,) = make_tools({"rate_limit": 10})
    response = asyncio.run(call(tool, PRINT_2))
    entries = emulator_journal.entries(RUN_CODE)
    assert [(e.status, e.fault) for e in entries] == [(200, "null_stdout")]  # the sandbox answered, stdout null
    # 0.7.1: `stdout + stderr` raised TypeError, the ExecutionWorker logged it and returned None: text is None.
    assert isinstance(response.text, str) and response.text, f"observation {response.text!r}"


class TestSingleNodeRateLimiter:
    """0.7.1's ``TokenBucketWorker`` as a single-node concurrency limit: correct, measured at the sandbox."""

    def test_rate_limit_is_the_in_flight_maximum(self, make_tools: Any, emulator_journal: Journal) -> None:
        limit, calls = 3, 12
        (tool,) = make_tools({"rate_limit": limit, "num_workers": 12})

        async def burst() -> list[Any]:
            return await asyncio.gather(
                *(call(tool, f"import time\ntime.sleep(0.2)\nprint({i})") for i in range(calls))
            )

        results = asyncio.run(burst())
        assert [r.text for r in results] == [f"{i}\n" for i in range(calls)]
        entries = emulator_journal.entries(RUN_CODE)
        assert len(entries) == calls and {e.status for e in entries} == {200}
        assert emulator_journal.max_in_flight(RUN_CODE) == limit  # reached, never passed
        assert settled_limiter_count() == 0

    @pytest.mark.faults({"rules": [{"id": "rot", "route": RUN_CODE, "requests": "1-4", "fault": "null_stdout"}]})
    def test_rotten_executions_give_their_permit_back(self, make_tools: Any, emulator_journal: Journal) -> None:
        (tool,) = make_tools({"rate_limit": 2})

        async def run() -> list[Any]:
            rotten = await asyncio.gather(*(call(tool, PRINT_2) for _ in range(4)))
            return [*rotten, await call(tool, PRINT_2)]

        results = asyncio.run(run())
        assert [r.text for r in results] == [None] * 4 + ["2\n"]  # rotten (see the xfail above), then a good one
        assert [e.fault for e in emulator_journal.entries(RUN_CODE)] == ["null_stdout"] * 4 + [None]
        assert settled_limiter_count() == 0  # every permit came back
