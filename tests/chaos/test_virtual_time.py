"""Virtual time: idle waits cost no wall time, real work keeps real time, and the emulator shares the clients' clock.

The outage tests run the project's tools against an emulator served inside the same virtual-time loop: ten minutes
of refusals with ``Retry-After: 60`` pass in a fraction of a second, and the journal (virtual timestamps) shows the
client waited out every ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from emulator.faults.bodies import DAYTONA_429_BODY
from emulator.journal import JournalEntry
from harness.chaos.inloop import InLoopEmulator, in_loop_emulator
from harness.chaos.vtime import LoopClock, VirtualTime, VirtualTimeLoop, run_virtual

OUTAGE_REFUSALS = 10
RETRY_AFTER = 60
MAX_JITTER = 2.0
#: Retries enough to outlast the outage, a Retry-After cap above the one the outage sends, jitter of at most 2 s.
OUTAGE_RETRY = {
    "max_attempts": OUTAGE_REFUSALS + 2,
    "max_retry_after": 2 * RETRY_AFTER,
    "base_delay": 0.5,
    "max_delay": MAX_JITTER,
}


def _loop() -> VirtualTimeLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    return loop


def _starts(entries: list[JournalEntry]) -> list[float]:
    return [e.started for e in entries]


def _gaps(entries: list[JournalEntry]) -> list[float]:
    starts = _starts(entries)
    return [b - a for a, b in itertools.pairwise(starts)]


# ---------------------------------------------------------------------------------------------- the loop alone


def test_a_long_sleep_returns_at_once_and_moves_the_clock_by_its_length() -> None:
    async def main() -> tuple[float, float]:
        loop = _loop()
        before = loop.time()
        await asyncio.sleep(600)
        return before, loop.time()

    started = time.perf_counter()
    before, after = run_virtual(main(), start=1000.0)
    real = time.perf_counter() - started
    assert before == 1000.0
    assert after - before == pytest.approx(600, abs=1e-6)
    assert real < 30  # not the 600 s a real clock takes (typically < 0.01 s; loose so a loaded machine never flakes)


def test_timers_fire_in_deadline_order_at_their_virtual_deadlines() -> None:
    async def main() -> list[tuple[int, float]]:
        loop = _loop()
        fired: list[tuple[int, float]] = []

        async def sleeper(seconds: int) -> None:
            await asyncio.sleep(seconds)
            fired.append((seconds, loop.time()))

        await asyncio.gather(*(sleeper(s) for s in (300, 5, 3600, 60)))
        return fired

    assert run_virtual(main()) == [(5, 5.0), (60, 60.0), (300, 300.0), (3600, 3600.0)]


def test_timeouts_fire_on_virtual_time() -> None:
    async def main() -> float:
        loop = _loop()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=120)
        return loop.time()

    assert run_virtual(main()) == pytest.approx(120)


def test_a_thread_keeps_real_time_and_the_clock_follows_it() -> None:
    """While ``to_thread`` work runs the loop waits for it in real time, even with a far timer pending."""

    async def main() -> tuple[float, float, float]:
        loop = _loop()
        far = asyncio.ensure_future(asyncio.sleep(500))
        await asyncio.to_thread(time.sleep, 0.1)
        at_thread_end = loop.time()
        await far
        return at_thread_end, loop.time(), loop.real_waited

    at_thread_end, end, waited = run_virtual(main())
    # The far timer was not jumped to while the thread ran; the clock moved by about the real wait (time spent in
    # callbacks rather than in the selector is not counted, hence the margin).
    assert 0.08 <= at_thread_end < 5
    assert end == pytest.approx(500)
    assert waited >= 0.08


def test_hold_makes_waits_real() -> None:
    async def main() -> tuple[float, float]:
        loop = _loop()
        started = time.perf_counter()
        with loop.hold():
            await asyncio.sleep(0.05)
        return loop.time(), time.perf_counter() - started

    virtual, real = run_virtual(main())
    assert real >= 0.05
    assert 0.04 <= virtual < 5


def test_busy_checks_block_jumps_until_they_clear() -> None:
    async def main() -> tuple[float, float]:
        loop = _loop()
        busy = [True]
        remove = loop.add_busy_check(lambda: busy[0])
        loop.call_soon(lambda: loop.call_later(0, lambda: None))  # keep the loop turning
        real_flip = asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.05)
        real_flip.add_done_callback(lambda _: busy.__setitem__(0, False))
        timer = asyncio.ensure_future(asyncio.sleep(1000))
        await real_flip
        flipped_at = loop.time()
        await timer
        remove()
        return flipped_at, loop.time()

    flipped_at, end = run_virtual(main())
    assert flipped_at < 5
    assert end == pytest.approx(1000)


def test_virtual_time_runs_several_coroutines_on_one_loop() -> None:
    with VirtualTime(start=10.0) as vt:
        assert vt.now() == 10.0
        vt.run(asyncio.sleep(50))
        assert vt.now() == pytest.approx(60)
        assert vt.run(_after(30, lambda: vt.loop.time())) == pytest.approx(90)
    with pytest.raises(RuntimeError, match="closed"):
        _ = vt.loop


async def _after(seconds: float, read: Callable[[], float]) -> float:
    await asyncio.sleep(seconds)
    return read()


def test_loop_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="settle"):
        VirtualTimeLoop(settle=-1)


def test_loop_clock_reads_the_loop() -> None:
    async def main() -> tuple[float, float]:
        clock = LoopClock()
        before = clock.monotonic()
        await clock.sleep(42)
        return before, clock.monotonic()

    assert run_virtual(main(), start=7.0) == (7.0, pytest.approx(49.0))


# ---------------------------------------------------------------------------------------------- the emulator


def _run_in_loop(faults: Any, body: Callable[[InLoopEmulator], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with in_loop_emulator(faults) as emu:
            return await body(emu)

    return run_virtual(main())


def test_injected_latency_and_hangs_are_virtual() -> None:
    plan = {
        "rules": [
            {"route": "sandbox_fusion.ping", "latency": 300},
            {"route": "sandbox_fusion.run_code", "fault": {"hang": {"seconds": 900, "then": 504}}},
        ]
    }

    async def body(emu: InLoopEmulator) -> tuple[list[float | None], float]:
        started = time.perf_counter()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
            async with session.get(emu.url + "/v1/ping") as response:
                assert response.status == 200
            payload = {"code": "print(1)", "language": "python"}
            async with session.post(emu.run_code_url, json=payload) as response:
                assert response.status == 504
        return [e.duration for e in emu.journal.entries()], time.perf_counter() - started

    durations, real = _run_in_loop(plan, body)
    assert durations == [pytest.approx(300), pytest.approx(900)]
    assert real < 30  # not the 1,200 s of a real clock (typically < 0.1 s)


def test_a_program_held_through_a_virtual_latency_runs_after_it() -> None:
    """run_code readies its sandbox during the latency and starts the program when the (virtual) 600 s are over."""
    plan = {"rules": [{"route": "sandbox_fusion.run_code", "latency": 600}]}

    async def body(emu: InLoopEmulator) -> tuple[int, str, list[float | None], float]:
        started = time.perf_counter()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
            payload = {"code": "print(6 * 7)", "language": "python"}
            async with session.post(emu.run_code_url, json=payload) as response:
                answer = await response.json()
        durations = [e.duration for e in emu.journal.entries()]
        return response.status, answer["run_result"]["stdout"], durations, time.perf_counter() - started

    status, stdout, durations, real = _run_in_loop(plan, body)
    assert (status, stdout) == (200, "42\n")
    assert durations == [pytest.approx(600, abs=1)]
    assert real < 30


def test_in_loop_emulator_serves_on_an_ordinary_loop_in_real_time() -> None:
    async def main() -> tuple[int, str, float]:
        async with in_loop_emulator() as emu:
            async with aiohttp.ClientSession() as session:
                payload = {"code": "print(6 * 7)", "language": "python"}
                async with session.post(emu.run_code_url, json=payload) as response:
                    body = await response.json()
            [entry] = emu.journal.entries()
            return response.status, body["run_result"]["stdout"], entry.started

    before = time.monotonic()
    status, stdout, started = asyncio.run(main())
    after = time.monotonic()
    assert (status, stdout) == (200, "42\n")
    # The ordinary loop's clock is time.monotonic (a virtual one would start from 0): the entry began in this run.
    assert before <= started <= after


def test_a_real_execution_is_not_cut_short_by_a_virtual_jump() -> None:
    """A program sleeping 0.2 s of real time runs to the end while another task sleeps 1000 virtual seconds."""
    code = "import time\nt = time.monotonic()\ntime.sleep(0.2)\nprint(time.monotonic() - t)"

    async def body(emu: InLoopEmulator) -> dict[str, Any]:
        loop = _loop()
        order: list[str] = []

        async def sleeper() -> None:
            await asyncio.sleep(1000)
            order.append("sleeper")

        async def execute() -> dict[str, Any]:
            payload = {"code": code, "language": "python", "run_timeout": 10}
            timeout = aiohttp.ClientTimeout(total=30)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(emu.run_code_url, json=payload) as response,
            ):
                answer: dict[str, Any] = json.loads(await response.text())
            order.append("execution")
            return answer

        started = loop.time()
        answer, _ = await asyncio.gather(execute(), sleeper())
        [entry] = emu.journal.entries("sandbox_fusion.run_code")
        return {"answer": answer, "order": order, "entry": entry, "elapsed": loop.time() - started}

    real_started = time.perf_counter()
    out = _run_in_loop(None, body)
    real = time.perf_counter() - real_started
    run_result = out["answer"]["run_result"]
    assert run_result["status"] == "Finished"
    # It slept its whole 0.2 s of real time (how much longer is the machine's: never more than the test took).
    assert 0.2 <= float(run_result["stdout"]) <= real
    assert out["order"] == ["execution", "sleeper"]
    entry = out["entry"]
    assert entry.status == 200
    # The clock followed real time while the program ran (callback time aside), and never jumped past it.
    assert 0.15 <= entry.duration < 10
    assert out["elapsed"] == pytest.approx(1000, abs=1)
    assert real < 5


def test_a_program_timeout_still_fires_after_its_real_duration() -> None:
    async def body(emu: InLoopEmulator) -> tuple[dict[str, Any], float]:
        payload = {"code": "import time\ntime.sleep(30)", "language": "python", "run_timeout": 0.3}
        started = time.perf_counter()
        async with aiohttp.ClientSession() as session, session.post(emu.run_code_url, json=payload) as response:
            answer: dict[str, Any] = await response.json()
        return answer, time.perf_counter() - started

    answer, real = _run_in_loop(None, body)
    assert answer["run_result"]["status"] == "TimeLimitExceeded"
    assert 0.3 <= real < 5


# ---------------------------------------------------------------------------------------------- the tools


def test_sandbox_fusion_tool_waits_out_a_ten_minute_outage() -> None:
    pytest.importorskip("verl", reason="needs the [verl] extra")
    from harness.tools.sandbox_fusion import SandboxFusionTool

    plan = {
        "seed": 3,
        "rules": [
            {
                "id": "outage",
                "route": "sandbox_fusion.run_code",
                "attempts": f"1-{OUTAGE_REFUSALS}",
                "fault": {"status": 503, "retry_after": RETRY_AFTER},
            }
        ],
    }

    async def body(emu: InLoopEmulator) -> dict[str, Any]:
        tool = SandboxFusionTool(
            {"sandbox_fusion_url": emu.run_code_url, "rate_limiter": {"backend": "local"}, "retry": OUTAGE_RETRY}
        )
        try:
            instance_id, _ = await tool.create()
            virtual_started, real_started = emu.now(), time.perf_counter()
            response, _, metrics = await tool.execute(instance_id, {"code": "print(6 * 7)"})
            real = time.perf_counter() - real_started
            virtual = emu.now() - virtual_started
            await tool.release(instance_id)
        finally:
            await tool.aclose()
        return {"text": response.text, "metrics": metrics, "real": real, "virtual": virtual, "emu": emu}

    out = _run_in_loop(plan, body)
    print(f"SandboxFusionTool, 10-minute outage: {out['virtual']:.1f} virtual s in {out['real']:.3f} real s")
    assert out["text"] == "42\n"
    assert out["metrics"]["attempts"] == OUTAGE_REFUSALS + 1
    assert out["virtual"] >= OUTAGE_REFUSALS * RETRY_AFTER
    assert out["real"] < 30  # not the 600 s of a real clock (typically ~0.1 s)
    entries = out["emu"].journal.entries("sandbox_fusion.run_code")
    assert [e.status for e in entries] == [503] * OUTAGE_REFUSALS + [200]
    assert [e.attempt for e in entries] == list(range(1, OUTAGE_REFUSALS + 2))
    gaps = _gaps(entries)
    # Waited Retry-After each time, and no more than the retry policy's jitter beyond it.
    assert all(RETRY_AFTER <= gap <= RETRY_AFTER + MAX_JITTER + 0.5 for gap in gaps), gaps


def test_daytona_tool_waits_out_ten_minutes_of_create_throttling() -> None:
    pytest.importorskip("verl", reason="needs the [verl] extra")
    daytona = pytest.importorskip("daytona", reason="needs the [daytona] extra")
    from harness.tools.daytona import DaytonaTool

    assert daytona.AsyncDaytona is not None  # the SDK loads its client lazily (seconds of imports): not timed here

    plan = {
        "seed": 3,
        "rules": [
            {
                "id": "throttled",
                "route": "daytona.sandbox.create",
                "requests": f"1-{OUTAGE_REFUSALS}",
                "fault": {
                    "status": 429,
                    "headers": {"Retry-After-sandbox-create": str(RETRY_AFTER)},
                    "body": DAYTONA_429_BODY,
                },
            }
        ],
    }

    async def body(emu: InLoopEmulator) -> dict[str, Any]:
        config = {
            "api_url": emu.daytona_api_url,
            "api_key": emu.daytona_api_key,
            "rate_limiter": {"backend": "local"},
            "retry": OUTAGE_RETRY,
        }
        tool = DaytonaTool(config)
        try:
            virtual_started, real_started = emu.now(), time.perf_counter()
            instance_id, _ = await tool.create()
            created = emu.now()
            response, _, metrics = await tool.execute(instance_id, {"code": "print(6 * 7)"})
            await tool.release(instance_id)
            real = time.perf_counter() - real_started
            virtual = emu.now() - virtual_started
            after_create = emu.now() - created
        finally:
            await tool.aclose()
        return {
            "text": response.text,
            "metrics": metrics,
            "real": real,
            "virtual": virtual,
            "after_create": after_create,
            "emu": emu,
        }

    out = _run_in_loop(plan, body)
    print(f"DaytonaTool, 10 minutes of 429 on create: {out['virtual']:.1f} virtual s in {out['real']:.3f} real s")
    assert out["text"] == "42\n" and out["metrics"]["status"] == "success"
    assert out["virtual"] >= OUTAGE_REFUSALS * RETRY_AFTER
    assert out["real"] < 30  # not the 600 s of a real clock (typically ~0.2 s)
    # Execution and deletion took no spurious virtual time (e.g. a jump over a WebSocket close).
    assert out["after_create"] < 5
    emu = out["emu"]
    creates = emu.journal.entries("daytona.sandbox.create")
    assert [e.status for e in creates] == [429] * OUTAGE_REFUSALS + [200]
    gaps = _gaps(creates)
    assert all(RETRY_AFTER <= gap <= RETRY_AFTER + MAX_JITTER + 0.5 for gap in gaps), gaps
    assert emu.emulator.daytona_report().leaked == []
