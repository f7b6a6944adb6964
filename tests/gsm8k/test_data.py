"""GSM8K data: annotations and ground truths parsed as verl reads them, both file forms, clear errors, the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness.gsm8k import (
    SYSTEM_PROMPT,
    Calculation,
    DataError,
    Problem,
    convert_jsonl_to_parquet,
    extract_ground_truth,
    load_problems,
    parse_calculations,
    prompt_messages,
    register_cli,
    to_verl_row,
    write_verl_parquet,
)
from harness.gsm8k.data import INSTRUCTION_SUFFIX

pa = pytest.importorskip("pyarrow", reason="parquet needs pyarrow (the [verl] extra brings it)")
pq = pytest.importorskip("pyarrow.parquet")

SOLUTION = "Janet has 16 - 3 - 4 = <<16-3-4=9>>9 eggs left.\nShe earns 9 * 2 = $<<9*2=18>>18 a day.\n#### 18"


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_parse_calculations_in_order_split_at_the_last_equals() -> None:
    assert parse_calculations(SOLUTION) == (Calculation("16-3-4", "9"), Calculation("9*2", "18"))
    # Negatives, decimals, and an annotation without "=" (skipped).
    text = "<<-4+11=7>> <<7-9=-2>> <<3*2.40=7.2>> <<note>> <<124=124>>"
    assert parse_calculations(text) == (
        Calculation("-4+11", "7"),
        Calculation("7-9", "-2"),
        Calculation("3*2.40", "7.2"),
        Calculation("124", "124"),
    )
    assert parse_calculations("no annotations here\n#### 3") == ()


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        (SOLUTION, "18"),
        ("so 40,800 dollars\n#### 40,800", "40800"),
        ("it drops to\n#### -155", "-155"),
        ("each costs\n#### 0.25", "0.25"),
        ("first\n#### 7\nthen\n#### 8", "7"),  # verl's preprocessing takes the first match
    ],
)
def test_extract_ground_truth_as_verl_preprocesses(solution: str, expected: str) -> None:
    assert extract_ground_truth(solution) == expected


def test_extract_ground_truth_without_answer_line() -> None:
    with pytest.raises(ValueError, match="####"):
        extract_ground_truth("The answer is 18.")


def test_load_raw_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [{"question": "Q one?", "answer": SOLUTION}, {"question": "Q two?", "answer": "x\n#### 1,234"}],
    )
    path.write_text(path.read_text() + "\n")  # a trailing blank line is allowed
    problems = load_problems(path)
    assert [p.index for p in problems] == [0, 1]
    assert [p.split for p in problems] == ["train", "train"]  # from the file name
    assert problems[0] == Problem(
        0, "Q one?", SOLUTION, "18", (Calculation("16-3-4", "9"), Calculation("9*2", "18")), "train"
    )
    assert problems[1].ground_truth == "1234"
    assert load_problems(path, limit=1) == problems[:1]
    assert load_problems(path, limit=0) == []


def test_a_question_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    # JSON allows U+2028, U+2029 and U+0085 raw in a string; only "\n" ends a JSON line (CRLF too)
    question = "Line one\u2028line two\u2029three\x85four\x1cfive?"
    path = tmp_path / "test.jsonl"
    record = json.dumps({"question": question, "answer": SOLUTION}, ensure_ascii=False)
    path.write_text(record + "\r\n" + record + "\n", encoding="utf-8")
    assert [p.question for p in load_problems(path)] == [question, question]


def test_verl_row_shape(bundled: list[Problem]) -> None:
    problem = bundled[0]
    row = to_verl_row(problem)
    assert row["data_source"] == "openai/gsm8k"
    assert row["agent_name"] == "tool_agent"
    assert row["ability"] == "math"
    assert row["reward_model"] == {"style": "rule", "ground_truth": problem.ground_truth}
    assert row["prompt"] == prompt_messages(problem)
    assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert (
        row["prompt"][1]["content"]
        == problem.question + " Let's think step by step and output the final answer after `####`."
    )
    extra = row["extra_info"]
    assert extra == {
        "split": problem.split,
        "index": problem.index,
        "answer": problem.solution,
        "question": problem.question,
        "need_tools_kwargs": True,
        "tools_kwargs": {"code_interpreter": {"create_kwargs": {"ground_truth": problem.ground_truth}}},
    }
    assert "code_interpreter" in SYSTEM_PROMPT and "####" in SYSTEM_PROMPT


def test_round_trip_jsonl_parquet_problems(tmp_path: Path, bundled: list[Problem]) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    out = tmp_path / "out" / "test.parquet"
    assert convert_jsonl_to_parquet(BUNDLED_PROBLEMS, out) == len(bundled)
    assert load_problems(out) == bundled
    assert load_problems(out, limit=5) == bundled[:5]
    assert [p.name for p in out.parent.iterdir()] == ["test.parquet"]  # no temporary file left
    columns = pq.read_table(out).column_names
    assert set(columns) == {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}


def test_convert_sets_split_and_limit(tmp_path: Path, bundled: list[Problem]) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    out = tmp_path / "train.parquet"
    assert convert_jsonl_to_parquet(BUNDLED_PROBLEMS, out, split="train", limit=3) == 3
    loaded = load_problems(out)
    assert [p.split for p in loaded] == ["train"] * 3
    assert [p.question for p in loaded] == [p.question for p in bundled[:3]]


def test_loads_verl_parquet_of_other_tools(tmp_path: Path) -> None:
    """verl's own preprocessing (calc_gsm8k_reward tool, no agent_name) loads too; the ground truth is
    reward_model's, the question comes from the prompt when extra_info lacks it."""
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "How many?" + INSTRUCTION_SUFFIX},
            ],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "18"},
            "extra_info": {
                "split": "train",
                "index": 41,
                "answer": SOLUTION,
                "need_tools_kwargs": True,
                "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "18"}}},
            },
        }
    ]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    [problem] = load_problems(path)
    assert (problem.index, problem.question, problem.split, problem.ground_truth) == (41, "How many?", "train", "18")
    assert problem.calculations == parse_calculations(SOLUTION)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"bad\.jsonl:2: not valid JSON"),
        ("[1, 2]", r"bad\.jsonl:2: expected a JSON object"),
        ('{"answer": "x\\n#### 1"}', r"bad\.jsonl:2: missing field 'question'"),
        ('{"question": "Q?"}', r"bad\.jsonl:2: missing field 'answer'"),
        ('{"question": "Q?", "answer": 7}', r"bad\.jsonl:2: field 'answer' must be a non-empty string"),
        ('{"question": "Q?", "answer": "no final line"}', r"bad\.jsonl:2: the solution has no '#### <number>' line"),
        ("[" * 100_000 + "]" * 100_000, r"bad\.jsonl:2: not valid JSON \(nested too deeply\)"),
    ],
)
def test_bad_jsonl_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "Fine?", "answer": "ok\n#### 1"}) + "\n" + line + "\n")
    with pytest.raises(DataError, match=message):
        load_problems(path)


def test_other_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"problems\.csv: unknown file type '\.csv'"):
        load_problems(tmp_path / "problems.csv")
    with pytest.raises(DataError, match=r"missing\.jsonl: no such file"):
        load_problems(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match=r"missing\.parquet: no such file"):
        load_problems(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(DataError, match=r"junk\.parquet: not a readable parquet file"):
        load_problems(junk)
    no_gt = tmp_path / "no_gt.parquet"
    pq.write_table(pa.Table.from_pylist([{"extra_info": {"index": 0, "answer": "a\n#### 1", "question": "q"}}]), no_gt)
    with pytest.raises(DataError, match=r"no_gt\.parquet: row 0: missing 'reward_model\.ground_truth'"):
        load_problems(no_gt)
    with pytest.raises(DataError, match="limit must be >= 0"):
        load_problems(no_gt, limit=-1)


def test_write_is_atomic_on_failure(tmp_path: Path, bundled: list[Problem], monkeypatch: pytest.MonkeyPatch) -> None:
    target = write_verl_parquet(bundled[:2], tmp_path / "data.parquet")
    before = target.read_bytes()

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", fail)
    with pytest.raises(OSError, match="disk full"):
        write_verl_parquet(bundled, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet"]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sandbox-emulator")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def test_cli_converts(tmp_path: Path, capsys: pytest.CaptureFixture[str], bundled: list[Problem]) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    out = tmp_path / "gsm8k.parquet"
    assert _cli(["gsm8k-convert", str(BUNDLED_PROBLEMS), str(out), "--split", "train", "--limit", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"wrote 4 problems to {out}"
    assert captured.err == ""
    assert [p.split for p in load_problems(out)] == ["train"] * 4


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Q?", "answer": "no answer line"}\n')
    out = tmp_path / "out.parquet"
    assert _cli(["gsm8k-convert", str(bad), str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {bad}:1: ")
    assert "Traceback" not in captured.err
    assert not out.exists()
    assert _cli(["gsm8k-convert", str(bad), str(tmp_path / "out.csv")]) == 2
    assert "must be a .parquet file" in capsys.readouterr().err
    assert _cli(["gsm8k-convert", str(tmp_path / "none.jsonl"), str(out)]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "\n\n", "   \n"])
def test_converting_no_problems_is_an_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    out = tmp_path / "e.parquet"
    assert _cli(["gsm8k-convert", str(empty), str(out)]) == 2
    assert capsys.readouterr().err == f"error: no problems in {empty}\n"
    assert not out.exists()
    with pytest.raises(DataError, match="no problems in"):
        convert_jsonl_to_parquet(empty, out)


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_convert_limit_must_be_at_least_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    out = tmp_path / "e.parquet"
    assert _cli(["gsm8k-convert", str(BUNDLED_PROBLEMS), str(out), "--limit", limit]) == 2
    assert capsys.readouterr().err == f"error: --limit must be >= 1, got {limit}\n"
    assert not out.exists()
    with pytest.raises(DataError, match="limit must be >= 1, got 0"):
        convert_jsonl_to_parquet(BUNDLED_PROBLEMS, out, limit=0)


def test_convert_paths_that_are_or_lack_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    source = str(BUNDLED_PROBLEMS)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for output in (blocker / "x.parquet", blocker / "a" / "b" / "x.parquet"):
        assert _cli(["gsm8k-convert", source, str(output)]) == 2
        err = capsys.readouterr().err
        assert err == f"error: {output}: {blocker} is not a directory\n", err
    assert blocker.read_text() == "not a directory"
    (tmp_path / "d.parquet").mkdir()
    assert _cli(["gsm8k-convert", source, str(tmp_path / "d.parquet")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'd.parquet'} is a directory\n"
    assert _cli(["gsm8k-convert", str(tmp_path), str(tmp_path / "o.parquet")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path} is a directory\n"
    with pytest.raises(DataError, match=r" is a directory$"):
        load_problems(tmp_path)
    # a missing directory is still made, as before
    nested = tmp_path / "new" / "sub" / "x.parquet"
    assert _cli(["gsm8k-convert", source, str(nested), "--limit", "2"]) == 0
    assert len(load_problems(nested)) == 2
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["d.parquet"]  # nothing written on an error


def test_convert_refuses_a_nameless_output_and_an_empty_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.gsm8k import BUNDLED_PROBLEMS

    assert _cli(["gsm8k-convert", str(BUNDLED_PROBLEMS), str(tmp_path / ".parquet")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / '.parquet'}: the output needs a name before .parquet\n"
    assert _cli(["gsm8k-convert", str(BUNDLED_PROBLEMS), str(tmp_path / "x.parquet"), "--split", " "]) == 2
    assert "split must name the data set's split" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
