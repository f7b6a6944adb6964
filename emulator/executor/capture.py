"""Pipe capture that reproduces the real server's output quirks with real pipes.

The real server (asyncio StreamReader, read only after exit) returns output up to ~150 KB
complete, truncates ~300 KB to exactly 219264 chars with a normal finish, and blocks a child
writing ~1 MB or more on its full pipe until the timeout.  We keep at most ``KEEP_BYTES``
per stream, keep draining (and discarding) until ``ABSORB_BYTES`` were read, then stop
reading, so a bigger writer blocks on the full pipe exactly like on the real server (which
also contains ``while True: print()``).

The zygote reads the pipes (``zygote_main.py``, stdlib-only, holds its own copy of these two
numbers); the server only decodes.
"""

from __future__ import annotations

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
