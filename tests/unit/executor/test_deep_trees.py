"""Trees a program nests deeper than Python's recursion limit and than ``PATH_MAX`` are removed and handed over.

A program makes them by changing into each directory it makes. ``shutil.rmtree`` and ``os.fwalk`` recurse once
per level (``RecursionError``), and a walk by path fails past ``PATH_MAX``: before, such a tree made the work dir's
removal fail (left in the warm interpreter's private tmpfs, which is memory, for good), a Daytona sandbox impossible
to delete, and a hand-over to the next run's uid raise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emulator.executor.trees import chown_tree, remove_tree

from .conftest import Runner
from .test_private_tmp import _one_shot

DEPTH = 3000  # 6,000 bytes of "d/" below the root: past PATH_MAX (4,096) and the 1,000 frames of the default limit
NEST = f"""import os
for _ in range({DEPTH}):
    os.mkdir('d')
    os.chdir('d')
open('leaf', 'w').write('x')
os.chmod('.', 0o500)  # the deepest directory read-only, its parent unreadable: each must be fixed on the way
os.chdir('..')
os.chmod('d', 0)
"""


def _nest(root: Path) -> None:
    here = os.getcwd()
    root.mkdir()
    os.chdir(root)
    try:
        for _ in range(DEPTH):
            os.mkdir("d")
            os.chdir("d")
        Path("leaf").write_text("x")
    finally:
        os.chdir(here)


def _entries(root: Path) -> tuple[int, set[int]]:
    """How many entries the tree holds, and their owners (walked by descriptor, as deep as it goes)."""
    count, owners = 0, set()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            names = os.listdir(fd)
            for name in names:
                count += 1
                owners.add(os.stat(name, dir_fd=fd, follow_symlinks=False).st_uid)
            if "d" not in names:
                return count, owners
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def test_remove_tree_removes_a_tree_of_any_depth(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    _nest(root)
    assert remove_tree(str(root)) and not root.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_chown_tree_hands_over_a_tree_of_any_depth(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    _nest(root)
    try:
        chown_tree(str(root), 4321, 4321)
        assert _entries(root) == (DEPTH + 1, {4321})
        assert os.stat(root).st_uid == 4321
    finally:
        remove_tree(str(root))  # pytest's own clean-up of tmp_path is a shutil.rmtree


def test_a_programs_deep_tree_goes_with_its_work_dir(runner: Runner) -> None:
    result, path = runner.call(_one_shot(runner.executor, NEST))
    assert result.return_code == 0, result.stderr
    assert result.workdir_removed or runner.mode == "faithful"  # the fast path's warm interpreter removes it
    assert not os.path.lexists(path)
    listing, _ = runner.call(_one_shot(runner.executor, "import os\nprint(os.listdir('..'))\n"))
    assert os.path.basename(path) not in (listing.stdout or "")  # nor in the private temp root the runs share


def test_remove_tree_never_touches_what_lies_above(tmp_path: Path) -> None:
    """A path already gone, or one that cannot be removed, leaves its parent's mode alone (it once made a missing
    work dir's parent, the temp root, mode 700)."""
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    parent.chmod(0o1777)
    assert remove_tree(str(parent / "gone"))
    (parent / "f").write_text("x")
    assert remove_tree(str(parent / "f"))  # not a directory: rmtree fails on the path itself
    assert not (parent / "f").exists()
    assert parent.stat().st_mode & 0o7777 == 0o1777
