"""What a Daytona session's shell is fed, and how its log is read back (the daemon's ``pkg/session``).

The daemon keeps one shell per session, started when the session is created and fed each command on its stdin,
wrapped in a script that (1) starts two labelers, which read the command's stdout and stderr through FIFOs and append
each line to the command's log prefixed with its stream's marker (``\\x01\\x01\\x01``, ``\\x02\\x02\\x02``; a last
line without a newline gets one, a NUL is dropped), (2) sources the command file in the shell itself, its stdin a
FIFO (empty for a synchronous command, kept open for ``input`` to an asynchronous one), (3) waits for both labelers
to drain, then (4) records the exit code. So everything a command changes in its shell (directory, variables,
functions, options, traps, jobs) is there for the next one, and a background job that keeps the command's output open
keeps the command running.

Here the script is the emulator's own, with the same steps; its log lines go to two FIFOs the emulator reads as they
come (the stream channels, owned by the emulator's directory, never by the sandbox), and the exit code is a record of
its own on the stdout channel after the labelers have drained: ``\\x03\\x03\\x03<command id> <exit code>``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal

STDOUT_PREFIX = "\x01\x01\x01"
STDERR_PREFIX = "\x02\x02\x02"
#: Starts the line on the stdout channel that says a command ended (never a log line: those start with a marker).
EXIT_PREFIX = b"\x03\x03\x03"


@dataclass(frozen=True)
class CommandPaths:
    """The files of one command, in the session's directory (the emulator's, mode 0711)."""

    script: str  # the command's text, sourced by the shell
    stdout: str  # FIFO: the command's stdout, read by the stdout labeler
    stderr: str  # FIFO: the command's stderr, read by the stderr labeler
    stdin: str  # FIFO: the command's stdin

    def all(self) -> tuple[str, str, str, str]:
        return (self.script, self.stdout, self.stderr, self.stdin)


def _labeler(source: str, prefix: str, channel: str) -> str:
    octal = "".join(f"\\{ord(c):03o}" for c in prefix)
    return (
        f"( while IFS= builtin read -r __dtn_line || [[ -n $__dtn_line ]]; do "
        f"builtin printf '{octal}%s\\n' \"$__dtn_line\"; done <{source} >>{channel} ) &"
    )


def wrapper(command_id: str, paths: CommandPaths, out_channel: str, err_channel: str, run_async: bool) -> str:
    """The script the session's shell runs for one command (one compound command: read whole before it runs).

    A synchronous command's stdin is a FIFO whose only writer opens and closes it (so a read sees its end); an
    asynchronous one's writer is the emulator, which keeps it open for ``input`` until the command ends. The traps
    are the daemon's: its script sets them on EXIT, HUP, INT and TERM, so a session's shell outlives a SIGTERM once
    it has run a command (a deletion then waits out its grace period)."""
    q = shlex.quote
    lines = [
        "{",
        "builtin trap -- 'builtin :' EXIT HUP INT TERM",
        _labeler(q(paths.stdout), STDOUT_PREFIX, q(out_channel)),
        "__dtn_out=$!",
        _labeler(q(paths.stderr), STDERR_PREFIX, q(err_channel)),
        "__dtn_err=$!",
    ]
    if not run_async:
        lines += [f"builtin : >{q(paths.stdin)} &", "__dtn_in=$!"]
    lines.append(f"{{ . {q(paths.script)}; }} <{q(paths.stdin)} >{q(paths.stdout)} 2>{q(paths.stderr)}")
    lines.append("__dtn_code=$?")
    if not run_async:
        lines.append('builtin kill "$__dtn_in" 2>/dev/null; builtin wait "$__dtn_in" 2>/dev/null')
    lines += [
        'builtin wait "$__dtn_out" "$__dtn_err"',
        f"builtin printf '\\003\\003\\003%s %s\\n' {q(command_id)} \"$__dtn_code\" >>{q(out_channel)}",
        "}",
    ]
    return "\n".join(lines) + "\n"


def demux(text: str) -> tuple[str, str]:
    """Each stream's text back out of a log, as the daemon's ``DemuxLogBytes``."""
    out: list[str] = []
    err: list[str] = []
    for match in re.finditer(r"(\x01\x01\x01|\x02\x02\x02)((?:(?!\x01\x01\x01|\x02\x02\x02)[\s\S])*)", text):
        (out if match.group(1) == STDOUT_PREFIX else err).append(match.group(2))
    return "".join(out), "".join(err)


def strip_markers(text: str) -> str:
    return text.replace(STDOUT_PREFIX, "").replace(STDERR_PREFIX, "")


Shape = Literal["split", "raw", "combined"]


def _version(text: str) -> tuple[int, int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def output_shape(headers: Any) -> Shape:
    """What a session command's answer holds, as the daemon decides it from ``X-Daytona-SDK-Version``:

    - ``split``: ``output`` is the log itself, markers and all, beside the demultiplexed ``stdout`` and ``stderr``
      (an SDK from 0.167, the SDK 0.226 included, or a dev build);
    - ``raw``: ``output`` is the log, with no ``stdout``/``stderr`` (the SDK takes them apart itself: 0.27 to 0.167,
      or no version with ``X-Daytona-Split-Output: true``);
    - ``combined``: ``output`` is the log without its markers (an SDK before 0.27, or no version at all).
    """
    sdk = (headers.get("x-daytona-sdk-version") or "").strip()
    if not sdk:
        return "raw" if (headers.get("x-daytona-split-output") or "") == "true" else "combined"
    if "dev" in sdk:
        return "split"
    version = _version(sdk)
    if version is None:
        return "raw"  # the daemon's comparison fails: not combined, and no demultiplexing
    if version < (0, 27, 0):
        return "combined"
    return "raw" if version < (0, 167, 0) else "split"


def answer(shape: Shape, logged: str) -> dict[str, str | None]:
    """The output fields of an answer: ``output``, and ``stdout``/``stderr`` (null unless split, as the daemon's
    pointers)."""
    if shape == "combined":
        return {"output": strip_markers(logged), "stdout": None, "stderr": None}
    if shape == "raw":
        return {"output": logged, "stdout": None, "stderr": None}
    out, err = demux(logged)
    return {"output": logged, "stdout": out, "stderr": err}


__all__ = [
    "EXIT_PREFIX",
    "STDERR_PREFIX",
    "STDOUT_PREFIX",
    "CommandPaths",
    "answer",
    "demux",
    "output_shape",
    "strip_markers",
    "wrapper",
]
