"""Handing a work dir or a home to a sandbox uid never changes the owner of a host file.

The sandbox's programs may still run while the tree is handed over, and can swap one of its directories for a link
to any host directory at any moment. The swap is made here at the worst moment: between two entries of the same
directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from emulator.executor.trees import chown_tree

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
SANDBOX_UID = 4321


@needs_root
def test_a_directory_swapped_for_a_link_midway_leads_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "home"
    (root / "d").mkdir(parents=True)
    for name in ("f1", "f2"):
        (root / "d" / name).write_text("the sandbox's\n")
    outside = tmp_path / "host"
    outside.mkdir()
    for name in ("f1", "f2"):
        (outside / name).write_text("the host's\n")
    real_chown = os.chown
    swapped: list[str] = []

    def chown_then_swap(path: Any, *args: Any, **kwargs: Any) -> None:
        if not swapped and os.path.basename(os.fspath(path)) in ("f1", "f2"):
            swapped.append(os.fspath(path))  # the first entry of d: the program swaps d for a link now
            os.rename(root / "d", root / "d-moved")
            os.symlink(outside, root / "d")
        real_chown(path, *args, **kwargs)

    monkeypatch.setattr(os, "chown", chown_then_swap)
    chown_tree(str(root), SANDBOX_UID, SANDBOX_UID)
    monkeypatch.undo()
    assert swapped
    assert [(outside / name).stat().st_uid for name in ("f1", "f2")] == [os.geteuid()] * 2
    assert {p.stat().st_uid for p in (root / "d-moved").iterdir()} == {SANDBOX_UID}  # the tree's own files, all


@needs_root
def test_links_in_the_tree_are_changed_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "home"
    root.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("the host's\n")
    (root / "link").symlink_to(victim)
    (root / "dirlink").symlink_to(tmp_path)
    chown_tree(str(root), SANDBOX_UID, SANDBOX_UID)
    assert victim.stat().st_uid == os.geteuid() and tmp_path.stat().st_uid == os.geteuid()
    assert (root / "link").lstat().st_uid == SANDBOX_UID and root.stat().st_uid == SANDBOX_UID
