"""Pipe capture that reproduces the real server's output quirks with real pipes.

The real server (asyncio StreamReader, read only after exit) returns output up to ~150 KB
complete, truncates ~300 KB to exactly 219264 chars with a normal finish, and blocks a child
writing ~1 MB or more on its full pipe until the timeout.  We keep at most ``KEEP_BYTES``
per stream, keep draining (and discarding) until ``ABSORB_BYTES`` were read, then stop
reading, so a bigger writer blocks on the full pipe exactly like on the real server (which
also contains ``while True: print()``).

That is the default :class:`OutputCapture` of a request.  Another service's runs ask for their
own: Daytona's toolbox, whose daemon collects a command's whole output, reads every stream to
its end (keeping a bound, so that an endless writer costs no memory), decodes as Go does, and
answers once the output's pipes are closed by all that hold them.

The zygote reads the pipes (``zygote_main.py``, stdlib-only, holds its own copy of these two
numbers); the server only decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Exact truncation length measured on the real server.
KEEP_BYTES = 219264
# Total bytes we read per stream before we stop reading.  Real server: 300 KB finishes,
# 1 MB blocks.  448 KiB + the 64 KiB pipe buffer = 512 KiB that a child can write before
# it blocks, safely between the two measured points.
ABSORB_BYTES = 448 * 1024


def decode_output(data: bytes) -> str:
    """Decode like the real server: the whole stream is replaced on a UTF-8 error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"[DecodeError] {exc}"


@dataclass(frozen=True)
class OutputCapture:
    """How the executor reads and decodes one run's stdout and stderr (each stream on its own).

    The default is Sandbox Fusion's quirk (see the module's doc).  ``absorb=None`` reads a stream to its end: past
    ``keep`` bytes the rest is read and discarded, so a writer never blocks on its pipe.
    """

    #: Bytes of each stream kept (the first ones).
    keep: int = KEEP_BYTES
    #: Bytes of each stream read before the reading stops (a writer of more then blocks on its full pipe); None:
    #: read to the end.
    absorb: int | None = ABSORB_BYTES
    #: Turns the bytes kept of a stream into the result's text.
    decode: Callable[[bytes], str] = decode_output
    #: The run ends when every holder of its output pipes has closed them, as Go's ``cmd.Wait`` waits for its copies
    #: of the output (Daytona's daemon), not when the program exits: a background process that keeps them holds the
    #: result until it closes them or the timeout kills the run. Then, as at any run's end, what the program left is
    #: killed.
    until_closed: bool = False

    def __post_init__(self) -> None:
        for name in ("keep", "absorb"):
            value = getattr(self, name)
            if value is None and name == "absorb":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"OutputCapture.{name} must be an integer of at least 0, got {value!r}")


#: Sandbox Fusion's capture: every request's unless it asks for another.
SANDBOX_FUSION_CAPTURE = OutputCapture()
