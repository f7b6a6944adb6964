"""The pytest plugin's Daytona fixtures, as a user's test suite uses them."""

from __future__ import annotations

from typing import Any

from daytona import CreateSandboxFromSnapshotParams


def test_daytona_client_fixture(daytona_client: Any, daytona_leaks: Any) -> None:
    sandbox = daytona_client.create(CreateSandboxFromSnapshotParams(labels={"test": "plugin"}))
    assert sandbox.process.code_run("print(3)").result == "3\n"
    assert [s.creator("test") for s in daytona_leaks.leaked] == ["plugin"]
    sandbox.delete()
    assert daytona_leaks.leaked == []
