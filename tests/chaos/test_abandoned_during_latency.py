"""Hundreds of `/run_code` requests in a heavy-tailed latency, a third abandoned by their clients: nothing leaks.

During an injected latency the sandbox gets ready (a forked child waits for the latency's end), so every request
that is given up must still end with its child reaped, its uid back in the pool and its work dir removed.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from typing import Any

import aiohttp

from emulator.app import Emulator, EmulatorConfig
from emulator.executor import Executor, ExecutorConfig
from emulator.server import EmulatorServer

LATENCY = {"lognormal": {"p50": 0.05, "p99": 0.5}}
PLAN = {"rules": [{"id": "lat", "route": "sandbox_fusion.run_code", "latency": LATENCY}]}


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def _settled(executor: Executor, zygote: int) -> bool:
    holder = executor._zygotes[0]
    return not _children_of(zygote) and (holder is None or not holder._pending) and executor._ready == 0


def test_requests_abandoned_during_a_latency_leave_nothing_behind() -> None:
    # One warm interpreter, whose children and tmpfs are looked at (more start on a machine of 16 cores or more).
    emulator = Emulator(EmulatorConfig(executor=ExecutorConfig(warm_interpreters=1)), faults=PLAN)
    host_tmp = tempfile.gettempdir()
    before = set(os.listdir(host_tmp))
    with EmulatorServer(emulator) as server:
        outcomes = asyncio.run(_load(server.run_code_url, 300))
        executor = emulator._executor
        assert executor is not None and executor.zygote_pid is not None
        zygote = executor.zygote_pid
        deadline = time.monotonic() + 30  # the abandoned requests run to their end on the server
        while not _settled(executor, zygote) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _settled(executor, zygote)
        uids = executor.sandbox_uids
        assert uids is None or len(executor._free_uids) == len(uids)
        if executor.private_tmp is not None:  # as root: the warm interpreter's own tmpfs, seen through its root
            leftovers = set(os.listdir(f"/proc/{zygote}/root{executor.private_tmp}"))
        else:
            leftovers = set(os.listdir(host_tmp)) - before
        assert not [name for name in leftovers if name.startswith("tmp")]
        entries = emulator.journal.entries()
    assert outcomes["bad"] == 0 and outcomes["ok"] > 100 and outcomes["gave_up"] > 50
    assert {e.outcome for e in entries} == {"ok"} and len(entries) >= outcomes["ok"]


async def _load(url: str, count: int) -> dict[str, int]:
    rng = random.Random(7)
    outcomes = {"ok": 0, "bad": 0, "gave_up": 0}
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> None:
            give_up = rng.random() < 1 / 3
            timeout = aiohttp.ClientTimeout(total=rng.uniform(0.005, 0.2) if give_up else 60)
            body: dict[str, Any] = {"code": f"print({i})", "language": "python", "run_timeout": 5}
            try:
                async with session.post(url, json=body, timeout=timeout) as response:
                    answer = await response.json()
            except asyncio.TimeoutError:
                outcomes["gave_up"] += 1
                return
            good = response.status == 200 and answer["run_result"]["stdout"] == f"{i}\n"
            outcomes["ok" if good else "bad"] += 1

        await asyncio.gather(*(one(i) for i in range(count)))
    return outcomes
