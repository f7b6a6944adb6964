"""The pytest plugin as a user sees it: fixtures, per-test reset, and the faults marker."""

from __future__ import annotations

import json

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


LISTING_TESTS = """
import json, os, requests

def _orders(server):
    from emulator.daytona.config import DEFAULT_API_KEY
    headers = {"Authorization": "Bearer " + DEFAULT_API_KEY}
    sandbox = requests.post(server.url + "/api/sandbox", json={}, headers=headers, timeout=30).json()["id"]
    sessions = server.url + "/toolbox/" + sandbox + "/process/session"
    names = ["s%d" % n for n in range(6)]
    for name in names:
        assert requests.post(sessions, json={"sessionId": name}, headers=headers, timeout=30).status_code == 201
    orders = []
    for _ in range(3):
        listed = requests.get(sessions, headers=headers, timeout=30).json()
        orders.append([names.index(s["sessionId"]) for s in listed])
    with open(os.environ["ORDERS_FILE"], "a") as out:
        out.write(json.dumps(orders) + "\\n")

def test_first(sandbox_emulator):
    _orders(sandbox_emulator)

def test_second(sandbox_emulator):
    _orders(sandbox_emulator)
"""


def test_each_tests_listing_order_comes_from_its_own_seed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daytona's shuffled listings (sessions, commands, contexts) are reseeded per test from the test's chaos seed:
    a test lists in the same orders whether or not another ran before it, and another ``--chaos-seed`` explores other
    orders."""
    pytester.makepyfile(test_listing=LISTING_TESTS)
    orders = pytester.path / "orders.jsonl"

    def run(*args: str) -> list[list[list[int]]]:
        orders.unlink(missing_ok=True)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args)
        result.assert_outcomes(passed=1 if "-k" in args else 2)
        return [json.loads(line) for line in orders.read_text().splitlines()]

    monkeypatch.setenv("ORDERS_FILE", str(orders))
    both = run()
    alone = run("-k", "second")
    other_seed = run("--chaos-seed", "7", "-k", "second")
    assert alone == [both[1]]
    assert both[0] != both[1]  # two tests, two seeds
    assert other_seed != alone
    assert any(order != list(range(6)) for order in both[1])


MARKER_TESTS = """
import pytest, requests

PRINT = {"code": "print(1)", "language": "python"}
GATEWAY = {"rules": [{"id": "gw", "route": "sandbox_fusion.run_code", "fault": {"status": 504}}]}

@pytest.mark.faults(plan=GATEWAY)
def test_plan_by_keyword(sandbox_fusion_url):
    assert requests.post(sandbox_fusion_url, json=PRINT, timeout=30).status_code == 504

@pytest.mark.faults(GATEWAY, seed="7")
def test_a_bad_seed(sandbox_emulator):
    pass

def test_after_the_bad_seed(sandbox_emulator_session):
    assert not sandbox_emulator_session.emulator.engine.plan.rules
    assert requests.post(sandbox_emulator_session.run_code_url, json=PRINT, timeout=30).status_code == 200

@pytest.mark.faults(GATEWAY, sed=7)
def test_an_unknown_keyword(sandbox_emulator):
    pass

@pytest.mark.faults()
def test_no_plan(sandbox_emulator):
    pass

@pytest.mark.faults(GATEWAY, plan="flaky")
def test_two_plans(sandbox_emulator):
    pass

def test_after_them_all(sandbox_fusion_url):
    assert requests.post(sandbox_fusion_url, json=PRINT, timeout=30).status_code == 200
"""


def test_the_marker_takes_plan_by_keyword_and_refuses_what_it_does_not_take(pytester: pytest.Pytester) -> None:
    """``plan=`` is the plan (it was ignored); a bad seed, an unknown keyword, no plan or two are the test's error,
    and none of them leaves the plan loaded for the next test (a bad seed did)."""
    pytester.makepyfile(test_marker=MARKER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3, errors=4)
    result.stdout.fnmatch_lines_random(
        [
            "*faults marker: seed must be an integer, got '7'*",
            "*faults marker: unknown keyword 'sed': it takes a plan and seed=N*",
            "*faults marker: takes one plan (first argument or plan=), got 0*",
            "*faults marker: takes one plan (first argument or plan=), got 2*",
        ]
    )


RELATIVE_PLAN_TESTS = """
import pytest, requests

@pytest.mark.faults("plans/gateway.yaml")
def test_plan_beside_the_test(sandbox_fusion_url):
    r = requests.post(sandbox_fusion_url, json={"code": "print(1)", "language": "python"}, timeout=30)
    assert r.status_code == 504

@pytest.mark.faults("plans/missing.yaml")
def test_missing_plan(sandbox_emulator):
    pass
"""


def test_a_relative_plan_path_is_read_from_the_test_files_directory(pytester: pytest.Pytester) -> None:
    """pytest runs from the rootdir, one level above the test and its plans: the path is the test's, not the
    current directory's; a missing file is named by the absolute path that was tried."""
    suite = pytester.mkdir("suite")
    (suite / "plans").mkdir()
    (suite / "plans" / "gateway.yaml").write_text(
        "rules:\n  - id: gw\n    route: sandbox_fusion.run_code\n    fault: {status: 504}\n"
    )
    (suite / "test_relative.py").write_text(RELATIVE_PLAN_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "suite")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*{suite / 'plans' / 'missing.yaml'}: cannot read plan file*"])
