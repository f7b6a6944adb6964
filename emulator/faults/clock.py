"""Injected time source, so token buckets and latency can run on virtual time in tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "RealClock"]


@runtime_checkable
class Clock(Protocol):
    """What the engine and the HTTP layer need from time: a monotonic reading and an async sleep."""

    def monotonic(self) -> float:
        """Seconds on a monotonic scale (origin arbitrary)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class RealClock:
    """Wall time: ``time.monotonic`` and ``asyncio.sleep``."""

    def monotonic(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Delegate to ``asyncio.sleep``."""
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """Virtual time advanced by hand, so rate limits and latency are tested without real waits.

    ``sleep`` parks the caller until ``advance``/``set`` moves time past its deadline. Wake-ups
    are delivered through the sleeper's event loop, so the sleeping task runs at the loop's next
    turn (await something, e.g. ``asyncio.sleep(0)``, after advancing).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        """Return the current virtual time."""
        with self._lock:
            return self._now

    @property
    def sleepers(self) -> int:
        """Number of tasks currently parked in ``sleep``."""
        with self._lock:
            return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def sleep(self, seconds: float) -> None:
        """Park until virtual time reaches now + ``seconds``; non-positive values only yield."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError("ManualClock cannot go backwards")
        with self._lock:
            self._now += seconds
        self._wake()

    def set(self, now: float) -> None:
        """Jump to absolute time ``now`` (not earlier than the current time)."""
        with self._lock:
            if now < self._now:
                raise ValueError("ManualClock cannot go backwards")
            self._now = float(now)
        self._wake()

    def _wake(self) -> None:
        due: list[asyncio.Future[None]] = []
        with self._lock:
            while self._sleepers and self._sleepers[0][0] <= self._now:
                due.append(heapq.heappop(self._sleepers)[2])
        for fut in due:
            fut.get_loop().call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
