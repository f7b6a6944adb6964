"""``--reference-url``: the reference tests run against the named live service (here an EmulatorServer standing in
for one) instead of the plugin's own emulator."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona.config import DaytonaConfig
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
    assert routes == ["sandbox_fusion.ping", "sandbox_fusion.run_code"]  # the probe, once, then the test


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


def _daytona(api_key: str) -> EmulatorServer:
    return EmulatorServer(Emulator(EmulatorConfig(daytona=DaytonaConfig(api_key=api_key))))


def test_daytona_service_option(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with _daytona("k1") as live:
        url = live.url + "/api"
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
        routes = [e.route for e in live.emulator.journal.entries()]
    result.assert_outcomes(passed=1)
    assert routes == ["daytona.sandbox.list"]  # the plugin's probe, with the key


def _refused(result: pytest.RunResult) -> str:
    """The one-line usage error of ``result``, after checking nothing ran and nothing else came out."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output and "never_runs" not in output, output
    errors = [line for line in result.errlines if line.startswith("ERROR: ")]
    assert len(errors) == 1, result.errlines
    return errors[0].removeprefix("ERROR: ")


NEVER_RUNS = "def test_never_runs(reference_sandbox_fusion_url):\n    raise AssertionError\n"
NO_URL = "has no effect without --reference-url (the reference tests then run against the emulator)"
KEY_NO_URL = "is for a live Daytona (--reference-url with --reference-service daytona); the emulator uses its own"
KEY_FUSION = "is Daytona's (--reference-service daytona); Sandbox Fusion takes none"
CLOSED = "http://127.0.0.1:1"  # refused before any connection is tried


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reference-service", "daytona"], f"--reference-service {NO_URL}"),
        (["--reference-service", "sandbox-fusion"], f"--reference-service {NO_URL}"),
        (["--reference-api-key", "k1"], f"--reference-api-key {KEY_NO_URL}"),
        (["--reference-url", CLOSED, "--reference-api-key", "k1"], f"--reference-api-key {KEY_FUSION}"),
        (
            ["--reference-url", CLOSED, "--reference-service", "sandbox-fusion", "--reference-api-key", "k1"],
            f"--reference-api-key {KEY_FUSION}",
        ),
    ],
    ids=["service-without-url", "default-service-without-url", "key-without-url", "key-for-fusion", "key-for-fusion-2"],
)
def test_options_that_would_be_ignored_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(NEVER_RUNS)
    assert _refused(pytester.runpytest_inprocess("-p", "harness.reference.plugin", *args)) == message


def test_a_wrong_base_url_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(NEVER_RUNS)
    with EmulatorServer(Emulator()) as live:
        url = live.url + "/nope"
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", "--reference-url", url)
    assert _refused(result) == (
        f"--reference-url: GET {url}/v1/ping answered 404 Not Found: is {url} the base URL? "
        "(Sandbox Fusion's base URL is the server root, e.g. http://host:8080)"
    )


@pytest.mark.parametrize(
    ("key", "who"), [("wrong", "the API key"), (None, "a request without --reference-api-key")], ids=["wrong", "none"]
)
def test_a_refused_daytona_key_is_one_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, key: str | None, who: str
) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    pytester.makepyfile("def test_never_runs(reference_daytona):\n    raise AssertionError\n")
    with _daytona("k1") as live:
        args = ["--reference-url", live.url + "/api", "--reference-service", "daytona"]
        args += ["--reference-api-key", key] if key is not None else []
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", *args)
    probe = "on its probe GET /sandbox?limit=1"
    assert _refused(result) == f"--reference-url: the service refused {who} (401 Unauthorized) {probe}"


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
    # The plugin's probe, then the recorded case went to the live service (a 404 is not journaled).
    assert paths == ["sandbox_fusion.ping", "sandbox_fusion.run_code"]


def test_the_report_header_hides_credentials_in_the_url(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_runs(reference_sandbox_fusion_url):\n    assert reference_sandbox_fusion_url\n")
    with EmulatorServer(Emulator()) as live:
        url = live.url.replace("http://", "http://user:s3cretpw@")
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", "--reference-url", url)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"reference: sandbox-fusion at {live.url} (not the emulator)"])
    assert "s3cretpw" not in result.stdout.str() + result.stderr.str()


def test_a_key_http_cannot_carry_is_one_usage_error_without_the_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "SECRETKEY123\r")
    pytester.makepyfile("def test_never_runs(reference_daytona):\n    raise AssertionError\n")
    with _daytona("k1") as live:
        args = ["--reference-url", live.url + "/api", "--reference-service", "daytona"]
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", *args)
    assert _refused(result).startswith("--reference-api-key (or $DAYTONA_API_KEY): the API key holds whitespace")
    assert "SECRET" not in result.stdout.str() + result.stderr.str()


DAYTONA_TESTS = Path(__file__).resolve().parent / "test_daytona_reference.py"


def test_daytona_conformance_tests_run_against_the_live_service(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the Daytona tests run, all against the live service: a Sandbox Fusion test would use the emulator."""
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with _daytona("k1") as live:
        args = ["--reference-url", live.url + "/api", "--reference-service", "daytona", "--reference-api-key", "k1"]
        result = pytester.runpytest_inprocess(
            str(DAYTONA_TESTS), f"{REFERENCE_TESTS}::test_unknown_path_is_404", "-p", "harness.reference.plugin", *args
        )
        routes = [e.route for e in live.emulator.journal.entries()]
    result.assert_outcomes(passed=1, deselected=1)  # test_unknown_path_is_404 would have used the emulator
    assert routes[0] == "daytona.sandbox.list" and "daytona.sandbox.create" in routes
    assert not any(route.startswith("sandbox_fusion") for route in routes)


def test_a_run_with_no_test_of_the_live_service_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(NEVER_RUNS)
    with _daytona("k1") as live:
        args = ["--reference-url", live.url + "/api", "--reference-service", "daytona", "--reference-api-key", "k1"]
        result = pytester.runpytest_inprocess("-p", "harness.reference.plugin", *args)
    assert _refused(result).startswith("--reference-url: no selected test runs against the live daytona")
