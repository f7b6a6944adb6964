"""Fixtures: one executor per path (fast/faithful) on a long-lived event loop."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig, PythonMode

_TMP_PATH = re.compile(r"/tmp/tmp[a-z0-9_]{8}/tmp[a-z0-9_]{8}\.py")


def normalize_paths(text: str | None) -> str | None:
    """Replace the per-execution script path the way the reference diff harness does."""
    return None if text is None else _TMP_PATH.sub("/tmp/tmpDIR/tmpFILE.py", text)


def pidfds_of(pid: int) -> int:
    """How many pidfds ``pid`` holds: the zygote holds one per child it has not reaped yet."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                count += 1
        except OSError:
            continue
    return count


def wait_until_reaped(zygote: int, within: float = 10.0) -> None:
    """Poll /proc until the zygote has reaped every child. A run is reported when its program ends, which can be
    before the kernel has torn its process down; the zygote reaps it a moment later (and closes its pidfd then)."""
    deadline = time.monotonic() + within
    while pidfds_of(zygote):
        if time.monotonic() > deadline:
            raise AssertionError(f"the zygote still holds {pidfds_of(zygote)} pidfds after {within} s")
        time.sleep(0.002)


def dead(pid: int, within: float = 10.0) -> bool:
    """Poll /proc (no fixed delay) until ``pid`` is dead: gone, or a zombie (killed, torn down, not yet reaped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.005)
    return False


class Runner:
    """Runs code through one executor from synchronous tests."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor, mode: PythonMode) -> None:
        self.loop = loop
        self.executor = executor
        self.mode = mode

    def call(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def arun(
        self,
        code: str | bytes,
        *,
        timeout: float = 5.0,
        stdin: bytes | None = None,
        memory_limit_mb: int = -1,
        extra_env: Mapping[str, str] | None = None,
        files: Mapping[str, bytes] | None = None,
        fetch: str | None = None,
    ) -> tuple[ExecutionResult, bytes | None]:
        with self.executor.workdir() as wd:
            script = wd.new_script(".py")
            wd.write_file(os.path.basename(script), code.encode() if isinstance(code, str) else code)
            for name, data in (files or {}).items():
                wd.write_file(name, data)
            result = await self.executor.run(
                ExecutionRequest(
                    argv=[self.executor.config.python, script],
                    cwd=wd.path,
                    timeout=timeout,
                    stdin=stdin,
                    memory_limit_mb=memory_limit_mb,
                    extra_env=extra_env,
                    python_script=script,
                )
            )
            fetched = wd.read_file(fetch) if fetch else None
        return result, fetched

    def run(self, code: str | bytes, **kwargs: Any) -> ExecutionResult:
        result, _ = self.call(self.arun(code, **kwargs))
        assert isinstance(result, ExecutionResult)
        return result


@pytest.fixture(scope="session")
def runtime() -> dict[str, Any]:
    """Version of the runtime interpreter and whether it can import numpy."""
    import json
    import subprocess

    probe = (
        "import sys, json, importlib.util\n"
        "print(json.dumps([list(sys.version_info[:2]), importlib.util.find_spec('numpy') is not None]))"
    )
    out = subprocess.run([ExecutorConfig().python, "-c", probe], capture_output=True, text=True, check=True).stdout
    version, numpy = json.loads(out)
    return {"version": tuple(version), "numpy": numpy}


@pytest.fixture
def py311(runtime: dict[str, Any]) -> None:
    """The recordings were made with a 3.11 runtime; exact comparisons need the same version."""
    if runtime["version"] != (3, 11):
        pytest.skip(f"recorded with Python 3.11, runtime is {runtime['version']}")


@pytest.fixture(scope="session")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def executors(loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, Executor]]:
    made: dict[str, Executor] = {}

    async def start() -> None:
        for mode in ("fast", "faithful"):
            made[mode] = Executor(ExecutorConfig(python_mode=mode, warm_interpreters=1))
            await made[mode].start()

    loop.run_until_complete(start())
    yield made

    async def stop() -> None:
        for executor in made.values():
            await executor.aclose()

    loop.run_until_complete(stop())


@pytest.fixture(params=["fast", "faithful"])
def runner(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, executors: dict[str, Executor]) -> Runner:
    mode: PythonMode = request.param
    return Runner(loop, executors[mode], mode)


@pytest.fixture
def both(loop: asyncio.AbstractEventLoop, executors: dict[str, Executor]) -> dict[str, Runner]:
    return {mode: Runner(loop, executors[mode], mode) for mode in ("fast", "faithful")}
