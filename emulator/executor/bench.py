"""Throughput of ``Executor.run`` for ``print(2+2)``: ``python -m emulator.executor.bench``.

Each execution gets its own work dir and script file, as the Sandbox Fusion runner does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from .executor import Executor
from .model import ExecutionRequest, ExecutorConfig, PythonMode


async def _one(executor: Executor, code: bytes) -> None:
    with executor.workdir() as wd:
        script = wd.new_script(".py")
        wd.write_file(os.path.basename(script), code)
        result = await executor.run(
            ExecutionRequest([executor.config.python, script], wd.path, 10.0, python_script=script)
        )
    if result.stdout != "4\n":
        raise RuntimeError(f"unexpected result: {result}")


async def measure(mode: PythonMode, concurrency: int, total: int) -> float:
    """Executions per second over ``total`` runs with ``concurrency`` in flight."""
    code = b"print(2+2)\n"
    async with Executor(ExecutorConfig(python_mode=mode)) as executor:
        for _ in range(3):  # warm-up
            await _one(executor, code)
        remaining = total

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await _one(executor, code)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - started)


def main() -> None:
    """Print a small table of executions/s."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    for mode in ("fast", "faithful"):
        for concurrency in (1, 16):
            total = args.runs if mode == "fast" else max(args.runs // 4, 16)
            rate = asyncio.run(measure(mode, concurrency, total))
            print(f"{mode:9s} concurrency {concurrency:2d}: {rate:8.1f} executions/s ({total} runs)")


if __name__ == "__main__":
    main()
