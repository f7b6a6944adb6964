"""A sandbox deleted while its interpreter process is still starting: the run must not go on in a process nobody
tracks any more (it would run to its timeout, with its sandbox gone)."""

from __future__ import annotations

import asyncio
import sys
import tempfile

import pytest

from emulator.daytona.interpreter import Interpreters, InterpreterSettings


def test_run_whose_sandbox_goes_while_its_process_starts_is_stopped() -> None:
    async def scenario() -> None:
        interpreters = Interpreters(InterpreterSettings(python=sys.executable, uid_base=None, uid_count=1))
        with tempfile.TemporaryDirectory() as home:
            context = interpreters.default("sbx", home, {})

            async def ignore(frame: dict[str, str]) -> None:
                return None

            run = asyncio.ensure_future(interpreters.run(context, "while True:\n    pass", {}, 30.0, ignore))
            await asyncio.sleep(0)  # the run is now inside the process start, its first suspension
            assert context.process is None
            interpreters.drop_sandbox("sbx")
            with pytest.raises(RuntimeError, match="context deleted"):
                await asyncio.wait_for(run, 10)
            assert context.process is None and interpreters.live_processes() == 0

    asyncio.run(scenario())
