"""Backends of ``sandbox-emulator bench``: each pre-creates a pool, runs one scenario call on a pool slot, releases.

The Sandbox Fusion and Daytona backends drive the project's verl tools (``SandboxFusionTool``, ``DaytonaTool``), as
Daytona's script drives the verl tools it compares, so the figures are those of the tool path a trainer runs.
``local-subprocess`` runs ``python -c`` per call, the analogue of the script's ``docker run`` baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from dataclasses import dataclass
from typing import Any, Protocol

from harness.bench.emulator_time import EmulatorJournal


@dataclass(frozen=True)
class Scenario:
    """A program and how to judge its answer: ``expect`` in the output, and whether it must end in an error."""

    name: str
    code: str
    expect: str
    had_error: bool


CPU_BOUND = "total = 0\nfor i in range(20000):\n    total += i * i\nprint(total)"
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("simple_stdout", "print(2 + 2)", "4", False),
        Scenario("cpu_bound_stdout", CPU_BOUND, "2666466670000", False),
        Scenario("runtime_error", "raise ValueError('boom from benchmark')", "ValueError", True),
    )
}


@dataclass(frozen=True)
class CallOutcome:
    """What a backend saw: the text a model would see and whether the program ended in an error."""

    text: str
    had_error: bool
    infra_fault: str | None = None

    def judge(self, scenario: Scenario) -> bool:
        return self.infra_fault is None and scenario.expect in self.text and self.had_error == scenario.had_error


class PoolCreationError(RuntimeError):
    """A pool slot whose sandbox could not be created (the message says which and why)."""


class Backend(Protocol):
    """One sandbox service seen through its client (and, for the benchmark's own emulator, its journal)."""

    name: str
    journal: EmulatorJournal | None

    async def create(self, index: int) -> None: ...

    async def call(self, index: int, scenario: Scenario) -> CallOutcome: ...

    async def release(self, index: int) -> None: ...

    async def aclose(self) -> None: ...


def _tool_limits(pool: int) -> dict[str, Any]:
    # The script's config: caps at the pool size, so the client never queues below the level being measured; the
    # limiter is this process's (no Ray cluster to start for a benchmark). One attempt: a fault is a failure here.
    return {
        "num_workers": pool,
        "rate_limit": pool,
        "enable_global_rate_limit": True,
        "rate_limiter": {"backend": "local"},
        "default_timeout": 30,
        "retry": {"max_attempts": 1},
    }


class SandboxFusionBackend:
    """``SandboxFusionTool`` against a ``/run_code`` URL (the emulator's or a real server's)."""

    def __init__(self, name: str, run_code_url: str, pool: int, journal: EmulatorJournal | None = None) -> None:
        from harness.tools.sandbox_fusion import SandboxFusionTool

        self.name = name
        self.journal = journal
        with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints its schema
            self.tool = SandboxFusionTool({"sandbox_fusion_url": run_code_url, **_tool_limits(pool)})
        self._ids: dict[int, str] = {}

    async def create(self, index: int) -> None:
        self._ids[index], _ = await self.tool.create(f"bench-{index}")

    async def call(self, index: int, scenario: Scenario) -> CallOutcome:
        response, _, metrics = await self.tool.execute(self._ids[index], {"code": scenario.code})
        status = metrics.get("status")
        fault = metrics.get("infra_fault") or (status if status not in ("success", "runtime_error") else None)
        return CallOutcome(response.text or "", status == "runtime_error", fault)

    async def release(self, index: int) -> None:
        await self.tool.release(self._ids.pop(index))

    async def aclose(self) -> None:
        await self.tool.aclose()


class DaytonaBackend:
    """``DaytonaTool`` (the real ``daytona`` SDK, the interpreter WebSocket) against a Daytona API URL."""

    def __init__(
        self, name: str, api_url: str, api_key: str, pool: int, journal: EmulatorJournal | None = None
    ) -> None:
        from harness.tools.daytona import DaytonaTool

        config = {"api_url": api_url, "api_key": api_key, "sandbox_scope": "call", **_tool_limits(pool)}
        config["name_prefix"] = "verl-daytona-bench"
        self.name = name
        self.journal = journal
        with contextlib.redirect_stdout(io.StringIO()):
            self.tool = DaytonaTool(config)
        self._ids: dict[int, str] = {}

    async def create(self, index: int) -> None:
        """Create slot ``index``'s sandbox; :class:`PoolCreationError` if the tool could not.

        The tool does not raise for a sandbox it could not create: it keeps the fault on the slot and answers each of
        the slot's calls with it. A benchmark would then count those calls as failures, with no word of why; so the
        slot is checked here, and the pool check of ``run_backend`` reports the reason instead.
        """
        instance_id, _ = await self.tool.create(f"bench-{index:04d}")
        slot = self.tool._calls.get(instance_id)  # the tool's call-scope slot (no public accessor)
        if slot is None or slot.sandbox is None:
            await self.tool.release(instance_id)  # forget the empty slot
            reason = slot.fault if slot is not None else None
            raise PoolCreationError(f"sandbox {index}: {reason or 'the tool kept no sandbox for it'}")
        self._ids[index] = instance_id

    async def call(self, index: int, scenario: Scenario) -> CallOutcome:
        response, _, metrics = await self.tool.execute(self._ids[index], {"code": scenario.code})
        fault = metrics.get("infra_fault") or (metrics["status"] if metrics.get("status") == "timeout" else None)
        return CallOutcome(response.text or "", bool(metrics.get("had_error")), fault)

    async def release(self, index: int) -> None:
        await self.tool.release(self._ids.pop(index))

    async def aclose(self) -> None:
        await self.tool.aclose()


class LocalSubprocessBackend:
    """A fresh ``python -c CODE`` per call: no server, no isolation but a process (Docker baseline, minus Docker)."""

    name = "local-subprocess"
    journal: EmulatorJournal | None = None

    async def create(self, index: int) -> None:
        return None

    async def call(self, index: int, scenario: Scenario) -> CallOutcome:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            scenario.code,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        return CallOutcome((out + err).decode(errors="replace"), proc.returncode != 0)

    async def release(self, index: int) -> None:
        return None

    async def aclose(self) -> None:
        return None
