"""``--reference-url``: the reference tests run against the named live service (here an EmulatorServer standing in
for one) instead of the plugin's own emulator."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from emulator.app import Emulator
from emulator.server import EmulatorServer

REFERENCE_TESTS = Path(__file__).resolve().parent / "test_sandbox_fusion_reference.py"

pytest_plugins = ["pytester"]


def test_fixtures_point_at_the_live_service(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import requests

        def test_urls(reference_sandbox_fusion_url, reference_daytona, reference_is_live, pytestconfig):
            assert reference_is_live
            assert reference_sandbox_fusion_url == pytestconfig.getoption("reference_url").rstrip("/")
            assert reference_daytona.url.endswith("/api") and reference_daytona.url != reference_sandbox_fusion_url
            answer = requests.post(reference_sandbox_fusion_url + "/run_code",
                                   json={"code": "print(5)", "language": "python"}, timeout=30)
            assert answer.json()["run_result"]["stdout"] == "5\\n"
        """
    )
    with EmulatorServer(Emulator()) as live:
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", "--reference-url", live.url + "/")
        routes = [e.route for e in live.emulator.journal.entries()]
    result.assert_outcomes(passed=1)
    assert routes == ["sandbox_fusion.run_code"]


def test_a_bad_reference_url_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never_runs(reference_sandbox_fusion_url):\n    raise AssertionError\n")
    result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", "--reference-url", "sandbox:8080")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reference-url: 'sandbox:8080' is not an http(s) URL with a host*"])


def test_a_reference_url_nothing_answers_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never_runs(reference_sandbox_fusion_url):\n    raise AssertionError\n")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", "--reference-url", url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--reference-url: cannot connect to 127.0.0.1:{port}: Connection refused*"])


def test_daytona_service_option(pytester: pytest.Pytester) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening:  # the plugin only connects to it, up front
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/api"
        pytester.makepyfile(
            f"""
            def test_target(reference_daytona):
                assert (reference_daytona.url, reference_daytona.api_key) == ("{url}", "k1")
            """
        )
        result = pytester.runpytest_inprocess(
            "-p", "harness.reference.plugin", "--reference-url", url, "--reference-service", "daytona",
            "--reference-api-key", "k1",
        )  # fmt: skip
    result.assert_outcomes(passed=1)


def test_conformance_tests_run_against_the_live_service(pytester: pytest.Pytester) -> None:
    with EmulatorServer(Emulator()) as live:
        result = pytester.runpytest_inprocess(
            str(REFERENCE_TESTS),
            "-p",
            "harness.reference.plugin",
            "--reference-url",
            live.url,
            "-k",
            "run_code_case and 01_print or 404",
        )
        paths = [e.route for e in live.emulator.journal.entries()]
    result.assert_outcomes(passed=2)
    assert paths == ["sandbox_fusion.run_code"]  # the recorded case went to the live service (a 404 is not journaled)
