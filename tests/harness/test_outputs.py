"""Output paths: a bad ``--out`` or ``--json`` is one clear error before the work, and a file is written whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.cli import main as cli_main
from harness.outputs import dir_problem, file_problem, write_text

#: A directory that exists but where no file can be made, whoever runs the tests (root included).
UNWRITABLE = Path("/proc")


def test_an_output_dir_is_created_with_its_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert dir_problem(target, "--out") is None
    assert target.is_dir() and list(target.iterdir()) == []  # the write check leaves nothing behind


@pytest.mark.parametrize(
    ("name", "message"),
    [("file", "exists and is not a directory"), ("file/below", "cannot create it"), ("proc", "cannot write there")],
)
def test_a_bad_output_dir_is_one_clear_error(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / "file").write_text("kept\n")
    target = UNWRITABLE if name == "proc" else tmp_path / name
    problem = dir_problem(target, "--out")
    assert problem is not None and problem.startswith("--out ") and message in problem
    assert (tmp_path / "file").read_text() == "kept\n"


def test_an_output_file_is_checked_without_touching_it(tmp_path: Path) -> None:
    earlier = tmp_path / "figures.json"
    earlier.write_text("earlier figures\n")
    assert file_problem(earlier, "--json") is None
    assert earlier.read_text() == "earlier figures\n"  # not truncated by the check
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures.json"]


@pytest.mark.parametrize(
    ("where", "message"),
    [("dir", "is a directory"), ("missing/x.json", "no such directory"), ("proc", "cannot write there")],
)
def test_a_bad_output_file_is_one_clear_error(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "dir").mkdir()
    target = UNWRITABLE / "x.json" if where == "proc" else tmp_path / where
    problem = file_problem(target, "--json")
    assert problem is not None and problem.startswith("--json ") and message in problem
    assert not (tmp_path / "missing").exists()  # a typo in the path is not made into a new tree


def test_a_file_is_written_whole_with_the_usual_mode(tmp_path: Path) -> None:
    target = tmp_path / "figures.json"
    target.write_text("old\n")
    assert write_text(target, "new\n", "--json") is None
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["figures.json"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_write_is_one_line(tmp_path: Path) -> None:
    problem = write_text(UNWRITABLE / "x.json", "{}\n", "--json")
    assert problem is not None and problem.startswith("cannot write --json '/proc/x.json': ")


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--backends", "local-subprocess", "--out", "/proc/nope"],
        ["bench-throughput", "--json", "/proc/nope/x.json"],
        ["bench-daytona", "--json", "/proc/nope/x.json"],
        ["bench-modes", "--json", "/proc/nope/x.json"],
        ["rollout", "--out", "/proc/nope"],
        ["rollout", "--json", "/proc/nope/x.json"],
    ],
)
def test_commands_refuse_a_bad_output_before_the_work(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[0] == "rollout" and "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "rollouts")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "/proc/nope" in err and "Traceback" not in err
    assert "machine speed" not in err  # nothing was measured first


def test_a_missing_output_dir_can_be_checked_without_making_it(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert dir_problem(target, "--out", create=False) is None
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("kept\n")
    problem = dir_problem(tmp_path / "file" / "below", "--out", create=False)
    assert problem is not None and "is not a directory" in problem
    problem = dir_problem(UNWRITABLE / "below", "--out", create=False)
    assert problem is not None and "cannot create it in '/proc'" in problem


def test_a_path_that_cannot_be_looked_into_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parent without search permission makes ``exists()`` raise (root never sees it, so it is simulated)."""

    def denied(self: Path, *args: object, **kwargs: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "stat", denied)
    for problem in (
        dir_problem(tmp_path / "x", "--out"),
        dir_problem(tmp_path / "x", "--out", create=False),
        file_problem(tmp_path / "x.json", "--json"),
    ):
        assert problem is not None and problem.endswith("cannot look there: Permission denied")


def test_a_symbolic_link_is_followed_and_kept(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "summary.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert file_problem(link, "--json") is None
    assert write_text(link, "new\n", "--json") is None
    assert link.is_symlink() and target.read_text() == "new\n"


def test_a_device_is_written_in_place_not_replaced() -> None:
    assert file_problem("/dev/null", "--json") is None
    assert write_text("/dev/null", "discarded\n", "--json") is None
    assert Path("/dev/null").is_char_device()
