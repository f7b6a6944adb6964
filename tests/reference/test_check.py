"""``record`` and ``check-reference``: a recording of the emulator checks clean against the emulator, the committed
recordings pass with the registry, an unregistered difference fails with a diff, a stale entry is reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from emulator.server import EmulatorServer
from harness.cli import main
from harness.reference.suite import default_fixtures_dir

SNAPSHOTS = default_fixtures_dir() / "snapshots"
REGISTRY = default_fixtures_dir() / "divergences.yaml"


def _empty_registry(tmp_path: Path) -> Path:
    path = tmp_path / "none.yaml"
    path.write_text("divergences: []\n")
    return path


def test_an_api_key_where_no_key_is_taken_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--target", "http://127.0.0.1:9", "--api-key", "k", "--out", "unused"]) == 2
    assert "--api-key is Daytona's" in capsys.readouterr().err
    assert main(["check-reference", "--api-key", "k"]) == 2  # the emulator has its own key
    assert "--api-key is for a live Daytona" in capsys.readouterr().err


@pytest.mark.parametrize("service", ["sandbox-fusion", "daytona"])
def test_recording_the_emulator_then_checking_it_finds_no_difference(
    service: str, reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = reference_emulator.url + ("/api" if service == "daytona" else "")
    key = reference_emulator.emulator.config.daytona.api_key
    auth = ["--api-key", key] if service == "daytona" else []  # Sandbox Fusion takes no key
    assert main(["record", "--target", url, "--service", service, *auth, "--out", str(tmp_path)]) == 0
    recorded = json.loads((tmp_path / f"{service}.json").read_text())
    assert all("body" in c for c in recorded["cases"].values())
    capsys.readouterr()
    args = ["check-reference", "--snapshots", str(tmp_path), "--service", service, "--json"]
    assert main([*args, "--registry", str(_empty_registry(tmp_path))]) == 0
    report = json.loads(capsys.readouterr().out)
    [checked] = report["services"]
    assert checked["counts"]["ok"] == len(recorded["cases"]) > 10
    assert all(not c["differences"] and not c["registered"] for c in checked["cases"])


def test_committed_recordings_pass_with_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-reference", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_service = {s["service"]: s for s in report["services"]}
    assert set(by_service) == {"sandbox-fusion", "daytona"}
    assert by_service["sandbox-fusion"]["counts"]["ok"] >= 20
    assert by_service["sandbox-fusion"]["counts"]["registered"] >= 1  # the registry is used, not bypassed
    assert by_service["daytona"]["counts"]["ok"] == 14
    assert not by_service["sandbox-fusion"]["stale"]


def test_a_registered_case_fails_without_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check-reference", "--service", "sandbox-fusion", "--cases", "32_*"]
    assert main([*args, "--registry", str(_empty_registry(tmp_path))]) == 1
    assert "FAIL 32_numpy_with_memlimit_1024" in capsys.readouterr().out


def test_unregistered_difference_fails_with_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshots = tmp_path / "snapshots"
    shutil.copytree(SNAPSHOTS, snapshots)
    path = snapshots / "sandbox-fusion.json"
    data = json.loads(path.read_text())
    data["cases"]["01_print"]["body"]["run_result"]["stdout"] = "3\n"
    path.write_text(json.dumps(data))
    args = ["check-reference", "--snapshots", str(snapshots), "--service", "sandbox-fusion", "--cases", "01_*", "15_*"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAIL 01_print: 1 unregistered difference(s)" in out
    assert 'body.run_result.stdout:\n        recorded "3\\n"\n        got      "2\\n"' in out
    assert "15_bash" not in out and out.rstrip().endswith("FAILED")


def test_stale_registry_entry_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "divergences.yaml"
    registry.write_text(
        REGISTRY.read_text()
        + "- service: sandbox-fusion\n  case: 01_print\n  field: body.run_result.stdout\n"
        + "  reason: once differed\n  validated: 2026-01-01\n"
    )
    assert main(["check-reference", "--service", "sandbox-fusion", "--cases", "01_*", "--registry", str(registry)]) == 0
    out = capsys.readouterr().out
    assert "stale registry entry 01_print body.run_result.stdout (validated 2026-01-01)" in out
    assert "32_numpy" not in out  # entries of cases not run are not judged


def test_reference_url_checks_a_live_service(reference_emulator: EmulatorServer) -> None:
    url = reference_emulator.url + "/api"
    key = reference_emulator.emulator.config.daytona.api_key
    assert main(["check-reference", "--reference-url", url, "--service", "daytona", "--api-key", key]) == 0


def test_unreachable_live_service_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-reference", "--reference-url", "http://127.0.0.1:9", "--cases", "01_*"]) == 2
    assert "--reference-url: cannot connect to 127.0.0.1:9: Connection refused" in capsys.readouterr().err


def test_a_live_service_that_does_not_answer_fails(closing_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-reference", "--reference-url", closing_server, "--cases", "01_*"]) == 1
    out = capsys.readouterr().out
    assert "FAIL 01_print: no answer (" in out
    assert "no case was compared: none of the 1 recorded cases selected got an answer" in out
    assert "none of those selected is recorded" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check-reference", "--snapshots", "{tmp}"], "no snapshot for sandbox-fusion, daytona"),
        (["check-reference", "--registry", "{tmp}/bad.yaml"], "must be a mapping with a 'divergences' list"),
        (["check-reference", "--suite", "{tmp}/none.yaml"], "cannot read the suite"),
        (["check-reference", "--reference-url", "http://x", "--service", "all"], "needs one --service"),
        (["check-reference", "--reference-url", "localhost:8080", "--service", "sandbox-fusion"], "not an http(s) URL"),
        (["check-reference", "--reference-url", "https://", "--service", "daytona"], "not an http(s) URL with a host"),
        (["record", "--target", "localhost:8080", "--out", "{tmp}"], "--target: 'localhost:8080' is not"),
        (["record", "--target", "http://x", "--cases", "nope", "--out", "{tmp}"], "no sandbox-fusion case matches"),
        (["check-reference", "--cases", "nope"], "no sandbox-fusion or daytona case matches --cases"),
        (["check-reference", "--service", "daytona", "--cases", "01_*"], "no daytona case matches --cases"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_text("- just a list\n")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _snapshot(path: Path, cases: dict[str, object], source: str = "the real server") -> None:
    path.write_text(
        json.dumps({"service": "sandbox-fusion", "source": source, "recorded_at": "2026-01-02", "cases": cases})
    )


def test_recording_a_down_service_leaves_the_snapshot_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sandbox-fusion.json"
    _snapshot(path, {"01_print": {"status": 200, "body": {"status": "Success"}}})
    before = path.read_bytes()
    assert main(["record", "--target", "http://127.0.0.1:9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--target: cannot connect to 127.0.0.1:9: Connection refused; nothing recorded" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["sandbox-fusion.json"]


def test_recording_a_service_that_never_answers_leaves_the_snapshot_untouched(
    closing_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sandbox-fusion.json"
    _snapshot(path, {"01_print": {"status": 200, "body": {"status": "Success"}}})
    before = path.read_bytes()
    assert main(["record", "--target", closing_server, "--cases", "01_*", "02_*", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "01_print: no answer (" in err and "recorded none of 2 sandbox-fusion cases" in err
    assert f"{path} is untouched" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["sandbox-fusion.json"]


def test_recording_some_cases_keeps_the_others(
    reference_emulator: EmulatorServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sandbox-fusion.json"
    earlier = {"status": 200, "body": {"run_result": {"stdout": "from before\n"}}}
    _snapshot(path, {"01_print": {"status": 500}, "03_exception": earlier})
    assert main(["record", "--target", reference_emulator.url, "--cases", "01_*", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recorded 1 of 1 sandbox-fusion cases" in out and "kept the earlier answers of 1 cases" in out
    merged = json.loads(path.read_text())
    assert merged["source"] == reference_emulator.url
    assert merged["cases"]["01_print"]["status"] == 200  # replaced by the answer got now
    assert merged["cases"]["01_print"]["body"]["run_result"]["stdout"] == "2\n"
    assert "recorded_at" not in merged["cases"]["01_print"]  # the file's own
    kept = merged["cases"]["03_exception"]
    assert kept == {**earlier, "source": "the real server", "recorded_at": "2026-01-02"}


def test_an_unreadable_snapshot_is_not_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sandbox-fusion.json"
    path.write_text("{not json")
    assert main(["record", "--target", "http://127.0.0.1:9", "--cases", "01_*", "--out", str(tmp_path)]) == 2
    assert "cannot read the snapshot" in capsys.readouterr().err
    assert path.read_text() == "{not json"
