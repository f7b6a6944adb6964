"""The pytest plugin's Daytona fixtures, as a user's test suite uses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from daytona import CreateSandboxFromSnapshotParams


def test_daytona_client_fixture(daytona_client: Any, daytona_leaks: Any) -> None:
    sandbox = daytona_client.create(CreateSandboxFromSnapshotParams(labels={"test": "plugin"}))
    assert sandbox.process.code_run("print(3)").result == "3\n"
    assert [s.creator("test") for s in daytona_leaks.leaked] == ["plugin"]
    sandbox.delete()
    assert daytona_leaks.leaked == []


MANY_CLIENTS = """
import os, threading, json
import pytest

SEEN = []

@pytest.fixture(autouse=True)
def count_what_is_left():
    # measured before this test's fixtures start, after the previous test's were torn down
    fds = len(os.listdir("/proc/self/fd"))
    expiry = [t for t in threading.enumerate() if t.name == "daytona-subscription-expiry"]
    SEEN.append({"fds": fds, "expiry_threads": len(expiry), "threads": threading.active_count()})
    with open(os.environ["COUNTS_FILE"], "w") as out:
        json.dump(SEEN, out)
    yield

@pytest.mark.parametrize("n", range(24))
def test_a_client_per_test(daytona_client, n):
    sandbox = daytona_client.create()
    assert sandbox.process.code_run("print(1)").result == "1\\n"
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_a_client_per_test_leaves_no_thread_and_no_descriptors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's ``daytona_client`` is shut down at its teardown: its subscription-expiry thread is gone, and the
    descriptors it held are closed, so 24 tests end where the third began (a few sockets of slack: the server closes
    its end of a connection on its own thread)."""
    counts = pytester.path / "counts.json"
    monkeypatch.setenv("COUNTS_FILE", str(counts))
    pytester.makepyfile(test_many=MANY_CLIENTS)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q").assert_outcomes(passed=24)
    seen = json.loads(counts.read_text())
    assert [s["expiry_threads"] for s in seen[1:]] == [0] * 23
    assert seen[-1]["threads"] <= seen[2]["threads"]
    assert seen[-1]["fds"] <= seen[2]["fds"] + 6, [s["fds"] for s in seen]
