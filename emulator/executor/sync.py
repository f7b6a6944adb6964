"""Blocking facade: an :class:`Executor` on its own event loop in a background thread.

For synchronous callers (scripts, thread pools, WSGI); each ``run()`` may be called from any
thread and blocks until the program finished.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from .executor import Executor
from .model import ExecutionRequest, ExecutionResult, ExecutorConfig
from .workdir import Workdir


class ThreadedExecutor:
    """Owns a loop thread running one :class:`Executor`; use as a context manager."""

    def __init__(self, config: ExecutorConfig | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox-executor", daemon=True)
        self._thread.start()
        self.executor = Executor(config)
        self._closed = False
        try:
            asyncio.run_coroutine_threadsafe(self.executor.start(), self._loop).result()
        except BaseException:
            self.close()
            raise

    def workdir(self) -> Workdir:
        """A fresh per-execution work dir (see :meth:`Executor.workdir`)."""
        return self.executor.workdir()

    def run(self, request: ExecutionRequest, timeout: float | None = None) -> ExecutionResult:
        """Run one program and wait for its result."""
        return asyncio.run_coroutine_threadsafe(self.executor.run(request), self._loop).result(timeout)

    def close(self) -> None:
        """Stop the executor (killing running programs) and the loop thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.executor.aclose(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            self._loop.close()

    def __enter__(self) -> ThreadedExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
