"""Replayable chaos schedules through the pytest plugin, as a user sees them: a test failing under a seeded
probabilistic plan prints one replay command; rerunning that command gives the same decisions and statuses."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from emulator.faults.decision import Decision
from harness.chaos.seeds import derive_seed, log_path_for, parse_chaos_seed, replay_command

USER_TESTS = """
import json, os
from pathlib import Path

import pytest, requests

PLAN = {"rules": [{"id": "coin", "route": "sandbox_fusion.run_code", "probability": 0.5, "fault": {"status": 503}}]}

def _run(url, journal, name):
    statuses = []
    for i in range(16):
        r = requests.post(url, json={"code": "print(1)", "language": "python"},
                          headers={"X-Emulator-Key": f"k{i}"}, timeout=30)
        statuses.append(r.status_code)
    out = Path(__file__).parent / f"{name}-{os.environ['CHAOS_RUN']}.json"
    out.write_text(json.dumps({"statuses": statuses, "journal": [e.status for e in journal.entries()]}))
    return statuses

@pytest.mark.faults(PLAN)
def test_fails_under_faults(sandbox_fusion_url, emulator_journal, chaos_seed):
    statuses = _run(sandbox_fusion_url, emulator_journal, "first")
    assert 503 not in statuses, "the coin came up 503"

@pytest.mark.faults(PLAN)
def test_same_plan_other_test(sandbox_fusion_url, emulator_journal):
    _run(sandbox_fusion_url, emulator_journal, "second")

@pytest.mark.faults(PLAN, seed=7)
def test_pinned_seed(chaos_seed):
    assert chaos_seed == 7
"""


def _statuses(pytester: pytest.Pytester, name: str, run: str) -> list[int]:
    data = json.loads((pytester.path / f"{name}-{run}.json").read_text())
    assert data["statuses"] == data["journal"]
    return list(data["statuses"])


def _decisions(path: Path) -> list[tuple[str, str, int, str]]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["route"], r["key"], r["attempt"], r["kind"]) for r in records]


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, run: str, *args: str) -> pytest.RunResult:
    monkeypatch.setenv("CHAOS_RUN", run)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _run_inprocess(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, run: str, *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("CHAOS_RUN", run)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_failure_prints_one_replay_command_that_reproduces_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    first = _run(pytester, monkeypatch, "a", "--chaos-seed", "5", "--chaos-log-dir", "logs")
    first.assert_outcomes(failed=1, passed=2)
    first.stdout.fnmatch_lines(["*chaos seed: 5*"])
    commands = [line for line in first.outlines if line.startswith("pytest ") and "--chaos-replay=" in line]
    # The failure report and the terminal summary both name it, and only the failing test has one.
    assert len(set(commands)) == 1, first.outlines
    argv = shlex.split(commands[0])
    assert argv[1] == "test_user.py::test_fails_under_faults"
    log = Path(argv[2].split("=", 1)[1])
    assert log.parent == pytester.path / "logs" and log.is_file()
    original = _statuses(pytester, "first", "a")
    assert 503 in original and 200 in original  # the seeded coin mixes outcomes

    replayed = _run(pytester, monkeypatch, "b", *argv[1:])
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["*chaos: replaying decisions from*"])
    assert _statuses(pytester, "first", "b") == original
    # The replay run logs what it answered beside the default log dir, under its own name.
    replay_log = log_path_for(pytester.path / ".chaos", argv[1], ".replay")
    assert _decisions(replay_log) == _decisions(log)


def test_decisions_follow_the_chaos_seed_and_the_node_id(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    _run_inprocess(pytester, monkeypatch, "s5", "--chaos-seed", "5").assert_outcomes(failed=1, passed=2)
    _run_inprocess(pytester, monkeypatch, "s5again", "--chaos-seed", "5", "-k", "fails_under")
    _run_inprocess(pytester, monkeypatch, "s6", "--chaos-seed", "6")
    # Same seed: same decisions, even with the other tests deselected.
    assert _statuses(pytester, "first", "s5") == _statuses(pytester, "first", "s5again")
    # Another session seed, or another test with the same plan: other decisions.
    assert _statuses(pytester, "first", "s5") != _statuses(pytester, "first", "s6")
    assert _statuses(pytester, "first", "s5") != _statuses(pytester, "second", "s5")


def test_replay_is_strict_about_requests_the_log_lacks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_other="""
import requests

def test_more_requests(sandbox_fusion_url):
    r = requests.post(sandbox_fusion_url, json={"code": "print(1)", "language": "python"},
                      headers={"X-Emulator-Key": "not-in-log"}, timeout=30)
    assert r.status_code == 500
    assert "no logged decision for route='sandbox_fusion.run_code' key='not-in-log' attempt=1" in r.json()["detail"]
"""
    )
    log = pytester.path / "other.jsonl"  # one decision, for another key (an empty log is refused at start)
    other = Decision(route="sandbox_fusion.run_code", key="other-key", attempt=1, ordinal=1)
    log.write_text(json.dumps(other.to_record()) + "\n")
    _run_inprocess(pytester, monkeypatch, "x", f"--chaos-replay={log}").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--chaos-seed", "abc"), "*--chaos-seed must be a non-negative decimal integer, got 'abc'*"),
        (("--chaos-seed", "-3"), "*--chaos-seed must be a non-negative decimal integer, got '-3'*"),
        (("--chaos-seed", "0x10"), "*--chaos-seed must be a non-negative decimal integer, got '0x10'*"),
        (("--chaos-replay", "missing.jsonl"), "*--chaos-replay: no decision log at*missing.jsonl*"),
    ],
)
def test_bad_options_are_clear_errors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = _run_inprocess(pytester, monkeypatch, "e", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_seed_helpers() -> None:
    assert derive_seed(0, "a.py::t") == derive_seed(0, "a.py::t")
    assert len({derive_seed(s, n, p) for s in (0, 1) for n in ("a.py::t", "a.py::u") for p in (0, 9)}) == 8
    assert 0 <= derive_seed(123, "x") < 2**32
    assert parse_chaos_seed("010") == 10  # decimal, leading zeros and all (base 0 refused it)
    assert parse_chaos_seed(" 7 ") == 7
    for bad in ("0x10", "0o7", "0b1", "1_0", "", "+1", "\u0663"):
        with pytest.raises(ValueError, match="non-negative decimal integer"):
            parse_chaos_seed(bad)
    path = log_path_for(Path("d"), "tests/a b.py::test[x/y]")
    assert path.parent == Path("d") and "/" not in path.name and " " not in path.name
    assert log_path_for(Path("d"), "t[a/b]") != log_path_for(Path("d"), "t[a_b]")
    assert replay_command("t.py::x[a b]", Path("l o g.jsonl")) == "pytest 't.py::x[a b]' --chaos-replay='l o g.jsonl'"
    # another seed goes with the log: it starts what the log does not hold (Daytona's listing order)
    assert replay_command("t.py::x", Path("l.jsonl"), 7) == "pytest t.py::x --chaos-replay=l.jsonl --chaos-seed=7"


def test_judge_and_virtual_time_fixtures(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_fixtures="""
import asyncio, requests

def test_judge_sees_this_test(chaos_judge, sandbox_fusion_url):
    assert requests.post(sandbox_fusion_url, json={"code": "print(1)", "language": "python"}, timeout=30).ok
    chaos_judge.assert_invariants()
    assert len(chaos_judge.emulator.journal.entries()) == 1

def test_virtual_time(virtual_time):
    virtual_time.run(asyncio.sleep(600))
    assert virtual_time.now() >= 600
"""
    )
    _run_inprocess(pytester, monkeypatch, "f").assert_outcomes(passed=2)


TEARDOWN_FAILURE = """
import pytest, requests

PLAN = {"rules": [{"id": "gw", "route": "sandbox_fusion.run_code", "attempts": "1", "fault": {"status": 504}}]}

@pytest.fixture
def checked(sandbox_emulator):
    yield sandbox_emulator
    assert not [e for e in sandbox_emulator.emulator.journal.entries() if e.fault], "a request ended in a fault"

@pytest.mark.faults(PLAN)
def test_checked_at_teardown(checked):
    r = requests.post(checked.run_code_url, json={"code": "print(1)", "language": "python"}, timeout=30)
    assert r.status_code == 504
"""


def test_a_failure_at_teardown_leaves_the_tests_decisions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixture's check that fails after the test: its report comes after the emulator was restored (and its log
    reset), and must still write the test's decisions and name the replay."""
    pytester.makepyfile(test_teardown=TEARDOWN_FAILURE)
    result = _run_inprocess(pytester, monkeypatch, "t", "--chaos-log-dir", "logs")
    result.assert_outcomes(passed=1, errors=1)
    assert "no fault decisions" not in result.stdout.str()
    logs = list((pytester.path / "logs").glob("*.jsonl"))
    assert len(logs) == 1
    assert [(route, kind) for route, _, _, kind in _decisions(logs[0])] == [("sandbox_fusion.run_code", "status")]
    result.stdout.fnmatch_lines([f"*--chaos-replay={logs[0]}*"])


AS_A_WORKER = """
import json, os

_config = None

def pytest_configure(config):
    global _config
    _config = config

def pytest_runtest_logreport(report):  # what an xdist worker sends its controller: the serialized report
    data = _config.hook.pytest_report_to_serializable(config=_config, report=report)
    with open(os.environ["WORKER_REPORTS"], "a") as out:
        out.write(json.dumps(data) + "\\n")
"""

AS_THE_CONTROLLER = """
import json, os, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):  # what an xdist controller does with them: rebuild each and log it
    config = session.config
    with open(os.environ["WORKER_REPORTS"]) as lines:
        for line in lines:
            report = config.hook.pytest_report_from_serializable(config=config, data=json.loads(line))
            config.hook.pytest_runtest_logreport(report=report)
    return True
"""


def test_the_replay_summary_comes_from_the_reports_as_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under xdist a worker runs the test and the controller prints the summary, from the reports it is sent: the
    command must travel in the report. The two halves run here as two pytest runs, joined by the serialized reports
    that xdist would carry."""
    reports = pytester.path / "reports.jsonl"
    monkeypatch.setenv("WORKER_REPORTS", str(reports))
    worker = pytester.mkdir("worker")
    (worker / "conftest.py").write_text(AS_A_WORKER)
    (worker / "test_user.py").write_text(USER_TESTS)
    ran = _run_inprocess(pytester, monkeypatch, "w", "worker", "--chaos-seed", "5", "--chaos-log-dir", "logs")
    ran.assert_outcomes(failed=1, passed=2)
    command = next(line for line in ran.outlines if line.startswith("pytest ") and "--chaos-replay=" in line)
    controller = pytester.mkdir("controller")
    (controller / "conftest.py").write_text(AS_THE_CONTROLLER)
    summary = pytester.runpytest_inprocess("-p", "no:cacheprovider", "controller", "--chaos-seed", "5")
    lines = summary.outlines
    headers = [n for n, line in enumerate(lines) if line.startswith("=") and " chaos replay " in line]
    assert len(headers) == 1, lines  # the summary section (the failure's own section is "---- chaos replay ----")
    assert lines[headers[0] + 1] == command, lines
