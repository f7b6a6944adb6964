"""Virtual time for in-process chaos tests: an asyncio event loop whose clock jumps to the next timer.

A ten-minute outage with ``Retry-After: 60`` waits must run in milliseconds and never flake. :class:`VirtualTimeLoop`
is an ordinary selector event loop except that ``time()`` is virtual: when the loop would block and nothing real is
outstanding, it moves its clock to the next timer at once instead of sleeping. Everything that waits through the loop
(``asyncio.sleep``, ``wait_for``, aiohttp and uvicorn timeouts, an emulator served in the same loop with a
:class:`LoopClock`) then shares one timeline that costs no wall time.

Real work keeps real time. The loop never jumps while

* a socket or pipe has something ready (polled without blocking first),
* a callable given to ``run_in_executor`` (``asyncio.to_thread``, ``getaddrinfo``) is still running,
* a file descriptor waits to be writable (a connect in progress, a full buffer),
* a :meth:`VirtualTimeLoop.hold` block is open, or a busy check added with :meth:`VirtualTimeLoop.add_busy_check`
  says so (the in-loop emulator adds one that is true while a program runs in a child process).

Then the loop blocks on its selector in real time, in short slices, and its clock advances by the real time that
passed, so a program's timeout still fires after its real duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["LoopClock", "VirtualTime", "VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")

#: Real seconds the loop waits for stray I/O before each jump (a packet on loopback that the kernel has not yet
#: delivered). Small enough that a hundred jumps cost a tenth of a second.
DEFAULT_SETTLE = 0.001
#: Longest real wait while real work is outstanding, so busy checks are evaluated again soon after they change.
DEFAULT_REAL_SLICE = 0.01


class _VirtualSelector(selectors.BaseSelector):
    """Wraps the loop's selector: the only place where an event loop blocks, so the only place time can jump."""

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._inner = inner
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        _no_delay(fileobj)
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._inner.select(0)
        events = self._inner.select(0)
        if events:
            return events
        loop = self._loop
        if loop.real_work_pending():
            wait = loop.real_slice if timeout is None else min(timeout, loop.real_slice)
            return self._real_wait(wait)
        if timeout is None:
            # Nothing scheduled and nothing real running: only the outside world can wake us, as on any loop.
            return self._real_wait(None)
        if loop.settle > 0:
            # A last short real look for stray I/O; the clock stays put, so idle timelines are exact.
            events = self._inner.select(min(loop.settle, timeout))
            if events or loop.real_work_pending():
                return events
        loop._jump(timeout)
        return []

    def _real_wait(self, timeout: float | None) -> list[tuple[selectors.SelectorKey, int]]:
        started = time.monotonic()
        try:
            return self._inner.select(timeout)
        finally:
            self._loop._flow(time.monotonic() - started)


def _no_delay(fileobj: Any) -> None:
    """Turn Nagle's algorithm off on a TCP socket the loop watches.

    Nagle holds a small write until the peer acknowledges the previous one, and the peer's kernel delays that ACK by
    some 40 ms: data the loop is waiting for arrives on a kernel timer, which a jump would overtake. Without Nagle,
    loopback data is readable as soon as it is written.
    """
    try:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        sock = socket.socket(fileno=fd)
    except (OSError, ValueError, AttributeError):
        return  # not a socket (a pipe, the self-pipe)
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # a listening or closed socket
    finally:
        sock.detach()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on virtual time: idle waits for timers cost no wall time; real work keeps real time.

    ``start`` is the clock's reading when the loop is made; ``settle`` the real seconds it waits for stray I/O before
    each jump; ``real_slice`` the longest single real wait while real work is outstanding.
    """

    def __init__(
        self, start: float = 0.0, *, settle: float = DEFAULT_SETTLE, real_slice: float = DEFAULT_REAL_SLICE
    ) -> None:
        super().__init__()
        if settle < 0 or real_slice <= 0:
            self.close()
            raise ValueError(f"settle must be >= 0 and real_slice > 0, got settle={settle}, real_slice={real_slice}")
        self._now = float(start)
        self.settle = settle
        self.real_slice = real_slice
        #: Jumps made, virtual seconds skipped by them, and real seconds spent blocked in the selector.
        self.jumps = 0
        self.skipped = 0.0
        self.real_waited = 0.0
        self._holds = 0
        self._in_threads = 0
        self._busy_checks: list[Callable[[], bool]] = []
        self._subprocesses: weakref.WeakSet[asyncio.SubprocessTransport] = weakref.WeakSet()
        selector: selectors.BaseSelector = self._selector  # type: ignore[has-type]
        self._selector = _VirtualSelector(selector, self)

    # ------------------------------------------------------------------ time

    def time(self) -> float:
        """The virtual clock: what ``call_later``, ``asyncio.sleep`` and every timeout read."""
        return self._now

    def _jump(self, seconds: float) -> None:
        self._now += seconds
        self.jumps += 1
        self.skipped += seconds

    def _flow(self, seconds: float) -> None:
        """Real time passed while the loop waited for real work: the virtual clock moves with it."""
        self._now += seconds
        self.real_waited += seconds

    # ------------------------------------------------------------------ real work

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """No jumps inside this block: waits take real time (e.g. while a helper process starts)."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1

    def add_busy_check(self, check: Callable[[], bool]) -> Callable[[], None]:
        """While ``check()`` is true the loop does not jump. Returns a function that removes the check."""
        self._busy_checks.append(check)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._busy_checks.remove(check)

        return remove

    def real_work_pending(self) -> bool:
        """Whether anything outside the loop's timers is outstanding: holds, threads, writers, busy checks."""
        if self._holds or self._in_threads:
            return True
        if any(check() for check in self._busy_checks):
            return True
        return any(key.events & selectors.EVENT_WRITE for key in self._selector.get_map().values())

    # typeshed types ``func``/``args`` with a TypeVarTuple (Python 3.11+); this wider signature accepts the same calls.
    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """As the base loop's, counted: a callable running in a thread is real work, so time must not jump."""
        future = super().run_in_executor(executor, func, *args)
        self._in_threads += 1
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _: asyncio.Future[Any]) -> None:
        self._in_threads -= 1

    # The hook ``subprocess_exec``/``subprocess_shell`` go through (not in typeshed's stubs).
    async def _make_subprocess_transport(self, *args: Any, **kwargs: Any) -> asyncio.SubprocessTransport:
        make = super()._make_subprocess_transport  # type: ignore[misc]
        transport: asyncio.SubprocessTransport = await make(*args, **kwargs)
        self._subprocesses.add(transport)
        return transport

    async def reap_subprocesses(self, timeout: float = 5.0) -> int:
        """Wait (real time, at most ``timeout`` s) for the child processes this loop started to exit.

        A child killed just before the loop closes would otherwise report its exit to a closed loop. Returns how many
        are still running.
        """
        deadline = time.monotonic() + timeout
        with self.hold():
            while True:
                running = [t for t in self._subprocesses if not t.is_closing() and t.get_returncode() is None]
                if not running or time.monotonic() >= deadline:
                    return len(running)
                await asyncio.sleep(self.real_slice)


def run_virtual(main: Coroutine[Any, Any, T], *, start: float = 0.0, settle: float = DEFAULT_SETTLE) -> T:
    """``asyncio.run`` on a fresh :class:`VirtualTimeLoop`."""
    with VirtualTime(start, settle=settle) as vt:
        return vt.run(main)


class VirtualTime:
    """One virtual-time loop for a test: run coroutines on it, read its clock, close it at the end.

    A pytest fixture can yield one of these; several ``run`` calls share the loop, so an emulator or a tool started
    in one call is still usable in the next. (``asyncio.Runner`` with a loop factory does this on 3.11+ only.)
    """

    def __init__(self, start: float = 0.0, *, settle: float = DEFAULT_SETTLE) -> None:
        self._start = start
        self._settle = settle
        self._loop: VirtualTimeLoop | None = None
        self._closed = False

    @property
    def loop(self) -> VirtualTimeLoop:
        """The loop (made on first use)."""
        if self._closed:
            raise RuntimeError("this VirtualTime is closed")
        if self._loop is None:
            self._loop = VirtualTimeLoop(self._start, settle=self._settle)
        return self._loop

    def now(self) -> float:
        """The virtual clock's reading."""
        return self.loop.time()

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` to completion on the loop (from synchronous code, as ``asyncio.run`` does)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            main.close()
            raise RuntimeError("VirtualTime.run() cannot be called from a running event loop")
        return self.loop.run_until_complete(main)

    def close(self) -> None:
        """Cancel what is left, finish async generators, shut the default executor down, close the loop."""
        loop, self._loop, self._closed = self._loop, None, True
        if loop is None or loop.is_closed():
            return
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def __enter__(self) -> VirtualTime:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class LoopClock:
    """The emulator's ``Clock`` for an emulator served inside an event loop: that loop's ``time()`` and sleep.

    On a :class:`VirtualTimeLoop` the emulator's injected latency, limits, quota windows, sandbox timers and journal
    timestamps then read the same virtual clock as the clients' ``Retry-After`` waits.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop if loop is not None else asyncio.get_running_loop()

    def monotonic(self) -> float:
        """The loop's clock."""
        return self.loop.time()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep`` on the running loop (which must be this clock's)."""
        await asyncio.sleep(max(0.0, seconds))
