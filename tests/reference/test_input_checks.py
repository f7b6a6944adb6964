"""What ``record`` and ``check-reference`` refuse rather than store or pass: a refused key, a wrong base URL, a
malformed suite; and what ``check-reference`` says it did not check (a service with no snapshot)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from emulator.server import EmulatorServer
from harness.cli import main
from harness.reference.suite import base_url, default_fixtures_dir

SNAPSHOTS = default_fixtures_dir() / "snapshots"


def _good_snapshot(directory: Path, service: str) -> bytes:
    """A snapshot already in ``directory`` (the committed one), whose bytes must survive a refused recording."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(SNAPSHOTS / f"{service}.json", directory / f"{service}.json")
    return (directory / f"{service}.json").read_bytes()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:8080/", "http://h:8080"),
        ("http://h:8080/run_code", "http://h:8080"),
        ("http://h:8080/sf/run_code/", "http://h:8080/sf"),
    ],
)
def test_a_run_code_url_names_the_sandbox_fusion_server(url: str, expected: str) -> None:
    assert base_url("sandbox-fusion", url) == expected
    assert base_url("daytona", "https://app.daytona.io/api/") == "https://app.daytona.io/api"


def test_record_accepts_the_run_code_url_and_keeps_expected_404s(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = reference_emulator.url + "/run_code"
    assert main(["record", "--target", target, "--cases", "01_*", "25_*", "--out", str(tmp_path)]) == 0
    recorded = json.loads((tmp_path / "sandbox-fusion.json").read_text())
    assert recorded["source"] == reference_emulator.url
    assert recorded["cases"]["01_print"]["status"] == 200  # not the framework's 404 for /run_code/run_code
    assert recorded["cases"]["25_404"]["status"] == 404  # a case that expects a 404 is still recorded
    assert f"from {reference_emulator.url} into" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("service", "probe"),
    [("sandbox-fusion", "GET {url}/nope/v1/ping"), ("daytona", "GET {url}/nope/sandbox?limit=1")],
)
def test_record_refuses_a_wrong_base_url(
    service: str, probe: str, reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _good_snapshot(tmp_path, service)
    key = reference_emulator.emulator.config.daytona.api_key
    target = reference_emulator.url + "/nope"
    auth = ["--api-key", key] if service == "daytona" else []
    args = ["record", "--target", target, "--service", service, *auth, "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{probe.format(url=reference_emulator.url)} answered 404 Not Found: is {target} the base URL?" in err
    assert err.rstrip().endswith("nothing recorded") and err.count("\n") == 1 and "Traceback" not in err
    assert (tmp_path / f"{service}.json").read_bytes() == before


def test_record_refuses_a_wrong_api_key(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _good_snapshot(tmp_path, "daytona")
    target = reference_emulator.url + "/api"
    args = ["record", "--target", target, "--service", "daytona", "--api-key", "wrong", "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "the service refused the API key (401 Unauthorized)" in err and err.count("\n") == 1
    assert (tmp_path / "daytona.json").read_bytes() == before


def test_record_writes_nothing_when_a_case_is_refused(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe passes, then one case is refused: no case of the run is stored, not even the good ones."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "version: 1\nsandbox-fusion:\n"
        "- {id: ping, method: GET, path: /v1/ping}\n"
        "- {id: own_bad_key, method: GET, path: /api/sandbox, headers: {Authorization: Bearer nope}}\n"
        "- {id: needs_a_key, method: GET, path: /api/sandbox}\n"
    )
    out = tmp_path / "out"
    before = _good_snapshot(out, "sandbox-fusion")
    assert main(["record", "--suite", str(suite), "--target", reference_emulator.url, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the service refused a request without --api-key (401 Unauthorized) on case needs_a_key" in err
    assert f"nothing written ({out / 'sandbox-fusion.json'} is untouched)" in err
    assert (out / "sandbox-fusion.json").read_bytes() == before
    # a case that sends its own Authorization header is testing the 401: that answer is recorded
    args = ["record", "--suite", str(suite), "--cases", "own_*", "--target", reference_emulator.url]
    assert main([*args, "--out", str(out)]) == 0
    assert json.loads((out / "sandbox-fusion.json").read_text())["cases"]["own_bad_key"]["status"] == 401


def test_check_reference_takes_the_run_code_url_and_refuses_a_wrong_key(
    reference_emulator: EmulatorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-reference", "--reference-url", reference_emulator.url + "/run_code", "--cases", "01_*"]) == 0
    assert f"sandbox-fusion against {reference_emulator.url}: 1 ok" in capsys.readouterr().out
    url = reference_emulator.url + "/api"
    assert main(["check-reference", "--reference-url", url, "--service", "daytona", "--api-key", "wrong"]) == 2
    err = capsys.readouterr().err
    assert "the service refused the API key (401 Unauthorized) on its probe GET /sandbox?limit=1" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("version: 1\nsandbox-fusion: 5\n", "{path}: sandbox-fusion must be a list of cases, got int"),
        ("version: 1\nsandboxfusion: []\n", "{path}: unknown key 'sandboxfusion' (expected: version, sandbox-fusion"),
        ("version: 1\ncases: 5\n", "{path}: unknown key 'cases'"),
        ("version: 2\nsandbox-fusion: []\n", "{path}: 'version' must be 1, got 2"),
        ("version: 1\n", "{path}: the suite has no cases"),
        ("version: 1\nsandbox-fusion: [5]\n", "{path}: sandbox-fusion case #1: expected a mapping, got int"),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: POST, path: /run_code, data: 5}\n", "'data' must be a string"),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: GET, path: /, normalize: x}\n", "normalize must be one of"),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: GET, path: run_code}\n", "'path' must start with '/'"),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: 'G T', path: /}\n", "'method' must be an HTTP method"),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: POST, path: /, json: {x: .nan}}\n", "cannot be sent as JSON"),
        (
            "version: 1\nsandbox-fusion:\n- {id: a, method: GET, path: /, headers: {'X A': b}}\n",
            "cannot be sent as an HTTP header",
        ),
        (
            'version: 1\nsandbox-fusion:\n- {id: a, method: GET, path: /, headers: {X-A: "b\\nc"}}\n',
            "cannot be sent as an HTTP header",
        ),
        ("version: 1\nsandbox-fusion:\n- {id: a, method: POST, path: /, json: {d: 2024-13-45}}\n", "cannot be read"),
        (b"version: 1\n\xff\xfe\n", "cannot be read"),
    ],
)
@pytest.mark.parametrize("command", ["record", "check-reference"])
def test_a_malformed_suite_is_named_with_its_fault(
    command: str, content: str | bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_bytes(content if isinstance(content, bytes) else content.encode())
    args = [command, "--suite", str(suite)]
    args += ["--target", "http://127.0.0.1:9", "--out", str(tmp_path)] if command == "record" else []
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message.format(path=suite) in err and "--cases" not in err and "Traceback" not in err


def test_a_suite_without_the_service_s_cases_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("version: 1\nsandbox-fusion:\n- {id: ping, method: GET, path: /v1/ping}\n")
    assert main(["check-reference", "--suite", str(suite), "--service", "daytona"]) == 2
    assert f"{suite}: the suite has no daytona cases" in capsys.readouterr().err


def test_a_service_without_a_snapshot_is_said_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _good_snapshot(tmp_path, "sandbox-fusion")
    assert main(["check-reference", "--snapshots", str(tmp_path), "--cases", "01_*"]) == 0
    out = capsys.readouterr().out
    assert f"note: daytona not checked: no daytona.json snapshot in {tmp_path}" in out
    assert out.rstrip().endswith("PASSED")
    assert main(["check-reference", "--snapshots", str(tmp_path), "--cases", "01_*", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unchecked"] == ["daytona"] and [s["service"] for s in report["services"]] == ["sandbox-fusion"]
    assert main(["check-reference", "--snapshots", str(tmp_path), "--service", "daytona"]) == 2
    assert f"no snapshot for daytona in {tmp_path}" in capsys.readouterr().err


def test_a_check_that_compares_nothing_does_not_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sandbox-fusion.json").write_text('{"cases": {}}')
    assert main(["check-reference", "--snapshots", str(tmp_path), "--service", "sandbox-fusion"]) == 1
    out = capsys.readouterr().out
    assert "no case was compared" in out and out.rstrip().endswith("FAILED")
    assert main(["check-reference", "--snapshots", str(tmp_path), "--service", "sandbox-fusion", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["compared"] == 0


def test_a_bad_registry_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "registry.yaml"
    for content in (b"divergences:\n- {case: x, validated: 2024-13-45}\n", b"\xff\xfe"):
        registry.write_bytes(content)
        assert main(["check-reference", "--registry", str(registry)]) == 2
        err = capsys.readouterr().err
        assert f"the divergence registry {registry} cannot be read" in err and "Traceback" not in err


def test_record_checks_its_out_dir_before_any_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("kept\n")
    with EmulatorServer() as server:
        assert main(["record", "--target", server.url, "--out", str(blocker)]) == 2
        assert "exists and is not a directory; nothing recorded" in capsys.readouterr().err
        assert server.emulator.journal.entries() == []
    assert blocker.read_text() == "kept\n"


def test_credentials_in_the_url_are_never_stored_or_printed(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = reference_emulator.url
    url = bare.replace("http://", "http://user:s3cretpw@")
    assert main(["record", "--target", url, "--cases", "01_*", "--out", str(tmp_path)]) == 0
    assert f"from {bare} into" in capsys.readouterr().out
    assert json.loads((tmp_path / "sandbox-fusion.json").read_text())["source"] == bare
    assert "s3cretpw" not in (tmp_path / "sandbox-fusion.json").read_text()
    assert main(["check-reference", "--reference-url", url, "--snapshots", str(tmp_path), "--cases", "01_*"]) == 0
    assert f"sandbox-fusion against {bare}: 1 ok" in capsys.readouterr().out
    assert main(["check-reference", "--reference-url", url + "/nope", "--snapshots", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"GET {bare}/nope/v1/ping answered 404" in captured.err
    assert "s3cretpw" not in captured.out + captured.err
    assert main(["record", "--target", url + "?x=1", "--out", str(tmp_path)]) == 2
    assert "s3cretpw" not in capsys.readouterr().err


@pytest.mark.parametrize("key", ["SECRETKEY123\r", "SECRETKEY123\n", "SECRET KEY123", "SECRETKEY123\x00"])
def test_an_api_key_http_cannot_carry_is_refused_without_quoting_it(
    key: str, reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = reference_emulator.url + "/api"
    sent = len(reference_emulator.emulator.journal.entries())
    args = ["record", "--target", url, "--service", "daytona", "--api-key", key, "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--api-key (or $DAYTONA_API_KEY): the API key holds whitespace" in err and err.count("\n") == 1
    assert "SECRET" not in err and not list(tmp_path.iterdir())
    args = ["check-reference", "--reference-url", url, "--service", "daytona", "--api-key", key, "--json"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "the API key holds whitespace" in captured.err and "SECRET" not in captured.out + captured.err
    assert len(reference_emulator.emulator.journal.entries()) == sent  # refused before any request


def test_a_request_error_never_quotes_the_key_nor_url_credentials(closing_server: str) -> None:
    import httpx

    from harness.reference.suite import Case, Target, run_case

    target = Target("daytona", closing_server + "/api", "SECRETKEY123\r")
    with httpx.Client(timeout=5) as client:
        answer = run_case(client, target, Case("probe", "daytona", "GET", "/sandbox"), {})
    assert answer.status is None and answer.error and "<API key>" in answer.error
    assert "SECRETKEY123" not in answer.error


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        ((502, "text/html", "<html><h1>502 Bad Gateway</h1></html>", {}), "a gateway's error (502 Bad Gateway)"),
        ((200, "text/html", "<html>Please log in</html>", {}), "an HTML page (200 OK), not the service's JSON"),
        ((404, "text/html", "<html>Not here</html>", {}), "an HTML page (404 Not Found)"),
        ((301, "text/html", "", {"Location": "https://sso.example/login"}), "a redirect (301 Moved Permanently) to"),
        ((200, "text/plain", "maintenance", {}), "a body that is not JSON (200 OK, text/plain)"),
    ],
    ids=["gateway", "login-page", "html-404", "redirect", "text"],
)
def test_record_refuses_an_answer_the_suite_never_expects(
    answer: tuple[int, str, str, dict[str, str]],
    what: str,
    stub_service: tuple[str, list[tuple[int, str, str, dict[str, str]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, answers = stub_service
    answers.append(answer)
    before = _good_snapshot(tmp_path, "sandbox-fusion")
    assert main(["record", "--target", url, "--cases", "01_*", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"case 01_print got {what}" in err and "nothing written" in err
    assert (tmp_path / "sandbox-fusion.json").read_bytes() == before
    if answer[0] == 301:
        assert "to https://sso.example/login" in err


def test_record_keeps_the_4xx_json_answers_cases_expect(
    stub_service: tuple[str, list[tuple[int, str, str, dict[str, str]]]], tmp_path: Path
) -> None:
    url, answers = stub_service
    answers.append((422, "application/json", '{"detail": [{"type": "missing"}]}', {}))
    assert main(["record", "--target", url, "--cases", "07_*", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "sandbox-fusion.json").read_text())["cases"]["07_missing_code"]["status"] == 422


SUITE_SANDBOX = "sandbox-emulator-reference"


def _live_names(server: EmulatorServer) -> list[str]:
    """The names of the Daytona sandboxes ``server`` holds."""
    import httpx

    key = server.emulator.config.daytona.api_key
    answer = httpx.get(f"{server.url}/api/sandbox", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    items = answer.json()
    return [s["name"] for s in (items["items"] if isinstance(items, dict) else items)]


def test_a_partial_daytona_record_deletes_its_sandbox(tmp_path: Path) -> None:
    with EmulatorServer() as server:
        key = server.emulator.config.daytona.api_key
        args = ["record", "--target", server.url + "/api", "--service", "daytona", "--api-key", key]
        assert main([*args, "--cases", "create", "code_run", "--out", str(tmp_path)]) == 0
        assert SUITE_SANDBOX not in _live_names(server)
        assert main([*args, "--cases", "create", "--out", str(tmp_path)]) == 0  # not a 409: the name is free
        assert json.loads((tmp_path / "daytona.json").read_text())["cases"]["create"]["status"] == 200
        assert SUITE_SANDBOX not in _live_names(server)


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, case_id: str) -> None:
    """Make the reference suite's case ``case_id`` raise KeyboardInterrupt, as Ctrl-C during it would."""
    from harness.reference import suite

    real = suite.run_case

    def interrupted(client: object, target: suite.Target, case: suite.Case, saved: dict[str, str]) -> suite.Answer:
        if case.id == case_id:
            raise KeyboardInterrupt
        return real(client, target, case, saved)  # type: ignore[arg-type]

    monkeypatch.setattr(suite, "run_case", interrupted)


def test_an_interrupted_daytona_run_deletes_its_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.reference import suite

    _interrupt_at(monkeypatch, "code_run")
    with EmulatorServer() as server:
        target = suite.Target("daytona", server.url + "/api", server.emulator.config.daytona.api_key)
        with pytest.raises(KeyboardInterrupt):
            suite.run_suite(target, suite.load_suite()["daytona"])
        assert SUITE_SANDBOX not in _live_names(server)


def test_record_refuses_a_409_on_create(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import httpx

    before = _good_snapshot(tmp_path, "daytona")
    with EmulatorServer() as server:
        key = server.emulator.config.daytona.api_key
        headers = {"Authorization": f"Bearer {key}"}
        left = httpx.post(f"{server.url}/api/sandbox", json={"name": SUITE_SANDBOX}, headers=headers, timeout=30)
        assert left.status_code == 200
        args = ["record", "--target", server.url + "/api", "--service", "daytona", "--api-key", key]
        assert main([*args, "--out", str(tmp_path)]) == 2
        assert SUITE_SANDBOX in _live_names(server)  # not the run's: left alone
    err = capsys.readouterr().err
    assert f"case create got 409 Conflict: a sandbox named '{SUITE_SANDBOX}' exists already" in err
    assert f"DELETE {server.url}/api/sandbox/{SUITE_SANDBOX}" in err and "nothing written" in err
    assert (tmp_path / "daytona.json").read_bytes() == before


def test_record_says_each_case_as_it_is_answered(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["record", "--target", reference_emulator.url, "--cases", "01_*", "25_*", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "sandbox-emulator record: [1/2] 01_print: 200 OK",
        "sandbox-emulator record: [2/2] 25_404: 404 Not Found",
    ]


def test_record_stops_when_the_probe_gets_no_answer_in_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from harness.reference import suite

    monkeypatch.setattr(suite, "PROBE_TIMEOUT", 0.3)
    with socket.create_server(("127.0.0.1", 0)) as hung:  # accepts connections (the backlog), never answers
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        assert main(["record", "--target", url, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"its probe GET {url}/v1/ping got no answer within 0.3 s: the service is hung; nothing recorded" in err
    assert err.count("\n") == 1 and not list(tmp_path.iterdir())


def test_an_interrupted_record_says_the_answers_were_dropped(
    reference_emulator: EmulatorServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _interrupt_at(monkeypatch, "03_exception")
    before = _good_snapshot(tmp_path, "sandbox-fusion")
    assert main(["record", "--target", reference_emulator.url, "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    path = tmp_path / "sandbox-fusion.json"
    assert f"interrupted; dropped the 2 answers received ({path} is untouched)" in err
    assert path.read_bytes() == before


def test_a_probe_answered_with_a_redirect_names_its_location(
    stub_service: tuple[str, list[tuple[int, str, str, dict[str, str]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, answers = stub_service
    answers.append((307, "text/html", "", {"Location": "https://sso.example/login"}))
    assert main(["record", "--target", url + "/sf", "--out", str(tmp_path)]) == 2  # /sf/v1/ping is no probe path
    err = capsys.readouterr().err
    assert f"GET {url}/sf/v1/ping answered 307 Temporary Redirect, a redirect to https://sso.example/login" in err


def test_a_redirects_location_is_printed_without_its_credentials(
    stub_service: tuple[str, list[tuple[int, str, str, dict[str, str]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, answers = stub_service
    answers.append((307, "text/html", "", {"Location": "https://someone:hunter22@sso.example/login"}))
    assert main(["record", "--target", url + "/sf", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a redirect to https://sso.example/login" in err and "hunter22" not in err


def test_daytona_api_key_is_read_when_no_api_key_is_given(
    reference_emulator: EmulatorServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = reference_emulator.url + "/api"
    monkeypatch.setenv("DAYTONA_API_KEY", reference_emulator.emulator.config.daytona.api_key)
    args = ["record", "--target", url, "--service", "daytona", "--cases", "create", "get", "--out", str(tmp_path)]
    assert main(args) == 0
    assert json.loads((tmp_path / "daytona.json").read_text())["cases"]["create"]["status"] == 200
    args = ["check-reference", "--reference-url", url, "--service", "daytona", "--snapshots", str(tmp_path)]
    assert main([*args, "--cases", "create", "get"]) == 0
    monkeypatch.setenv("DAYTONA_API_KEY", "wrong")
    assert main(args) == 2
    assert "the service refused the API key (401 Unauthorized)" in capsys.readouterr().err
    assert main([*args, "--api-key", reference_emulator.emulator.config.daytona.api_key, "--cases", "create"]) == 0


def test_credentials_in_an_older_snapshot_are_not_carried_on(
    reference_emulator: EmulatorServer, tmp_path: Path
) -> None:
    old = {"source": "http://user:s3cretpw@old-host:8080", "recorded_at": "2026-01-02", "cases": {}}
    old["cases"] = {"03_exception": {"status": 200, "body": {}}, "02_timeout": {"status": 200, "source": old["source"]}}
    (tmp_path / "sandbox-fusion.json").write_text(json.dumps(old))
    assert main(["record", "--target", reference_emulator.url, "--cases", "01_*", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "sandbox-fusion.json").read_text()
    assert "s3cretpw" not in text and json.loads(text)["cases"]["03_exception"]["source"] == "http://old-host:8080"


def test_record_refuses_a_server_error_and_never_stores_an_echoed_key(
    stub_service: tuple[str, list[tuple[int, str, str, dict[str, str]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.reference.suite import Case, Target, run_case

    url, answers = stub_service
    answers.append((500, "application/json", '{"message": "internal error", "auth": "Bearer SECRETKEY123"}', {}))
    args = ["record", "--target", url, "--service", "daytona", "--api-key", "SECRETKEY123", "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "case create got a server error (500 Internal Server Error): the service failed" in err
    assert "SECRETKEY123" not in err and not list(tmp_path.iterdir())
    import httpx

    with httpx.Client(timeout=30) as client:
        answer = run_case(client, Target("daytona", url, "SECRETKEY123"), Case("x", "daytona", "GET", "/x"), {})
    assert answer.body == {"message": "internal error", "auth": "Bearer <API key>"}
