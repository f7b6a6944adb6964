"""A request's own output capture: read to the end (a writer never blocks), a bound kept, its own decoding; the
default stays Sandbox Fusion's (truncated, a bigger writer blocked until its timeout, ``[DecodeError]``)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from emulator.executor import (
    KEEP_BYTES,
    SANDBOX_FUSION_CAPTURE,
    ExecutionRequest,
    ExecutionResult,
    OutputCapture,
)

from .conftest import Runner, dead

#: Read to the end, a small bound kept (so a test need not write megabytes to pass it).
DRAIN = OutputCapture(keep=1000, absorb=None)


async def _arun(runner: Runner, code: str, capture: OutputCapture, timeout: float = 10.0) -> ExecutionResult:
    with runner.executor.workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code.encode())
        request = ExecutionRequest(
            argv=[runner.executor.config.python, script],
            cwd=wd.path,
            timeout=timeout,
            python_script=script,
            capture=capture,
        )
        return await runner.executor.run(request)


def _run(runner: Runner, code: str, capture: OutputCapture, timeout: float = 10.0) -> ExecutionResult:
    result = runner.call(_arun(runner, code, capture, timeout))
    assert isinstance(result, ExecutionResult)
    return result


def test_the_default_is_sandbox_fusions() -> None:
    assert ExecutionRequest(argv=["true"], cwd="/", timeout=1).capture is SANDBOX_FUSION_CAPTURE
    assert (SANDBOX_FUSION_CAPTURE.keep, SANDBOX_FUSION_CAPTURE.absorb) == (KEEP_BYTES, 448 * 1024)


@pytest.mark.parametrize(("keep", "absorb"), [(-1, None), (1000, -1), (True, None), (1.5, None), (10, "x")])
def test_a_bad_capture_is_refused(keep: object, absorb: object) -> None:
    with pytest.raises(ValueError, match="OutputCapture"):
        OutputCapture(keep=keep, absorb=absorb)  # type: ignore[arg-type]


def test_a_writer_past_the_sandbox_fusion_budget_is_not_blocked(runner: Runner) -> None:
    """3 MB on each stream (Sandbox Fusion's capture blocks the writer until its timeout): read to the end, the
    first ``keep`` bytes of each kept."""
    code = "import sys\nsys.stdout.write('a' * 3_000_000)\nsys.stderr.write('b' * 3_000_000)\nprint('end')"
    start = time.monotonic()
    got = _run(runner, code, DRAIN, timeout=20)
    assert (got.status, got.return_code) == ("Finished", 0)
    assert (got.stdout, got.stderr) == ("a" * 1000, "b" * 1000)
    assert time.monotonic() - start < 10


def test_output_within_the_bound_is_whole(runner: Runner) -> None:
    got = _run(runner, "print('x' * 998)", DRAIN)
    assert (got.status, got.stdout) == ("Finished", "x" * 998 + "\n")
    whole = OutputCapture(keep=2_000_000, absorb=None)
    got = _run(runner, "print('x' * 1_000_000)", whole)
    assert (got.status, got.stdout) == ("Finished", "x" * 1_000_000 + "\n")


def test_a_program_not_python_is_read_to_the_end(runner: Runner) -> None:
    async def go() -> ExecutionResult:
        with runner.executor.workdir() as wd:
            request = ExecutionRequest(
                argv=["/bin/bash", "-c", "head -c 2000000 /dev/zero | tr '\\0' z; echo done >&2"],
                cwd=wd.path,
                timeout=20,
                capture=DRAIN,
            )
            return await runner.executor.run(request)

    got = runner.call(go())
    assert (got.status, got.return_code, got.stdout, got.stderr) == ("Finished", 0, "z" * 1000, "done\n")


def test_an_endless_writer_costs_no_memory_and_holds_up_no_other_run(runner: Runner) -> None:
    """Read to the end, a writer that never stops keeps the zygote reading: the bound holds (what is past it is
    dropped), its timeout ends it, and the zygote's other runs go on meanwhile."""

    async def go() -> tuple[ExecutionResult, list[float]]:
        endless = asyncio.ensure_future(_arun(runner, "while True: print('y' * 4095)", DRAIN, timeout=3))
        await asyncio.sleep(0.5)
        took = []
        for _ in range(3):
            start = time.monotonic()
            quick = await _arun(runner, "print('quick')", SANDBOX_FUSION_CAPTURE)
            assert (quick.status, quick.stdout) == ("Finished", "quick\n")
            took.append(time.monotonic() - start)
        return await endless, took

    got, took = runner.call(go())
    assert (got.status, got.return_code) == ("TimeLimitExceeded", None)
    assert got.stdout == "y" * 1000
    assert max(took) < 2.0, took


def test_the_request_decodes_its_output(runner: Runner) -> None:
    """Its own decoding, for each stream (the default turns a stream that is not UTF-8 into ``[DecodeError]``)."""
    code = "import sys\nsys.stdout.buffer.write(b'a\\xffb')\nsys.stderr.buffer.write(b'\\xfe')"
    got = _run(runner, code, OutputCapture(keep=1000, absorb=None, decode=bytes.hex))
    assert (got.stdout, got.stderr) == ("61ff62", "fe")
    got = _run(runner, code, SANDBOX_FUSION_CAPTURE)
    assert (got.stdout or "").startswith("[DecodeError] 'utf-8' codec can't decode byte 0xff in position 1")


def test_a_large_capture_is_not_in_the_programs_forked_meanwhile(both: dict[str, Runner]) -> None:
    """A capture kept past Sandbox Fusion's size lives out of the warm interpreter's heap: the programs it forks while
    it holds 30 MB of another's output do not get those 30 MB in their address space (where they would count against
    a memory limit). Only the fast path forks programs from the warm interpreter."""
    runner = both["fast"]
    size = "import re\nprint(re.search(r'VmSize:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"
    holder_code = (
        "import sys, time\nsys.stdout.write('x' * 30_000_000)\nsys.stdout.flush()\ntime.sleep(2)\nprint('done')"
    )

    async def scenario() -> tuple[list[int], int, ExecutionResult]:
        holder = asyncio.ensure_future(_arun(runner, holder_code, OutputCapture(keep=64 << 20, absorb=None)))
        during = []
        while not holder.done():
            during.append(int((await _arun(runner, size, DRAIN)).stdout or "0"))
        after = int((await _arun(runner, size, DRAIN)).stdout or "0")
        return during, after, await holder

    during, after, held = runner.call(scenario())
    assert held.return_code == 0 and len(held.stdout or "") == 30_000_005, held.stderr
    assert len(during) > 5
    assert max(during) - after < 10_000, (during, after)  # VmSize in kB: far less than the 30 MB held


#: A program that leaves a process holding its stdout, which prints after the program's exit.
LEAVES_A_WRITER = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({delay}); print(\"late\")'])\n"
    "print('fg', flush=True)\n"
)
UNTIL_CLOSED = OutputCapture(keep=1000, absorb=None, until_closed=True)


def test_until_closed_the_run_ends_when_every_holder_of_its_pipes_has_closed_them(runner: Runner) -> None:
    """Go's ``cmd.Wait`` (Daytona's daemon) waits for the output's pipes: what a process the program left writes
    before it closes them is part of the result, and the exit code is still the program's."""
    got = _run(runner, LEAVES_A_WRITER.format(delay=0.5) + "raise SystemExit(3)", UNTIL_CLOSED)
    assert (got.status, got.return_code, got.stdout) == ("Finished", 3, "fg\nlate\n"), got.stderr
    assert (got.execution_time or 0) >= 0.5  # it ended when the pipe closed, not at the program's exit


def test_by_default_a_run_ends_at_the_programs_exit(runner: Runner) -> None:
    """Sandbox Fusion's: the program's exit ends the run, what it left is killed then."""
    got = _run(runner, LEAVES_A_WRITER.format(delay=0.5), SANDBOX_FUSION_CAPTURE)
    assert (got.status, got.return_code, got.stdout) == ("Finished", 0, "fg\n"), got.stderr


def test_until_closed_the_timeout_still_ends_the_run(runner: Runner) -> None:
    start = time.monotonic()
    got = _run(runner, LEAVES_A_WRITER.format(delay=60), UNTIL_CLOSED, timeout=1.0)
    assert (got.status, got.return_code, got.stdout) == ("TimeLimitExceeded", None, "fg\n"), got.stderr
    assert time.monotonic() - start < 10


def test_until_closed_a_process_that_holds_no_pipe_does_not_hold_the_run(runner: Runner) -> None:
    """A background process with its output elsewhere (``nohup ... >/dev/null &``) leaves the pipes to close at the
    program's exit: the run ends then, and the process is killed with it, as every run's leftovers are."""
    code = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid)\n"
    )
    start = time.monotonic()
    got = _run(runner, code, UNTIL_CLOSED, timeout=30)
    assert (got.status, got.return_code) == ("Finished", 0), got.stderr
    assert time.monotonic() - start < 10
    assert dead(int(got.stdout or "0"))
