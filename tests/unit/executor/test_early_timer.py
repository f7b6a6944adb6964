"""A timeout timer that fires early must not end a program before its deadline.

uvloop counts timers in whole milliseconds, so a 50 ms timeout could fire after 49.x ms: the kill
then landed before the deadline and the run read as ``Finished`` with return code -9 instead of
``TimeLimitExceeded`` (about 2 runs in 100 of a C++ compile with ``compile_timeout`` 0.05).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable
from typing import Any

from emulator.executor import ExecutionRequest, Executor, ExecutorConfig

_EARLY = 0.03


class EarlyTimerLoop(asyncio.SelectorEventLoop):
    """An event loop whose timers fire ``_EARLY`` seconds before they are due."""

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.TimerHandle:
        return super().call_at(when - _EARLY, callback, *args, context=context)


async def _run_sleeper(mode: str, timeout: float) -> tuple[str, int | None, float | None]:
    executor = Executor(ExecutorConfig(python_mode=mode))  # type: ignore[arg-type]
    await executor.start()
    try:
        with executor.workdir() as wd:
            script = wd.new_script(".py")
            wd.write_file(os.path.basename(script), b"import time\ntime.sleep(30)\n")
            result = await executor.run(
                ExecutionRequest(
                    argv=[executor.config.python, script], cwd=wd.path, timeout=timeout, python_script=script
                )
            )
    finally:
        await executor.aclose()
    return result.status, result.return_code, result.execution_time


def test_a_timer_firing_early_still_ends_the_run_as_a_time_limit() -> None:
    loop = EarlyTimerLoop()
    try:
        for mode in ("fast", "faithful"):
            status, rc, took = loop.run_until_complete(_run_sleeper(mode, 0.1))
            assert (status, rc) == ("TimeLimitExceeded", None), mode
            assert took is not None and took >= 0.1, mode
    finally:
        loop.close()
