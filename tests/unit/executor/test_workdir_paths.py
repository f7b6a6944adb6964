"""A planned work dir's paths (``DeferredWorkdir``'s checks and ``planned_fetch``) are the made dir's: the same
names inside, the same refusals outside (one function, :func:`emulator.executor.workdir.resolve_in`, for all)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emulator.executor.model import WorkdirSetup
from emulator.executor.workdir import DeferredWorkdir, Workdir, planned_fetch

ESCAPES = ["..", "../x", "a/../../x", ".", "a/.."]
INVALID = ["", "/etc/passwd", "a\0b"]


def test_planned_fetch_reads_the_files_inside_and_nothing_else(tmp_path: Path) -> None:
    """What a timeout of 0 returns: the restored files the fetch names inside the dir, once each; a name that is
    not relative or climbs out of the dir is no file of it."""
    real = str(tmp_path / "tmpplanned")
    files = [(os.path.join(real, "a.txt"), b"A", False), (os.path.join(real, "d", "b.txt"), b"B", False)]
    fetch = [
        "a.txt",
        "d/../a.txt",
        "d/b.txt",
        "a.txt",
        "missing",
        *ESCAPES,
        *INVALID,
        f"../{os.path.basename(real)}/a.txt",
    ]
    setup = WorkdirSetup(path=real, files=files, fetch=fetch, real_path=real)
    back_in = f"../{os.path.basename(real)}/a.txt"  # out and back in: the dir's own file
    assert planned_fetch(setup) == {"a.txt": b"A", "d/../a.txt": b"A", "d/b.txt": b"B", back_in: b"A"}


@pytest.mark.parametrize(("rel", "message"), [(r, "path escapes") for r in ESCAPES] + [(r, "invalid") for r in INVALID])
def test_a_planned_dir_refuses_what_a_made_one_refuses(tmp_path: Path, rel: str, message: str) -> None:
    planned = DeferredWorkdir(root=str(tmp_path))
    with Workdir(root=str(tmp_path)) as made:
        for workdir in (planned, made):
            with pytest.raises(ValueError, match=message):
                workdir.write_file(rel, b"x")
