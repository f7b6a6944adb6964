"""The chaos options of the pytest plugin, given bad values: one usage error at the start (exit 4), never an
INTERNALERROR at the first failing test or an error in every test."""

from __future__ import annotations

from pathlib import Path

import pytest

RUNS_NOTHING = "def test_never_runs():\n    raise AssertionError('ran')\n"


def _refused(pytester: pytest.Pytester, *args: str) -> str:
    """Run pytest with ``args`` and return its one-line usage error, after checking nothing else came out."""
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert "never_runs" not in output
    errors = [line for line in result.errlines if line.startswith("ERROR: ")]
    assert len(errors) == 1, result.errlines
    return errors[0].removeprefix("ERROR: ")


def test_a_log_dir_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=RUNS_NOTHING)
    (pytester.path / "logs").write_text("")
    message = _refused(pytester, "--chaos-log-dir=logs")
    assert message == f"--chaos-log-dir {str(pytester.path / 'logs')!r} exists and is not a directory"


def test_a_log_dir_under_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=RUNS_NOTHING)
    (pytester.path / "file").write_text("")
    message = _refused(pytester, "--chaos-log-dir", "file/logs")
    assert message.startswith(f"--chaos-log-dir {str(pytester.path / 'file' / 'logs')!r}: ")
    assert "is not a directory" in message


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_log_dir_that_cannot_be_created_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=RUNS_NOTHING)
    assert _refused(pytester, "--chaos-log-dir=/proc/xx").startswith("--chaos-log-dir '/proc/xx': cannot create it")


def test_a_good_log_dir_is_not_created_until_a_test_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_passes(sandbox_emulator):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--chaos-log-dir=new/logs")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "new").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (
            b"{not json\n",
            ":1: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"[1, 2]\n", ":1: expected a JSON object per line"),
        (b"\xff\xfe\x00junk\n", ": not a decision log: not UTF-8 text (invalid start byte at byte 0)"),
        (b'{"kind": "pass"}\n', ": not a decision log: record 1: route: required key is missing"),
        (
            b'{"route": "r", "key": "k", "attempt": 1, "ordinal": 1}\n'
            b'{"route": "r", "key": "k", "attempt": 2, "ordinal": 2, "load": [1]}\n',
            ": not a decision log: record 2: load: expected a mapping of rule ids to counts, got [1]",
        ),
        (
            b'{"route": "r", "key": "k", "attempt": 1, "ordinal": 1, "action": "status"}\n',
            ": not a decision log: record 1: action: expected a mapping, got str 'status'",
        ),
        (b"", " holds no decisions (a failing test's log has one per emulator request)"),
        (b"\n  \n", " holds no decisions (a failing test's log has one per emulator request)"),
    ],
    ids=["broken-json", "json-list", "not-utf8", "not-a-decision", "load-list", "action-text", "empty", "blank-lines"],
)
def test_a_replay_log_that_cannot_be_replayed_is_a_usage_error(
    pytester: pytest.Pytester, content: bytes, says: str
) -> None:
    pytester.makepyfile(test_x="def test_never_runs(sandbox_emulator):\n    raise AssertionError('ran')\n")
    log = pytester.path / "log.jsonl"
    log.write_bytes(content)
    assert _refused(pytester, "--chaos-replay=log.jsonl") == f"--chaos-replay: {log}{says}"


def test_a_replay_log_that_is_a_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=RUNS_NOTHING)
    (pytester.path / "logs").mkdir()
    assert (
        _refused(pytester, "--chaos-replay", "logs") == f"--chaos-replay: no decision log at {pytester.path / 'logs'}"
    )


WRITE_FAILS = """
import requests

def test_fails_after_its_log_dir_is_gone(sandbox_fusion_url):
    assert requests.post(sandbox_fusion_url, json={"code": "print(1)", "language": "python"}, timeout=30).ok
    open("logs", "w").close()  # the log dir, unused so far, is now a file: the decision log cannot be written
    raise AssertionError("the test's own failure")

def test_later_tests_still_run():
    pass
"""


def test_a_log_that_cannot_be_written_is_said_in_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=WRITE_FAILS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--chaos-log-dir=logs")
    result.assert_outcomes(failed=1, passed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*the test's own failure*", f"1 fault decisions not written to {pytester.path}/logs/*"]
    )
    assert "--chaos-replay=" not in output  # no command for a log that is not there


def test_a_failing_test_with_no_requests_names_no_replay(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_fails(sandbox_emulator):\n    raise AssertionError('no request made')\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--chaos-log-dir=logs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no fault decisions: the test made no emulator request*"])
    assert "--chaos-replay=" not in result.stdout.str()  # --chaos-replay refuses a log with no decisions
    assert not (pytester.path / "logs").exists()


@pytest.mark.parametrize("option", ["--chaos-replay", "--chaos-log-dir"])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_path_is_a_usage_error(pytester: pytest.Pytester, option: str, value: str) -> None:
    """``--chaos-replay=$LOG`` with LOG unset was a run without any replay, as if the option were not given."""
    pytester.makepyfile(test_x=RUNS_NOTHING)
    assert _refused(pytester, f"{option}={value}") == (
        f"{option}: an empty path names nothing; give a path or leave the option out"
    )
