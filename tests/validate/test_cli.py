"""``validate DIR``: the human report, ``--json``, and the exit codes 0 (ok), 1 (violations), 2 (usage)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.validate import register_cli


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sandbox-emulator")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    status: int = args.func(args)
    return status


def _broken(good_dump: Path, tmp_path: Path) -> Path:
    lines = (good_dump / "1.jsonl").read_text(encoding="utf-8").splitlines()
    entries = [json.loads(line) for line in lines]
    for entry in entries:
        entry["step"] = 9  # every line: wrong step
    directory = tmp_path / "broken"
    directory.mkdir()
    (directory / "1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return directory


def test_ok_dump_exits_0_with_a_table(good_dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", str(good_dump)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"OK: {good_dump}: 1 file(s), 6 line(s), 6 entries; 0 violation(s), 1 note(s)")
    assert "  score                     6           0      0" in out
    assert "1.jsonl:6: tool_pairing: turn 2 (the last): 1 call(s) left unanswered" in out


def test_violations_exit_1_and_show_the_first_lines(
    good_dump: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["validate", str(_broken(good_dump, tmp_path)), "--max-shown", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED:") and "violations (first 2 of 6):" in out
    assert "  1.jsonl:1: step: step is 9 but the file is for step 1\n  1.jsonl:2: step:" in out
    assert "1.jsonl:3: step" not in out


def test_json_report(good_dump: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", str(_broken(good_dump, tmp_path)), "--json", "--reward", "none"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["reward"] == "none"
    assert (report["files"], report["lines"], report["entries"]) == (["1.jsonl"], 6, 6)
    assert report["checks"]["step"] == {"checked": 6, "violations": 6, "notes": 0}
    assert report["checks"]["score"]["checked"] == 0  # --reward none
    assert report["violations"][0] == {
        "file": "1.jsonl",
        "line": 1,
        "check": "step",
        "message": "step is 9 but the file is for step 1",
    }


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert run(["validate", str(tmp_path)]) == 2
    assert "no *.jsonl files" in capsys.readouterr().err
    assert run(["validate", str(tmp_path / "notes.txt")]) == 2
    assert "not a directory" in capsys.readouterr().err
    odd = tmp_path / "odd"
    (odd / "1.jsonl").mkdir(parents=True)  # a dump's name on something that is no file
    assert run(["validate", str(odd)]) == 2
    assert f"{odd / '1.jsonl'}: not a regular file" in capsys.readouterr().err
    assert run(["validate", str(tmp_path), "--max-shown", "-1"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        run(["validate", str(tmp_path), "--reward", "math"])
    assert exit_info.value.code == 2


def test_what_cannot_be_read_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a defect of the dump: nothing of it can be checked, so exit 2 with one line, never a traceback."""
    assert run(["validate", ""]) == 2
    assert capsys.readouterr().err == "validate: no directory named (an empty path)\n"
    (tmp_path / "1.jsonl").symlink_to("/proc/self/mem")  # a regular file whose read fails (EIO), even for root
    assert run(["validate", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"validate: {tmp_path / '1.jsonl'}: cannot read: Input/output error\n"

    def denied(self: Path) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", denied)
    assert run(["validate", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"validate: {tmp_path}: cannot read: Permission denied\n"


def test_summary_and_shown_lines_for_other_commands(good_dump: Path, tmp_path: Path) -> None:
    from harness.validate import validate_dir

    report = validate_dir(_broken(good_dump, tmp_path))
    assert report.summary_line() == "1 file(s), 6 line(s), 6 entries; 6 violation(s), 1 note(s)"
    assert report.shown_lines(1) == ["1.jsonl:1: step: step is 9 but the file is for step 1"]


@pytest.mark.parametrize("as_json", [False, True])
def test_an_undecodable_file_name_prints_on_a_strict_stdout(good_dump: Path, tmp_path: Path, as_json: bool) -> None:
    import os
    import subprocess
    import sys

    directory = tmp_path / "names"
    directory.mkdir()
    os.link(good_dump / "1.jsonl", os.path.join(os.fsencode(directory), b"st\xffep.jsonl"))
    command = "from harness.cli import main; raise SystemExit(main())"
    argv = [sys.executable, "-c", command, "validate", str(directory), *(["--json"] if as_json else [])]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    assert done.returncode == 1, done.stderr.decode(errors="replace")  # a name that is not <step>.jsonl: a violation
    text = done.stdout.decode("utf-8")  # valid UTF-8, whatever the name's bytes
    assert "st\\udcffep.jsonl" in text and b"Traceback" not in done.stderr
    if as_json:
        assert json.loads(text)["files"] == ["st\udcffep.jsonl"]
