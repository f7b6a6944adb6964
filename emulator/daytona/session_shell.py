"""A Daytona session's shell, as the daemon keeps it: one shell per session, which runs its commands one after the
other, each sourced in it (``. cmd.sh``), so that a ``cd``, a variable, an ``export``, a function, an alias or a
``shopt`` of one command is there for the next.

Here each command runs in a bash of its own, which loads the session's state first and writes it again after the
command: the shell options (``shopt``), variables (read-only ones included, not the shell's own), the sandbox
variables the command unset or stopped exporting, functions, aliases and the working directory. The state is a
file in the sandbox's home (under ``.daytona/sessions/``, named for the session and a token of its own, so a new
session of the same name starts afresh), read and written by the command's own uid only, never by the emulator.
What a command leaves running in the background does not outlive it here (it does on the real service), its traps
are cleared when it ends (the daemon's shell keeps them until the session ends) and ``set -o`` options are not kept.

The output is kept as the daemon logs it: each line of stdout and stderr, prefixed with its stream's marker
(``\x01\x01\x01``, ``\x02\x02\x02``) and ended with a newline (a last line without one gets one); what the
answer holds depends on the SDK's version, as the daemon decides it (see :func:`output_shape`).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

STDOUT_PREFIX = "\x01\x01\x01"
STDERR_PREFIX = "\x02\x02\x02"

# The shell's own variables, and those it changes by itself: never carried from one command to the next.
_SHELL_OWN = (
    "BASH|BASHOPTS|BASHPID|BASH_ALIASES|BASH_ARGC|BASH_ARGV|BASH_ARGV0|BASH_CMDS|BASH_COMMAND|BASH_EXECUTION_STRING|"
    "BASH_LINENO|BASH_SOURCE|BASH_SUBSHELL|BASH_VERSINFO|BASH_VERSION|EUID|UID|PPID|SHELLOPTS|RANDOM|SRANDOM|"
    "SECONDS|LINENO|EPOCHREALTIME|EPOCHSECONDS|FUNCNAME|GROUPS|PIPESTATUS|DIRSTACK|HISTCMD|SHLVL|OPTIND|OPTARG|"
    "OPTERR|_|PWD|OLDPWD|COLUMNS|LINES|__dtn_*"
)

# Run after the command, as its own first act: nothing the command changed may stop it (its options, its IFS, its
# traps, a redirection of its stdout by exec); what it writes goes to the state file alone.
_DUMP = f"""\
builtin trap - EXIT DEBUG ERR RETURN
builtin set +euxvo pipefail +o noglob
{{
builtin shopt -p
while IFS= builtin read -r __dtn_v; do
  case $__dtn_v in {_SHELL_OWN}) continue;; esac
  builtin declare -p "$__dtn_v"
done < <(builtin compgen -v)
for __dtn_v in "${{__dtn_base[@]}}"; do
  if [[ ! -v $__dtn_v ]]; then builtin printf 'builtin unset -v %q\n' "$__dtn_v"
  elif [[ ${{!__dtn_v@a}} != *x* ]]; then builtin printf 'builtin export -n %q\n' "$__dtn_v"; fi
done
builtin declare -f
builtin alias -p
builtin printf 'builtin cd -- %q\nOLDPWD=%q\n' "$PWD" "${{OLDPWD-}}"
}} > "$__dtn_state.new" 2>/dev/null && builtin command mv -f -- "$__dtn_state.new" "$__dtn_state"
"""


def script(command_file: str, state_file: str) -> str:
    """The bash script that runs one command of a session: the state loaded (from ``state_file``, if there), the
    command sourced with an empty stdin (the daemon's for a command run synchronously), the state written back."""
    return (
        f"__dtn_state={shlex.quote(state_file)}\n"
        "builtin mapfile -t __dtn_base < <(builtin compgen -e)\n"
        '{ builtin command mkdir -p -- "${__dtn_state%/*}"\n'
        '[[ -f $__dtn_state ]] && . "$__dtn_state"; } >/dev/null 2>&1\n'
        f"{{ . {shlex.quote(command_file)}; }} </dev/null\n"
        f"{{ __dtn_ec=$?\n{_DUMP}}} >/dev/null 2>&1\n"
        'builtin exit "$__dtn_ec"\n'
    )


def _lines(text: str, prefix: str) -> str:
    """``text`` as the daemon's labeler writes it: each line prefixed and newline-ended (``read -r`` drops NULs)."""
    if not text:
        return ""
    body = text[:-1] if text.endswith("\n") else text
    return "".join(f"{prefix}{line}\n" for line in body.replace("\0", "").split("\n"))


def log(stdout: str, stderr: str) -> str:
    """The command's log: its stdout lines, then its stderr lines (the daemon interleaves them as they come; the
    order between the two streams is not kept here)."""
    return _lines(stdout, STDOUT_PREFIX) + _lines(stderr, STDERR_PREFIX)


def demux(text: str) -> tuple[str, str]:
    """Each stream's text back out of a log, as the daemon's ``DemuxLogBytes``."""
    out: list[str] = []
    err: list[str] = []
    for match in re.finditer(r"(\x01\x01\x01|\x02\x02\x02)((?:(?!\x01\x01\x01|\x02\x02\x02)[\s\S])*)", text):
        (out if match.group(1) == STDOUT_PREFIX else err).append(match.group(2))
    return "".join(out), "".join(err)


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


def answer(shape: Shape, stdout: str, stderr: str) -> dict[str, str]:
    """The output fields of an answer (``output``, and ``stdout``/``stderr`` when split)."""
    logged = log(stdout, stderr)
    if shape == "combined":
        return {"output": logged.replace(STDOUT_PREFIX, "").replace(STDERR_PREFIX, "")}
    if shape == "raw":
        return {"output": logged}
    out, err = demux(logged)
    return {"output": logged, "stdout": out, "stderr": err}


__all__ = ["STDERR_PREFIX", "STDOUT_PREFIX", "answer", "demux", "log", "output_shape", "script"]
