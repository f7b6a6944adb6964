"""The sweep of a sandbox uid from the server's event loop, whichever loop the server runs on."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from emulator.executor.sweep import sweep_uid_async

uvloop = pytest.importorskip("uvloop", reason="uvloop is uvicorn's loop wherever it is installed")

UID = 231_100


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need root")
@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_the_sweep_kills_every_process_of_the_uid(run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    """uvloop refuses ``create_subprocess_exec(user=...)``: the sweep raised ValueError there (a Daytona command in a
    sandbox whose uid had a leftover answered 500)."""
    leftover = subprocess.Popen(["sleep", "60"], user=UID, start_new_session=True)
    bystander = subprocess.Popen(["sleep", "60"], user=UID + 1, start_new_session=True)
    try:
        run(sweep_uid_async(UID))
        assert leftover.wait(timeout=10) == -9
        assert bystander.poll() is None  # another uid's process is not touched
    finally:
        for process in (leftover, bystander):
            process.kill()
            process.wait()
