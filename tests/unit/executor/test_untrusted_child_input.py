"""What a program can write that the warm interpreter reads: nothing in it may bring the warm interpreter down.

A fast-path program runs in a fork of the warm interpreter, so it can reach the interpreter's objects by walking up
its frames, among them the page it shares with its parent to report which memory pages it touched (the sampled
children teach the warm interpreter which pages to copy ahead). A page forged with a count of zero made the parent
index past its bit array: the warm interpreter died, and every run then in flight ended as an error.
"""

from __future__ import annotations

import asyncio

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig

from .conftest import Runner
from .test_private_tmp import _one_shot

FORGE = """import os, struct, sys
job = sys._getframe().f_back.f_globals.get("_job")
if job is not None and job.learn is not None:
    struct.pack_into("<II", job.done, 8, 0x4C45524E, 0)  # the lesson's magic, then a bit count of 0
    print("forged")
    sys.stdout.flush()
    os._exit(0)
print("plain")
"""


async def _run(executor: Executor, code: str, timeout: float = 10.0) -> ExecutionResult:
    with executor.workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(script.rsplit("/", 1)[-1], code.encode())
        request = ExecutionRequest(
            argv=[executor.config.python, script], cwd=wd.path, timeout=timeout, python_script=script
        )
        return await executor.run(request)


def test_a_forged_lesson_page_is_ignored() -> None:
    async def scenario() -> tuple[list[ExecutionResult], ExecutionResult]:
        async with Executor(ExecutorConfig(python_mode="fast")) as executor:  # a fresh one samples its early forks
            forged = [await _run(executor, FORGE) for _ in range(8)]
            return forged, await _run(executor, "print('after')")

    forged, after = asyncio.run(scenario())
    assert [r.status for r in forged] == ["Finished"] * 8, [r.stderr for r in forged]
    assert "forged\n" in [r.stdout for r in forged]  # a sampled child did forge its page
    assert (after.status, after.stdout) == ("Finished", "after\n"), after.stderr


def test_a_file_asked_for_many_times_is_read_once(runner: Runner) -> None:
    """70 requests for one 64 MiB file were 4.4 GB of answer: past a frame's 32-bit length, the warm interpreter
    died (and every run in flight with it). Each name is now read and sent once."""
    code = "open('f', 'wb').write(bytes(range(256)) * (1 << 18))\nprint('written')"
    result, _ = runner.call(_one_shot(runner.executor, code, fetch=("f",) * 70))
    assert (result.status, result.stdout) == ("Finished", "written\n"), result.stderr
    assert result.files is not None and list(result.files) == ["f"]
    assert result.files["f"] == bytes(range(256)) * (1 << 18)
