"""GSM8K problems in the forms people have them: the release's raw JSONL and verl's preprocessed parquet.

The raw release has one ``{"question", "answer"}`` object per line; the answer carries ``<<expression=result>>``
calculator annotations and ends with ``#### N``. verl's preprocessing (``gsm8k_multiturn_w_tool.py``,
``gsm8k_tool_agent_loop.py``) writes parquet rows with ``data_source``, ``prompt``, ``ability``, ``reward_model``
and ``extra_info`` (plus ``agent_name``). Both load into :class:`Problem`; :func:`to_verl_row` writes the second
form for the ``code_interpreter`` tool. pyarrow is imported only when parquet is read or written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.paths import FIXTURES

#: GSM8K problems written for this project (see ``fixtures/gsm8k/README.md``). Resolved from the repository
#: checkout: the file is not packaged into the wheel.
BUNDLED_PROBLEMS = FIXTURES / "gsm8k" / "problems.jsonl"

#: The ``data_source`` verl's reward dispatch maps to its strict GSM8K scorer.
DATA_SOURCE = "openai/gsm8k"
#: What verl's preprocessing appends to every question.
INSTRUCTION_SUFFIX = " Let's think step by step and output the final answer after `####`."
SYSTEM_PROMPT = (
    "You are a careful math tutor solving grade-school word problems. Work through the problem step by step and "
    "do every calculation with the `code_interpreter` tool: send Python that prints the number you need, then "
    "use the number it prints. When you are done, write the final answer as `#### <answer>` on the last line, "
    "with the number alone (no units, no commas)."
)

_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_ANNOTATION = re.compile(r"<<([^<>]*)>>")


class DataError(ValueError):
    """Bad GSM8K input; the message names the file and the line or row."""


@dataclass(frozen=True)
class Calculation:
    """One ``<<expression=result>>`` annotation, as written."""

    expression: str
    result: str


@dataclass(frozen=True)
class Problem:
    """One GSM8K problem: the question, the reference solution, and the answer verl scores against."""

    index: int
    question: str
    solution: str
    ground_truth: str
    calculations: tuple[Calculation, ...] = ()
    split: str = "test"
    data_source: str = DATA_SOURCE


def extract_ground_truth(solution: str) -> str:
    """The number after the first ``#### `` with commas removed, as verl's preprocessing computes it."""
    match = _ANSWER.search(solution)
    if match is None:
        raise ValueError("the solution has no '#### <number>' line")
    return match.group(1).replace(",", "")


def parse_calculations(solution: str) -> tuple[Calculation, ...]:
    """The solution's annotations in order, split at their last ``=``; annotations without ``=`` are skipped."""
    found: list[Calculation] = []
    for body in _ANNOTATION.findall(solution):
        expression, equals, result = body.rpartition("=")
        if equals and expression.strip():
            found.append(Calculation(expression.strip(), result.strip()))
    return tuple(found)


def make_problem(index: int, question: str, solution: str, *, split: str = "test", **fields: Any) -> Problem:
    """A :class:`Problem` from a question and its reference solution (ground truth and annotations parsed)."""
    return Problem(
        index=index,
        question=question,
        solution=solution,
        ground_truth=str(fields.pop("ground_truth", None) or extract_ground_truth(solution)),
        calculations=parse_calculations(solution),
        split=split,
        **fields,
    )


def load_problems(path: str | Path, *, limit: int | None = None) -> list[Problem]:
    """Problems from a raw GSM8K ``.jsonl`` or a verl ``.parquet``; at most ``limit`` of them, in file order.

    Raw JSONL has no split or index: the split is taken from the file name (``train``/``test``, else ``test``) and
    the index is the problem's 0-based position, as verl's preprocessing numbers them."""
    source = Path(path)
    if limit is not None and limit < 0:
        raise DataError(f"{source}: limit must be >= 0, got {limit}")
    if _is_dir(source):  # before the suffix: a directory has none worth naming
        raise DataError(f"{source} is a directory")
    if source.suffix == ".jsonl":
        return _load_jsonl(source, limit, split=_split_from_name(source))
    if source.suffix == ".parquet":
        return _load_parquet(source, limit)
    raise DataError(f"{source}: unknown file type {source.suffix!r}; expected .jsonl (raw GSM8K) or .parquet (verl)")


def _is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where it cannot be looked at (reading it then says why)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _split_from_name(path: Path) -> str:
    stem = path.stem.lower()
    return next((split for split in ("train", "test") if split in stem), "test")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None


def _load_jsonl(path: Path, limit: int | None, *, split: str) -> list[Problem]:
    problems: list[Problem] = []
    # JSON Lines are split at "\n" only: str.splitlines() also splits at U+2028, U+0085 and others, which a JSON
    # string may hold raw
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if limit is not None and len(problems) >= limit:
            break
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise DataError(f"{where}: not valid JSON (nested too deeply)") from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object with 'question' and 'answer'")
        question = _text_field(record, "question", where)
        solution = _text_field(record, "answer", where)
        problems.append(_problem(len(problems), question, solution, where, split=split))
    return problems


def _text_field(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if value is None:
        raise DataError(f"{where}: missing field {key!r}")
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: field {key!r} must be a non-empty string")
    return value


def _problem(index: int, question: str, solution: str, where: str, **fields: Any) -> Problem:
    try:
        return make_problem(index, question, solution, **fields)
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None


def _load_parquet(path: Path, limit: int | None) -> list[Problem]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    if not path.exists():
        raise DataError(f"{path}: no such file")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own error types for damaged or foreign files
        raise DataError(f"{path}: not a readable parquet file: {exc}") from None
    problems: list[Problem] = []
    for number, row in enumerate(rows[:limit] if limit is not None else rows):
        problems.append(_from_verl_row(row, f"{path}: row {number}"))
    return problems


def _from_verl_row(row: Mapping[str, Any], where: str) -> Problem:
    extra = row.get("extra_info")
    if not isinstance(extra, Mapping):
        raise DataError(f"{where}: missing column 'extra_info'")
    reward = row.get("reward_model")
    if not isinstance(reward, Mapping) or not isinstance(reward.get("ground_truth"), str):
        raise DataError(f"{where}: missing 'reward_model.ground_truth'")
    solution = _text_field(extra, "answer", where + ": extra_info")
    question = extra.get("question")
    if not isinstance(question, str) or not question.strip():
        question = _question_from_prompt(row.get("prompt"), where)
    index = extra.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise DataError(f"{where}: 'extra_info.index' must be an integer, got {index!r}")
    data_source = row.get("data_source")
    return _problem(
        index,
        question,
        solution,
        where,
        split=str(extra.get("split") or "test"),
        ground_truth=reward["ground_truth"],
        data_source=str(data_source) if data_source else DATA_SOURCE,
    )


def _question_from_prompt(prompt: Any, where: str) -> str:
    """The question from the prompt's last user message (verl's suffix removed), for rows without
    ``extra_info.question``."""
    users = [m for m in prompt or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if not isinstance(content, str) or not content.strip():
        raise DataError(f"{where}: no question (neither 'extra_info.question' nor a user message in 'prompt')")
    return content.removesuffix(INSTRUCTION_SUFFIX)


def prompt_messages(problem: Problem) -> list[dict[str, str]]:
    """The chat a verl dataset row gives the agent loop: the system prompt and the question with verl's suffix."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": problem.question + INSTRUCTION_SUFFIX},
    ]


def to_verl_row(problem: Problem) -> dict[str, Any]:
    """One row of verl's preprocessed GSM8K parquet for the ``code_interpreter`` tool and the tool agent loop."""
    return {
        "data_source": problem.data_source,
        "agent_name": "tool_agent",
        "prompt": prompt_messages(problem),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem.ground_truth},
        "extra_info": {
            "split": problem.split,
            "index": problem.index,
            "answer": problem.solution,
            "question": problem.question,
            "need_tools_kwargs": True,
            "tools_kwargs": {"code_interpreter": {"create_kwargs": {"ground_truth": problem.ground_truth}}},
        },
    }


def write_verl_parquet(problems: Sequence[Problem], path: str | Path) -> Path:
    """Write ``problems`` as verl parquet; the file appears whole or not at all (written aside, then renamed)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(pa.Table.from_pylist([to_verl_row(p) for p in problems]), temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def convert_jsonl_to_parquet(src: str | Path, dst: str | Path, *, split: str = "test", limit: int | None = None) -> int:
    """Convert raw GSM8K JSONL to verl parquet with the given split; returns the number of rows written (at least
    one: an empty parquet is no data set, and a rollout on it fails later)."""
    source = Path(src)
    if _is_dir(source):
        raise DataError(f"{source} is a directory")
    if source.suffix != ".jsonl":
        raise DataError(f"{source}: expected raw GSM8K JSONL (.jsonl), got {source.suffix or 'no suffix'!r}")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be >= 1, got {limit}")
    if not split.strip():  # read back, an empty split would be taken for "test"
        raise DataError(f"split must name the data set's split (train, test...), got {split!r}")
    problem = _output_problem(Path(dst))
    if problem is not None:  # found before the input is read, and nothing is created
        raise DataError(problem)
    problems = [replace(p, split=split) for p in _load_jsonl(source, limit, split=split)]
    if not problems:
        raise DataError(f"no problems in {source}")
    write_verl_parquet(problems, dst)
    return len(problems)


def _output_problem(target: Path) -> str | None:
    """Why the parquet cannot be written at ``target``, or None. Missing directories are allowed (the write makes
    them); a file where one should be is not (``mkdir`` would say only "File exists")."""
    from harness.outputs import file_problem

    if target.name == ".parquet":
        return f"{target}: the output needs a name before .parquet"
    if target.suffix != ".parquet":
        return f"{target}: the output must be a .parquet file"
    try:
        if target.is_dir():
            return f"{target} is a directory"
        existing = next(parent for parent in target.parents if parent.exists() or parent == parent.parent)
        if not existing.is_dir():
            return f"{target}: {existing} is not a directory"
        return file_problem(target, "output") if existing == target.parent else None
    except OSError as exc:  # a directory on the way that cannot be looked into
        return f"{target}: cannot write there: {exc.strerror or exc}"


def register_cli(sub: Any) -> None:
    """Add ``gsm8k-convert INPUT OUTPUT [--split S] [--limit N]`` to an argparse subparsers object."""
    parser = sub.add_parser(
        "gsm8k-convert",
        help="convert raw GSM8K JSONL to verl's parquet for the code_interpreter tool",
        description="Convert the GSM8K release's JSONL (question, answer) into verl's preprocessed parquet "
        "(data_source, agent_name, prompt, ability, reward_model, extra_info) keyed for the code_interpreter tool.",
    )
    parser.add_argument("input", metavar="INPUT", help="raw GSM8K JSONL file")
    parser.add_argument("output", metavar="OUTPUT", help="parquet file to write")
    parser.add_argument("--split", default="test", help="extra_info.split of every row (default: test)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="convert only the first N problems")
    parser.set_defaults(func=_convert_command)


def _convert_command(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        print(f"error: --limit must be >= 1, got {args.limit}", file=sys.stderr)
        return 2
    try:
        count = convert_jsonl_to_parquet(args.input, args.output, split=args.split, limit=args.limit)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {count} problems to {args.output}")
    return 0
