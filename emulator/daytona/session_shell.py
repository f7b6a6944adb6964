"""What a Daytona session's shell is fed, and how its log is read back (the daemon's ``pkg/session``).

The daemon keeps one shell per session, started when the session is created and fed each command on its stdin,
wrapped in a script that (1) starts two labelers, which read the command's stdout and stderr and append each line to
the command's log prefixed with its stream's marker (``\x01\x01\x01``, ``\x02\x02\x02``; a last line without a
newline gets one, a NUL is dropped), (2) sources the command file in the shell itself, its stdin empty for a
synchronous command and kept open for ``input`` to an asynchronous one, (3) waits for both labelers to drain, then
(4) records the exit code. So everything a command changes in its shell (directory, variables, functions, options,
traps, jobs) is there for the next one, and a background job that keeps the command's output open keeps the command
running.

Here the script is the emulator's own, with the same steps. Nothing of it has a path another sandbox could open: the
labelers are process substitutions, and they and the script write to the shell's descriptors 3 (stdout channel) and
4 (stderr channel), pipes the emulator reads; an asynchronous command's stdin is a ``cat`` of descriptor 5, a pipe the
emulator writes its input to, and a synchronous one's a FIFO the emulator makes for it in the session's directory
(mode 0600, the session's uid: no other sandbox's uid can open it), opened and closed at once by a background job of
the shell so that the command finds it at its end, as the daemon's ``input.pipe``. The command runs with 3, 4 and 5
closed (bash keeps copies of them at 10 and above, which a command could reach, as it could the daemon's log file).
Once both labelers have ended (or died: what they wrote is ahead in the pipes), the script ends the stderr channel's
part of the command with a record (``\x03\x03\x03E <command id>``) and the stdout channel's with the exit record
(``\x03\x03\x03X <command id> <exit code>``).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

STDOUT_PREFIX = "\x01\x01\x01"
STDERR_PREFIX = "\x02\x02\x02"
#: Starts a record line on a channel (never a log line: those start with a marker).
RECORD_PREFIX = b"\x03\x03\x03"


def _labeler(prefix: str, channel: int) -> str:
    octal = "".join(f"\\{ord(c):03o}" for c in prefix)
    return (
        f">(while IFS= builtin read -r __dtn_line || [[ -n $__dtn_line ]]; do "
        f"builtin printf '{octal}%s\\n' \"$__dtn_line\"; done >&{channel})"
    )


def wrapper(command_id: str, script: str, run_async: bool, fifo: str = "") -> str:
    """The script the session's shell runs for one command (one compound command: read whole before it runs).

    The traps are the daemon's: its script sets them on EXIT, HUP, INT and TERM, so a session's shell outlives a
    SIGTERM once it has run a command. A synchronous command reads ``fifo`` (a FIFO the emulator made), which a
    background job of the shell opens for writing and closes at once, as the daemon's ``cat /dev/null > "$ip" &``: the
    command finds its stdin at its end, and input sent while it runs comes to a later read."""
    q = shlex.quote
    stdin = '<&"$__dtn_in"' if run_async else f"<{q(fifo)}" if fifo else "</dev/null"
    lines = ["{", "builtin trap -- 'builtin :' EXIT HUP INT TERM"]
    if fifo and not run_async:  # before the labelers' descriptors exist: the job holds none of them open
        lines += [f"{{ builtin : ; }} >{q(fifo)} 3>&- 4>&- 5<&- &", "__dtn_ip_pid=$!"]
    lines += [
        f"exec {{__dtn_out}}> {_labeler(STDOUT_PREFIX, 3)}",
        "__dtn_out_pid=$!",
        f"exec {{__dtn_err}}> {_labeler(STDERR_PREFIX, 4)}",
        "__dtn_err_pid=$!",
    ]
    if run_async:
        lines += ["exec {__dtn_in}< <(exec cat <&5)", "__dtn_in_pid=$!"]
    closes = "{__dtn_out}>&- {__dtn_err}>&-" + (" {__dtn_in}<&-" if run_async else "")
    lines += [
        f'{{ . {q(script)}; }} {stdin} >&"$__dtn_out" 2>&"$__dtn_err" {closes} 3>&- 4>&- 5<&-',
        "__dtn_code=$?",
        f"exec {closes}",
    ]
    # The stdin's helpers go, then the labelers are waited for; each step errexit-proof (a `set -e` of the session's
    # must not end its shell on the wrapper's own plumbing). The `cat` is killed with SIGKILL: a SIGTERM sent before
    # the forked subshell has dropped the shell's TERM trap is caught and lost, and `wait` would then hang. The
    # synchronous command's writer is never signalled: if it still waits for a reader (the command ended before the
    # job opened the FIFO), a read-write open of the FIFO releases it.
    if run_async:
        lines.append(
            'builtin kill -KILL "$__dtn_in_pid" 2>/dev/null || builtin :; builtin wait "$__dtn_in_pid" 2>/dev/null || '
            "builtin :"
        )
    elif fifo:
        lines.append(
            f"[[ -p {q(fifo)} ]] && {{ builtin : ; }} <>{q(fifo)} 2>/dev/null || builtin :; "  # never a new file
            'builtin wait "$__dtn_ip_pid" 2>/dev/null || builtin :'
        )
    lines += [
        'builtin wait "$__dtn_out_pid" "$__dtn_err_pid" || builtin :',
        f"builtin printf '\\003\\003\\003E %s\\n' {q(command_id)} >&4",
        f"builtin printf '\\003\\003\\003X %s %s\\n' {q(command_id)} \"$__dtn_code\" >&3",
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
    "RECORD_PREFIX",
    "STDERR_PREFIX",
    "STDOUT_PREFIX",
    "answer",
    "demux",
    "output_shape",
    "strip_markers",
    "wrapper",
]
