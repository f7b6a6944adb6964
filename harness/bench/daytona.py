"""Daytona benchmark through the real SDK: sandboxes created/s, code_run and run_code calls/s, peak RSS.

The emulator runs as its own process (``sandbox-emulator serve``, without Daytona's throttlers: see
:mod:`harness.bench.emulator_process`); the SDK (``AsyncDaytona``) drives it from this one, all sandboxes at once
(concurrency = ``--sandboxes``, 128 by default, as the verl benchmark). Peak RSS is the server process's VmHWM with
every sandbox alive (interpreter processes are separate and listed apart). An error the SDK raises is one line and
exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from harness.bench.emulator_process import DAYTONA_KEY, EmulatorProcess, EmulatorStartError
from harness.bench.machine import MachineSpeed, ProbeError, measure
from harness.bench.throughput import _descendants, _vm_hwm_kb
from harness.outputs import file_problem, write_text


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _run(url: str, count: int, rounds: int, server_pid: int) -> dict[str, Any]:
    from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaConfig

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    figures: dict[str, Any] = {"sandboxes": count, "rounds": rounds}
    async with AsyncDaytona(DaytonaConfig(api_url=url + "/api", api_key=DAYTONA_KEY)) as daytona:
        say(f"creating {count} sandboxes ...")
        t0 = time.perf_counter()
        params = [CreateSandboxFromSnapshotParams(labels={"bench": str(i)}) for i in range(count)]
        sandboxes = await asyncio.gather(*(daytona.create(p, timeout=120) for p in params))
        figures["create_s"] = time.perf_counter() - t0
        figures["creates_per_s"] = count / figures["create_s"]

        async def timed(label: str, make: Any) -> None:
            say(f"{label}: a warm-up round and {rounds} measured round(s) of {count} calls ...")
            await asyncio.gather(*(make(s) for s in sandboxes))  # warm-up round
            start = time.perf_counter()
            for _ in range(rounds):
                await asyncio.gather(*(make(s) for s in sandboxes))
            elapsed = time.perf_counter() - start
            figures[f"{label}_per_s"] = count * rounds / elapsed

        await timed("code_run", lambda s: s.process.code_run("print(2 + 2)"))
        await timed("exec", lambda s: s.process.exec("echo 4"))
        await timed("run_code", lambda s: s.code_interpreter.run_code("print(2 + 2)"))
        figures["server_rss_mb_all_alive"] = _rss_kb(server_pid) / 1024
        children = _descendants(server_pid)
        figures["child_processes"] = len(children)
        figures["children_rss_mb"] = sum(_rss_kb(p) for p in children) / 1024
        say(f"deleting {count} sandboxes ...")
        t0 = time.perf_counter()
        await asyncio.gather(*(s.delete() for s in sandboxes))
        figures["deletes_per_s"] = count / (time.perf_counter() - t0)
    figures["server_peak_rss_mb"] = _vm_hwm_kb(server_pid) / 1024
    return figures


def main(args: argparse.Namespace) -> int:
    import daytona  # noqa: F401  (missing: the command line says which extra to install, before anything runs)

    for flag, value in (("--sandboxes", args.sandboxes), ("--rounds", args.rounds)):
        if value < 1:
            print(f"sandbox-emulator bench-daytona: {flag} must be 1 or more, got {value}", file=sys.stderr)
            return 2
    problem = file_problem(args.json, "--json") if args.json else None
    if problem:
        print(f"sandbox-emulator bench-daytona: {problem}", file=sys.stderr)
        return 2
    speed: MachineSpeed | None = None
    try:
        speed = measure()
    except ProbeError as exc:
        print(f"sandbox-emulator bench-daytona: {exc}", file=sys.stderr)
    else:
        print(f"machine speed: {speed.describe()}", file=sys.stderr, flush=True)
    from daytona import DaytonaError

    try:
        # Its emulator applies no Daytona throttlers (EmulatorProcess's default): a pool of more than 300 is not
        # refused by Tier 1's creation limit, which is not what this benchmark measures.
        with EmulatorProcess() as emulator:
            assert emulator.pid is not None
            figures = asyncio.run(_run(emulator.base_url, args.sandboxes, args.rounds, emulator.pid))
    except EmulatorStartError as exc:
        print(f"sandbox-emulator bench-daytona: {exc}", file=sys.stderr)
        return 2
    except DaytonaError as exc:  # the service refused or failed a call: one line, not the SDK's traceback
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(f"sandbox-emulator bench-daytona: the Daytona SDK failed: {reason}", file=sys.stderr)
        return 1
    if speed is not None:
        figures["machine_python_loop_ns"] = speed.python_loop_ns
        figures["machine_fork_exit_ms"] = speed.fork_exit_ms
    for key, value in figures.items():
        print(f"{key:28s} {value:.1f}" if isinstance(value, float) else f"{key:28s} {value}")
    if args.json:
        problem = write_text(args.json, json.dumps(figures, indent=2, sort_keys=True) + "\n", "--json")
        if problem:
            print(f"sandbox-emulator bench-daytona: {problem}", file=sys.stderr)
            return 2
    return 0
