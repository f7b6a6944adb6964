"""Per-test chaos seeds and replay commands.

A test's fault decisions must depend only on the session's chaos seed, the test's own node id and its plan, never
on which other tests ran or in what order; and a failing test must be reproducible with one command. The seed is a
stable hash (blake2b, not Python's salted ``hash``) of those three, and the replay command names the test and the
decision log its failure left behind.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

__all__ = ["DEFAULT_CHAOS_SEED", "derive_seed", "log_path_for", "parse_chaos_seed", "replay_command"]

#: The session chaos seed when ``--chaos-seed`` is not given: fixed, so a plain ``pytest`` run is reproducible.
DEFAULT_CHAOS_SEED = 0

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DECIMAL = re.compile(r"[0-9]+")  # ASCII digits: int() alone would also take "1_0" and other scripts' digits


def parse_chaos_seed(text: str) -> int:
    """``--chaos-seed`` as given on the command line: decimal digits only (``010`` is ten), else a clear error.

    Decimal only, because the seed is printed back in replay commands and headers as a decimal number: a ``0x10``
    accepted here would come back as ``16``, and Python's base-0 reading refuses a leading zero outright."""
    digits = text.strip()
    if not _DECIMAL.fullmatch(digits):
        raise ValueError(f"--chaos-seed must be a non-negative decimal integer, got {text!r}")
    return int(digits)


def derive_seed(chaos_seed: int, nodeid: str, plan_seed: int = 0) -> int:
    """The fault-plan seed of one test: a 32-bit stable hash of the session seed, the node id and the plan's seed."""
    text = f"{chaos_seed}\x1f{nodeid}\x1f{plan_seed}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big")


def log_path_for(log_dir: Path, nodeid: str, suffix: str = "") -> Path:
    """Where a test's decision log goes: one readable, filesystem-safe file name per node id."""
    stem = _UNSAFE.sub("_", nodeid).strip("_")[:150] or "test"
    digest = hashlib.blake2b(nodeid.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return log_dir / f"{stem}-{digest}{suffix}.jsonl"


def replay_command(nodeid: str, log_path: Path, chaos_seed: int = DEFAULT_CHAOS_SEED) -> str:
    """The one shell command that reruns ``nodeid`` answering every request from the decisions in ``log_path``.

    A chaos seed other than the default goes with it: the log holds the fault decisions, but what else the seed
    starts (the emulated Daytona's listing order) comes from the seed."""
    command = f"pytest {shlex.quote(nodeid)} --chaos-replay={shlex.quote(str(log_path))}"
    return command if chaos_seed == DEFAULT_CHAOS_SEED else f"{command} --chaos-seed={chaos_seed}"
