"""A wait before a program starts that the executor spends with the program's process already made.

An injected latency on an execution route is a wait before the request is handled. The program must not start
before it ends, but nothing stops the sandbox from getting ready meanwhile: the fast path forks the child, sets up
its work dir, descriptors, limits and uid, and holds it just before the program's first instruction. When the wait
ends the program starts at once, so what the client sees above the injected latency is the program and the answer,
not also the fork and the setup (which, after an idle wait, run on cold caches).

The fault gate opens a :class:`StartGate` around a handler (:func:`offered`); the first :meth:`Executor.run
<emulator.executor.Executor.run>` in that handler's context takes it (:func:`take`). The gate then waits for
whatever is left (:meth:`StartGate.finish`), so a handler that runs nothing still answers after the latency.

A wait of real time is a deadline only: nothing of the server's wakes at its end (the program's process does), so a
handler whose program took it just answers when the program is done.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class StartGate:
    """One request's wait, started when the request arrives; taken by at most one execution.

    ``deadline``: when the wait is one of real time, the ``time.monotonic()`` at which it ends. The program's process
    then sleeps until that instant by itself (CLOCK_MONOTONIC is one clock for every process), which spares a message
    and a timer of the event loop (whole milliseconds) between the end of the wait and the program's start. Then the
    deadline alone says when the wait is over, and ``wait`` may be None. Without one, ``wait`` is awaited.
    """

    def __init__(self, wait: Awaitable[object] | None, deadline: float | None = None) -> None:
        if wait is None and deadline is None:
            raise ValueError("a start gate needs a wait or a deadline")
        self.wait: asyncio.Future[object] | None = None if wait is None else asyncio.ensure_future(wait)
        self.deadline = deadline
        self.taken = False

    def over(self) -> bool:
        """Whether the wait has ended."""
        if self.deadline is not None:
            return time.monotonic() >= self.deadline
        assert self.wait is not None
        return self.wait.done()

    async def until_over(self) -> None:
        """Wait for what is left of the wait (its own wait is not cancelled if this call is)."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)
            return
        assert self.wait is not None
        await asyncio.shield(self.wait)

    def take(self) -> StartGate | None:
        """This gate, for the first caller only (a compile step's, not the run's after it)."""
        if self.taken:
            return None
        self.taken = True
        return self

    async def finish(self) -> None:
        """Wait for what is left of the wait (nothing, if the execution that took it waited it out)."""
        if not self.over():
            await self.until_over()

    def cancel(self) -> None:
        if self.wait is not None:
            self.wait.cancel()


_CURRENT: ContextVar[StartGate | None] = ContextVar("emulator_start_gate", default=None)


@contextmanager
def offered(wait: Awaitable[object] | None, deadline: float | None = None) -> Iterator[StartGate]:
    """Offer ``wait`` to the executions of the calling context; cancelled on the way out if still running."""
    gate = StartGate(wait, deadline)
    token = _CURRENT.set(gate)
    try:
        yield gate
    finally:
        _CURRENT.reset(token)
        gate.cancel()


def take() -> StartGate | None:
    """The calling context's start gate, if one is offered and not yet taken."""
    gate = _CURRENT.get()
    return None if gate is None else gate.take()


async def wait_out() -> None:
    """Wait for the end of the calling context's start gate, if one is offered and not yet taken: a handler that
    answers without running anything (an error) must not answer before the latency ends."""
    gate = take()
    if gate is not None:
        await gate.finish()
