"""A program that puts a link where its work dir, or a directory in it, was, reaches nothing through it.

The warm interpreter reads the requested files and removes the work dir after the program, as root. It once
resolved the dir's own name again when it did: with the dir swapped for a link to a host directory, it deleted that
directory's contents and returned its files to the client. The decoy lies outside the temp root, which the warm
interpreter's namespace would hide.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Runner
from .test_private_tmp import _one_shot


@pytest.fixture
def decoy() -> Iterator[Path]:
    """A host directory, not under the temp root, that any process may look into."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/var/tmp"
    path = Path(tempfile.mkdtemp(prefix="decoy-", dir=base))
    path.chmod(0o755)
    (path / "f1").write_text("host\n")
    (path / "sub").mkdir(mode=0o755)
    (path / "sub" / "g").write_text("host\n")
    yield path
    shutil.rmtree(path)


def _intact(decoy: Path) -> bool:
    return sorted(p.name for p in decoy.iterdir()) == ["f1", "sub"] and (decoy / "sub" / "g").read_text() == "host\n"


def test_a_work_dir_swapped_for_a_link_leaves_the_host_alone(runner: Runner, decoy: Path) -> None:
    code = f"""import os
here = os.getcwd()
os.chdir('/')
os.rename(here, here + '.moved')
os.symlink({str(decoy)!r}, here)
print('swapped')
"""
    result, path = runner.call(_one_shot(runner.executor, code, fetch=("f1", "sub/g")))
    assert (result.return_code, result.stdout) == (0, "swapped\n"), result.stderr
    assert not result.files  # the host's files are not the run's
    assert _intact(decoy)
    assert not os.path.lexists(path)  # the link went; the moved dir is left to the temp root's sweep


def test_a_directory_in_the_work_dir_swapped_for_a_link_leads_nowhere(runner: Runner, decoy: Path) -> None:
    code = f"""import os
os.mkdir('inner')
os.symlink({str(decoy)!r}, 'inner/link')
os.rename('inner', 'kept')
os.symlink({str(decoy)!r}, 'inner')
print('swapped')
"""
    result, path = runner.call(_one_shot(runner.executor, code, fetch=("inner/f1", "kept/link/sub/g")))
    assert (result.return_code, result.stdout) == (0, "swapped\n"), result.stderr
    assert not result.files
    assert _intact(decoy)
    assert not os.path.lexists(path)
