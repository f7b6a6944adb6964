"""Rollout dumps in verl's ``trainer.rollout_data_dir`` format, written atomically.

verl 0.9.1's trainer writes one ``{step}.jsonl`` per training step: one JSON object per sample with the keys
``input``, ``output`` (both decoded with ``skip_special_tokens=True``), ``gts``, ``score``, ``step``, then every
per-sample reward extra (e.g. ``acc`` for GSM8K) and ``request_id`` when the batch has one. It opens the file with
``"w"`` and writes line by line, so a crash mid-step leaves a half file. The same lines here, but the file only
appears once complete: a reader (the validator, a viewer) sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The keys verl writes first, in its order.
BASE_KEYS = ("input", "output", "gts", "score", "step")


def decode_sample(tokenizer: Any, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> tuple[str, str]:
    """``(input, output)`` of one sample as verl's dump decodes them (special tokens, padding included, dropped)."""
    prompt = tokenizer.decode([int(i) for i in prompt_ids], skip_special_tokens=True)
    response = tokenizer.decode([int(i) for i in response_ids], skip_special_tokens=True)
    return str(prompt), str(response)


def build_entries(
    inputs: Sequence[str],
    outputs: Sequence[str],
    gts: Sequence[Any],
    scores: Sequence[float],
    step: int,
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """One dict per sample, keys in verl's order; an ``extra`` column whose length is not the sample count is
    dropped without a word, as verl drops it (a batch-level value is not a per-sample field)."""
    n = len(inputs)
    for name, column in (("outputs", outputs), ("gts", gts), ("scores", scores)):
        if len(column) != n:
            raise ValueError(f"{name} has {len(column)} items but inputs has {n}; every column needs one per sample")
    columns: dict[str, Sequence[Any]] = {
        "input": inputs,
        "output": outputs,
        "gts": gts,
        "score": scores,
        "step": [step] * n,
    }
    for key, values in (extra or {}).items():
        if len(values) == n:
            columns[key] = values  # a key already present keeps its place, as in verl's dict update
    return [{key: values[i] for key, values in columns.items()} for i in range(n)]


def dump_line(entry: Mapping[str, Any]) -> str:
    """One line of a dump, serialised exactly as verl does (``default=str`` for numpy scalars and the like)."""
    return json.dumps(entry, ensure_ascii=False, default=str) + "\n"


def step_path(dump_dir: str | Path, step: int) -> Path:
    """Where verl puts step ``step``'s samples."""
    return Path(dump_dir) / f"{step}.jsonl"


def temp_prefix(step: int) -> str:
    """Name prefix of step ``step``'s temporary file (hidden and not ``*.jsonl``, so readers skip it)."""
    return f".{step}.jsonl."


#: Name suffix of temporary files.
TEMP_SUFFIX = ".tmp"


def write_step(dump_dir: str | Path, step: int, entries: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``{step}.jsonl`` atomically: all lines or none, and the previous file intact until then.

    Every entry is serialised first (the slow part, and the one that can fail), so an exception or a kill there
    leaves no trace. The text then goes to a hidden temporary file in the same directory, is flushed and fsynced,
    and takes the final name with one ``os.replace``. An error while writing removes the temporary file; a kill in
    that short window can leave it (``.{step}.jsonl.*.tmp``: readers skip it, the validator notes it, the next write
    of this step removes it), but never a half ``{step}.jsonl``."""
    text = "".join(dump_line(entry) for entry in entries)
    directory = Path(dump_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = step_path(directory, step)
    prefix = temp_prefix(step)
    for stale in directory.glob(prefix + "*" + TEMP_SUFFIX):  # left by a writer killed while writing
        stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=directory)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644 & ~_umask())  # mkstemp makes it 0600; verl's open() would honour the umask
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)
    return target


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (best effort: not every platform lets a directory be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
