"""SIGTERM handled as Ctrl-C, so a command stopped either way unwinds through its ``finally`` blocks.

A command's cleanup (stopping the emulator process it started, releasing sandboxes, leaving a dump whole) runs as the
``KeyboardInterrupt`` unwinds. Python's default SIGTERM ends the process at once, which left the emulator process a
benchmark started running on its own.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The exit status of a command stopped by Ctrl-C or SIGTERM (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``KeyboardInterrupt`` in the main thread, as Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
