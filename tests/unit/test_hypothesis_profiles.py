"""The root conftest's hypothesis profiles, as a pytest run sees them: by default every run draws the same examples
and no example fails on time alone; ``--hypothesis-profile=explore`` draws new ones each run; a test's own settings
still apply under both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings

ROOT_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

USER_TESTS = """
import json, os, time
from pathlib import Path

from hypothesis import given, settings, strategies as st

DRAWN = []

@settings(max_examples=7)
@given(st.integers())
def test_draws(n):
    DRAWN.append(n)
    out = Path(__file__).parent / f"drawn-{os.environ['PROFILE_RUN']}.json"
    out.write_text(json.dumps(DRAWN))

@settings(max_examples=1)
@given(st.just(0))
def test_slow_example(n):
    time.sleep(0.3)  # over hypothesis' own 200 ms deadline
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, run: str, *args: str) -> list[int]:
    """One pytest run in a subprocess with the project's root conftest; the integers ``test_draws`` drew."""
    monkeypatch.setenv("PROFILE_RUN", run)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:sandbox_emulator", *args)
    result.assert_outcomes(passed=2)
    drawn = json.loads((pytester.path / f"drawn-{run}.json").read_text())
    assert isinstance(drawn, list)
    return drawn


@pytest.fixture
def user_tests(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(ROOT_CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester


def test_default_profile_draws_the_same_examples_every_run(
    user_tests: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(user_tests, monkeypatch, "a")
    assert len(first) == 7, "the test's own max_examples no longer applies"
    assert _run(user_tests, monkeypatch, "b") == first
    # Hypothesis' ``ci`` profile, which it loads by itself under a CI variable, does not replace the default.
    monkeypatch.setenv("CI", "true")
    assert _run(user_tests, monkeypatch, "c") == first


def test_explore_profile_draws_new_examples_each_run(
    user_tests: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(user_tests, monkeypatch, "a", "--hypothesis-profile=explore")
    second = _run(user_tests, monkeypatch, "b", "--hypothesis-profile=explore")
    assert len(first) == len(second) == 7
    # Seven integers from hypothesis' whole range drawn again in the same order: a chance far below 2**-64.
    assert first != second


def test_profiles_set_defaults_only() -> None:
    default, explore = settings.get_profile("default"), settings.get_profile("explore")
    assert (default.derandomize, default.deadline, default.database, default.print_blob) == (True, None, None, True)
    assert (explore.derandomize, explore.deadline, explore.print_blob) == (False, None, True)
    assert explore.database is not None, "explore keeps failing examples to replay them first next time"
    assert default.max_examples == explore.max_examples == 100
