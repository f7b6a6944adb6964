"""The pytest plugin as a user sees it: fixtures, per-test reset, and the faults marker."""

from __future__ import annotations

import pytest

USER_TESTS = """
import pytest, requests

PRINT = {"code": "print(1)", "language": "python"}

def test_runs_code(sandbox_fusion_url, emulator_journal):
    body = requests.post(sandbox_fusion_url, json=PRINT, timeout=30).json()
    assert body["run_result"]["stdout"] == "1\\n"
    assert len(emulator_journal.entries()) == 1

@pytest.mark.faults({"rules": [{"id": "down", "route": "sandbox_fusion.run_code", "fault": {"status": 503}}]})
def test_marker_loads_the_plan(sandbox_fusion_url, emulator_journal):
    assert requests.post(sandbox_fusion_url, json=PRINT, timeout=30).status_code == 503
    assert [e.status for e in emulator_journal.entries()] == [503]

def test_next_test_is_reset(sandbox_fusion_url, emulator_journal):
    assert emulator_journal.entries() == []
    assert requests.post(sandbox_fusion_url, json=PRINT, timeout=30).status_code == 200

@pytest.mark.faults("flaky")
def test_profile_by_name(sandbox_emulator):
    assert sandbox_emulator.emulator.engine.plan.rules

def test_session_server_is_shared(sandbox_emulator, sandbox_emulator_session):
    assert sandbox_emulator is sandbox_emulator_session
"""


def test_plugin_fixtures_and_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5)


def test_unknown_profile_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.faults("no-such-profile")
def test_x(sandbox_emulator):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown fault profile 'no-such-profile'*known profiles: calm*"])
