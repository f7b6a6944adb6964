"""Rollout dumps in verl's ``trainer.rollout_data_dir`` format, written atomically.

verl 0.9.1's trainer writes one ``{step}.jsonl`` per training step: one JSON object per sample with the keys
``input``, ``output`` (both decoded with ``skip_special_tokens=True``), ``gts``, ``score``, ``step``, then every
per-sample reward extra (e.g. ``acc`` for GSM8K) and ``request_id`` when the batch has one. It opens the file with
``"w"`` and writes line by line, so a crash mid-step leaves a half file. The same lines here, but the file only
appears once complete: a reader (the validator, a viewer) sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

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
    """Write ``{step}.jsonl`` atomically: all lines or none.

    Lines go to an unnamed file in the same directory (Linux ``O_TMPFILE``; elsewhere a hidden temporary name,
    removed on any error) which is flushed, fsynced, then given its final name with ``os.replace``. If serialising
    an entry fails, or the process is killed while writing, the previous file (if any) is left as it was and no
    temporary file remains."""
    directory = Path(dump_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = step_path(directory, step)
    prefix = temp_prefix(step)
    for stale in directory.glob(prefix + "*" + TEMP_SUFFIX):  # left by a writer killed between link and rename
        stale.unlink(missing_ok=True)
    with _unnamed_file(directory, prefix) as (handle, publish):
        for entry in entries:
            handle.write(dump_line(entry))
        handle.flush()
        os.fsync(handle.fileno())
        publish(target)
    _fsync_directory(directory)
    return target


@contextlib.contextmanager
def _unnamed_file(directory: Path, prefix: str) -> Iterator[tuple[IO[str], Callable[[Path], None]]]:
    """A writable text file in ``directory`` and a function that atomically gives it its final name."""
    fd = _open_tmpfile(directory)
    if fd is not None:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:

            def publish_unnamed(target: Path) -> None:
                # An O_TMPFILE file gets a name only through a link; link to a temporary name, then rename over the
                # target (link itself cannot replace an existing file).
                named = directory / f"{prefix}{uuid.uuid4().hex}{TEMP_SUFFIX}"
                os.link(f"/proc/self/fd/{handle.fileno()}", named, follow_symlinks=True)
                try:
                    os.replace(named, target)
                except BaseException:
                    named.unlink(missing_ok=True)
                    raise

            yield handle, publish_unnamed
        return
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=directory)
    named = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:

            def publish_named(target: Path) -> None:
                os.replace(named, target)

            yield handle, publish_named
    finally:
        named.unlink(missing_ok=True)  # nothing to do once renamed


def _open_tmpfile(directory: Path) -> int | None:
    """An ``O_TMPFILE`` descriptor in ``directory``, or None where the OS or filesystem has none."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(directory, flag | os.O_WRONLY, 0o644)
    except OSError:
        return None


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
