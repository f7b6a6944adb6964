"""Saved chaos regressions replay forever: every schedule in ``fixtures/chaos/regressions/`` passes on the real
implementation (and still breaks the toy that produced it, so the file keeps its teeth); and the mechanism itself
works: a search against a deliberately broken limiter shrinks to a minimal schedule, saves it, and the replay fails
on the broken limiter and passes on the real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.chaos.regressions import REGRESSIONS_DIR, Regression, load_regressions
from harness.chaos.search import LifoAdapter, LimiterScenario, limiter_ops, limiter_setup, replay, search_machine

SAVED = load_regressions(REGRESSIONS_DIR)

#: The day a listed tool is fixed the replay passes, the strict xfail fails, and the entry must go.
#: Saved regressions that still break the real implementation (strict xfails, with the reason); none today.
KNOWN_TOOL_BUGS: dict[str, str] = {}


def _case(path: Path, regression: Regression) -> object:
    reason = KNOWN_TOOL_BUGS.get(path.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, regression, marks=marks, id=path.stem)


def test_the_repository_keeps_at_least_one_regression() -> None:
    assert SAVED, f"no regression files in {REGRESSIONS_DIR}"


@pytest.mark.parametrize(("path", "regression"), [_case(p, r) for p, r in SAVED])
def test_saved_regression_holds_on_the_real_implementation(path: Path, regression: Regression) -> None:
    assert replay(regression, "real") is None, f"{path.name} breaks the real implementation again"
    if regression.found_with != "real":
        violation = replay(regression, regression.found_with)
        assert violation is not None, f"{path.name} no longer breaks {regression.found_with}: the file lost its teeth"
        assert regression.violation.startswith(violation.invariant)


def test_search_on_a_broken_limiter_saves_a_minimal_replayable_regression(tmp_path: Path) -> None:
    machine = search_machine(
        "limiter-core",
        lambda: LimiterScenario(LifoAdapter),
        limiter_setup(),
        limiter_ops(),
        found_with="toy-lifo",
        regression_dir=tmp_path,
    )
    with pytest.raises(AssertionError, match="fifo"):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=300,
                stateful_step_count=25,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            ),
        )
    files = sorted(tmp_path.glob("*.json"))
    assert [f.name for f in files] == ["limiter-core-toy-lifo-fifo.json"]
    saved = Regression.from_file(files[0])
    # Shrunk: setup, three acquires (one granted, two waiting), one release that lets the newest in first.
    assert [op["op"] for op in saved.ops] == ["setup", "acquire", "acquire", "acquire", "release"]
    assert saved.ops[0] == {"op": "setup", "limit": 1}
    violation = replay(saved, "toy-lifo")
    assert violation is not None and violation.invariant == "fifo"
    assert replay(saved, "real") is None


def test_a_malformed_regression_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"machine": "limiter-core", "ops": [{"op": "setup"}]}))
    with pytest.raises(ValueError, match=r"bad.json: missing keys \['found_with', 'violation'\]"):
        Regression.from_file(bad)
    with pytest.raises(ValueError, match="no scenario 'nope'"):
        replay(Regression("nope", "real", "x", []))
