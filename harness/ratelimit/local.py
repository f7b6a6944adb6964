"""An in-process concurrency limiter with the guarantees verl 0.7.1's ``TokenBucketWorker`` lacked.

* FIFO: waiters are admitted in arrival order, so no caller starves.
* Bounded: a release needs the permit its acquire returned; releasing twice or releasing a foreign permit raises
  instead of silently creating capacity.
* Cancel-safe: a caller cancelled while waiting takes nothing; one cancelled just after being admitted gives its
  permit back exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


class LimiterError(RuntimeError):
    """A limiter was used wrongly (double release, foreign permit, bad limit)."""


@dataclass(frozen=True)
class Permit:
    """Proof of one admission; give it back with :meth:`ConcurrencyLimiter.release`."""

    limiter_id: int
    number: int


_ids = itertools.count(1)


class ConcurrencyLimiter:
    """At most ``limit`` holders at once; FIFO admission; one instance per event loop."""

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise LimiterError(f"limit must be a positive integer, got {limit!r}")
        self.limit = limit
        self._id = next(_ids)
        self._numbers = itertools.count(1)
        self._held: set[int] = set()
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        self.max_held = 0

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def _grant(self) -> Permit:
        permit = Permit(self._id, next(self._numbers))
        self._held.add(permit.number)
        self.max_held = max(self.max_held, len(self._held))
        return permit

    async def acquire(self) -> Permit:
        if len(self._held) < self.limit and not self.waiting:
            return self._grant()
        future: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # Admitted and cancelled in the same instant: hand the permit on, never keep or double it.
                self.release(future.result())
            raise
        finally:
            if future in self._waiters and future.done():
                self._waiters.remove(future)

    def release(self, permit: Permit) -> None:
        if permit.limiter_id != self._id or permit.number not in self._held:
            raise LimiterError(f"release of a permit this limiter does not hold: {permit}")
        self._held.discard(permit.number)
        while self._waiters and len(self._held) < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._grant())

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Permit]:
        permit = await self.acquire()
        try:
            yield permit
        finally:
            self.release(permit)
