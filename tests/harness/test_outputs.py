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
