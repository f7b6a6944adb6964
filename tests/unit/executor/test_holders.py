"""A long-lived dir (a sandbox's home) belongs to the last of the uids running in it, and to root when none is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emulator.executor.holders import Holders

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")


def _owners(root: Path) -> set[int]:
    return {root.stat().st_uid} | {p.lstat().st_uid for p in root.rglob("*")}


@needs_root
def test_the_tree_goes_to_the_holder_left_then_to_root(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "d").mkdir(parents=True)
    (home / "d" / "f").write_text("x")
    holders = Holders()
    holders.take(str(home), 4001, 65534)
    assert _owners(home) == {4001}
    holders.take(str(home), 4002, 65534)  # a second run of the same sandbox, at the same time
    (home / "made-by-4002").touch()
    os.chown(home / "made-by-4002", 4002, 65534)
    assert holders.holding(str(home)) == [4001, 4002]
    holders.let_go(str(home), 4002)  # its uid goes back to the pool: nothing may stay its
    assert _owners(home) == {4001}
    holders.let_go(str(home), 4001)
    assert _owners(home) == {0} and holders.holding(str(home)) == []


@needs_root
def test_taking_again_moves_a_holder_last_and_letting_go_of_a_gone_dir_is_quiet(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    holders = Holders()
    holders.take(str(home), 4001, 65534)
    holders.take(str(home), 4002, 65534)
    holders.take(str(home), 4001, 65534)  # an interpreter context's next execution
    assert holders.holding(str(home)) == [4002, 4001] and _owners(home) == {4001}
    home.rmdir()  # its sandbox was deleted
    holders.let_go(str(home), 4001)
    holders.let_go(str(home), 4002)
    assert holders.holding(str(home)) == []
    holders.let_go(str(tmp_path / "never-held"), 4003)
