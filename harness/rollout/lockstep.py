"""Batch-synchronous turns: every trajectory waits for the slowest tool call of its turn before generating again.

This is how a batch rollout without per-trajectory asynchrony behaves (one generation call for the whole batch per
turn): turn ``t + 1`` of any trajectory starts only when every trajectory still running has finished turn ``t``'s
tool calls. :class:`LockstepServerManager` wraps a server manager and holds each ``generate`` call at that barrier;
the trajectory a call belongs to is read from a context variable the runner sets (verl calls ``generate`` from the
task that runs the trajectory, so the value is inherited).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

#: Index of the trajectory the current task runs (set by the runner around ``loop.run``).
TRAJECTORY_INDEX: contextvars.ContextVar[int] = contextvars.ContextVar("trajectory_index")


class TurnBarrier:
    """Releases turn ``t`` once each of ``n`` trajectories has reached turn ``t`` or finished."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a barrier needs at least one trajectory, got {n}")
        self._reached = [-1] * n
        self._done = [False] * n
        self._changed = asyncio.Condition()
        self.waits = 0  # generate calls that had to wait for another trajectory

    def _released(self, turn: int) -> bool:
        return all(done or reached >= turn for reached, done in zip(self._reached, self._done, strict=True))

    async def arrive(self, index: int, turn: int) -> None:
        async with self._changed:
            self._reached[index] = turn
            self._changed.notify_all()
            if not self._released(turn):
                self.waits += 1
                await self._changed.wait_for(lambda: self._released(turn))

    async def finish(self, index: int) -> None:
        async with self._changed:
            self._done[index] = True
            self._changed.notify_all()


class LockstepServerManager:
    """Wraps a server manager: learns each trajectory's request id (verl makes it inside the loop) and, given a
    :class:`TurnBarrier`, holds every ``generate`` at it before asking the wrapped manager."""

    def __init__(self, inner: Any, barrier: TurnBarrier | None = None) -> None:
        self.inner = inner
        self.barrier = barrier
        self.request_of: dict[int, str] = {}  # trajectory index -> the loop's request id
        self._turns: dict[str, int] = {}

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        index = TRAJECTORY_INDEX.get()
        self.request_of.setdefault(index, request_id)
        turn = self._turns.get(request_id, 0)
        self._turns[request_id] = turn + 1
        if self.barrier is not None:
            await self.barrier.arrive(index, turn)
        return await self.inner.generate(request_id, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
