"""The bundled problems are well-formed GSM8K: every annotation is right and the answer follows from them."""

from __future__ import annotations

import json

from harness.gsm8k import BUNDLED_PROBLEMS, Problem, extract_ground_truth
from harness.gsm8k.numbers import evaluate, format_number, prose_equations, to_python

#: The one problem whose last step is written in prose without an annotation (see fixtures/gsm8k/README.md).
PROSE_FINAL_STEP = {"Kevin had 64 baseball cards."}


def test_file_is_raw_gsm8k_jsonl() -> None:
    lines = BUNDLED_PROBLEMS.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert 45 <= len(records) <= 60
    assert all(set(r) == {"question", "answer"} for r in records)
    assert len({r["question"] for r in records}) == len(records)
    assert all(r["answer"].splitlines()[-1].startswith("#### ") for r in records)


def test_every_annotation_evaluates_to_its_result(bundled: list[Problem]) -> None:
    for problem in bundled:
        assert problem.calculations, problem.question
        for calculation in problem.calculations:
            python = to_python(calculation.expression)
            assert python is not None, calculation
            assert format_number(evaluate(python)) == calculation.result, (problem.index, calculation)


def test_answer_is_the_last_annotation_or_a_prose_step(bundled: list[Problem]) -> None:
    for problem in bundled:
        assert problem.ground_truth == extract_ground_truth(problem.solution)
        if any(problem.question.startswith(q) for q in PROSE_FINAL_STEP):
            [last] = prose_equations(problem.solution)[-1:]
            python = to_python(last)
            assert python is not None
            assert format_number(evaluate(python)) == problem.ground_truth
        else:
            assert problem.calculations[-1].result == problem.ground_truth, problem.index


def test_variety(bundled: list[Problem]) -> None:
    steps = {len(p.calculations) for p in bundled}
    assert min(steps) == 1 and max(steps) == 6
    assert sum("." in p.ground_truth for p in bundled) >= 5
    assert sum(p.ground_truth.startswith("-") for p in bundled) >= 2
    assert any("," in p.solution.splitlines()[-1] for p in bundled)  # "#### 40,800"
    # No question contains another (the policy finds problems by question).
    questions = [p.question for p in bundled]
    assert not any(a != b and a in b for a in questions for b in questions)
