"""The main job end to end: GSM8K problems through verl's real ToolAgentLoop on the embedded emulator, judged."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from harness.cli import main as cli_main
from harness.rollout.command import parse_latency
from harness.rollout.job import MAX_LATENCY_S, RolloutError, RolloutOptions, RolloutResult, run_rollout
from harness.validate import validate_dir

ROOT = Path(__file__).resolve().parents[2]
GSM8K_TEST = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_consistent(result: RolloutResult) -> list[dict[str, Any]]:
    """What must hold for any rollout: the dump is valid and says what the result says."""
    report = validate_dir(result.dump_path.parent)
    assert report.ok, report.to_json()
    entries = _lines(result.dump_path)
    assert [e["score"] for e in entries] == [t.score for t in result.trajectories]
    assert [e["request_id"] for e in entries] == [t.request_id for t in result.trajectories]
    assert all(e["step"] == result.options.step for e in entries)
    assert sum(len(e["tool_calls"]) for e in entries) == result.tool_calls
    assert result.errors == 0
    return entries


def test_calm_rollout_reaches_the_offline_ceiling(tmp_path: Path) -> None:
    """With a calm sandbox every trajectory scores what the policy scores without any sandbox."""
    result = run_rollout(RolloutOptions(trajectories=24, out=tmp_path / "dump", seed=1))
    entries = _check_consistent(result)
    assert len(entries) == 24
    assert result.dump_path == tmp_path / "dump" / "1.jsonl"
    assert [t.score for t in result.trajectories] == [t.offline_score for t in result.trajectories]
    assert result.mean_reward == result.offline_mean_reward and result.reward_lost == 0
    assert result.faults_injected == 0 and result.infra_faults_shown == 0
    assert min(len(t.tool_calls) for t in result.trajectories) >= 1
    assert max(len(t.tool_calls) for t in result.trajectories) <= 5
    # Every tool call really ran in the sandbox: one journal request per call, nothing retried.
    assert result.sandbox_requests == result.tool_calls and result.retried_requests == 0
    # The retry variant's first program fails; the model saw the traceback and went on.
    retried = [t for t in result.trajectories if t.variant == "retry"]
    assert retried and all("Error" in (t.tool_calls[0].observation or "") for t in retried)


def test_faults_cost_reward_and_are_accounted(tmp_path: Path) -> None:
    """Resets and 503s beyond the retry budget reach the model only as the infrastructure observation; the reward
    they cost is exactly the gap to the offline ceiling, and the dump still validates."""
    plan = {
        "seed": 3,
        "rules": [
            {"id": "down", "route": "sandbox_fusion.run_code", "probability": 0.2, "fault": {"status": 503}},
            {"id": "reset", "route": "sandbox_fusion.run_code", "probability": 0.1, "fault": "reset"},
        ],
    }
    retry = {"max_attempts": 2, "base_delay": 0.001, "max_delay": 0.005, "max_retry_after": 1}
    result = run_rollout(RolloutOptions(trajectories=32, out=tmp_path, faults=plan, retry=retry))
    _check_consistent(result)
    assert result.faults_injected > 0 and result.retried_requests > 0
    assert result.infra_faults_shown > 0
    lost = result.reward_lost
    assert lost is not None and result.offline_mean_reward is not None
    assert result.mean_reward == pytest.approx(result.offline_mean_reward - lost / 32)
    for trajectory in result.trajectories:
        if trajectory.score < (trajectory.offline_score or 0):
            assert any(c.infra_fault for c in trajectory.tool_calls), trajectory.request_id


def test_daytona_backend_leaks_no_sandbox(tmp_path: Path) -> None:
    result = run_rollout(RolloutOptions(trajectories=8, out=tmp_path, backend="daytona"))
    _check_consistent(result)
    assert result.sandboxes_leaked == 0
    assert result.mean_reward == result.offline_mean_reward


def test_sync_mode_gives_the_same_rewards_in_lockstep(tmp_path: Path) -> None:
    common = {"trajectories": 12, "seed": 2, "tool_latency": {"fixed": 0.01}}
    asynchronous = run_rollout(RolloutOptions(out=tmp_path / "a", mode="async", **common))
    synchronous = run_rollout(RolloutOptions(out=tmp_path / "s", mode="sync", **common))
    _check_consistent(synchronous)
    assert [t.score for t in synchronous.trajectories] == [t.score for t in asynchronous.trajectories]
    assert synchronous.barrier_waits > 0 and asynchronous.barrier_waits == 0


def test_cli_runs_summarises_and_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dump"
    figures = tmp_path / "figures.json"
    code = cli_main(["rollout", "--trajectories", "6", "--out", str(out), "--json", str(figures), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    for label in ("trajectories", "tool calls", "mean reward", "faults", "retries", "sandboxes", "max in flight"):
        assert label in printed
    assert "validate       ok" in printed
    data = json.loads(figures.read_text())
    assert data["trajectories"] == 6 and data["valid"] is True
    assert (out / "1.jsonl").exists()


def test_cli_validates_the_file_it_wrote_not_the_rest_of_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dump"
    out.mkdir()
    (out / "7.jsonl").write_text('{"no": "input"}\n')  # another run's broken step
    (out / "8.jsonl").symlink_to("/proc/self/mem")  # and one nothing can read
    code = cli_main(["rollout", "--trajectories", "2", "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed
    assert "validate       ok: " in printed.out and printed.err == ""
    assert [json.loads(line)["acc"] for line in (out / "1.jsonl").read_text().splitlines()] == [1.0, 1.0]
    assert "(replaced" not in printed.out
    assert cli_main(["rollout", "--trajectories", "1", "--out", str(out), "--quiet"]) == 0
    assert f"dump           {out / '1.jsonl'} (replaced the file there)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "nowhere"], "invalid choice"),
        (["--trajectories", "0"], "--trajectories must be between 1 and 100,000 (all run at once), got 0"),
        (["--trajectories", "1000000000"], "--trajectories must be between 1 and 100,000 (all run at once), got 10"),
        (["--data", "missing.jsonl"], "not found"),
        (["--faults", "no-such-profile"], "fault plan"),
        (["--latency", "gaussian:1"], "bad latency model"),
        (["--step", "-1"], "--step must be between 0 and 9223372036854775807"),
        (["--generation-latency", "-0.5"], "--generation-latency must be between 0 and 60 seconds, got -0.5"),
        (["--generation-latency", "nan"], "--generation-latency must be between 0 and 60 seconds"),
        (["--generation-latency", "1e9"], "--generation-latency must be between 0 and 60 seconds, got 1000000000.0"),
        (["--llm-url", "localhost:8000/v1"], "is not an http(s) URL with a host"),
        (["--latency", "fixed:-1"], "error: --latency 'fixed:-1': expected a number >= 0.0, got -1.0"),
        (["--latency", "fixed:nan"], "error: --latency 'fixed:nan': expected a finite number, got nan"),
        (["--latency", "lognormal:2,1"], "error: --latency 'lognormal:2,1': p99 (1.0) must be >= p50 (2.0)"),
        (["--latency", "pareto:1,0"], "error: --latency 'pareto:1,0': alpha: expected a number > 0, got 0.0"),
        (["--latency", "fixed:1e9"], "error: --latency 'fixed:1e9': delays must be at most 60 seconds, got 1e+09"),
        (["--latency", "lognormal:1,61"], "--latency 'lognormal:1,61': delays must be at most 60 seconds, got 61"),
        (["--latency", "pareto:1,2,100"], "--latency 'pareto:1,2,100': delays must be at most 60 seconds, got 100"),
        (["--latency", "fixed:x"], "error: --latency 'fixed:x': latency numbers must be numbers"),
        (["--llm-model", "foo"], "error: --llm-model needs --llm-url"),
        (["--llm-url", ""], "error: --llm-url: '' is not an http(s) URL with a host"),
        (["--step", str(2**63)], "error: --step must be between 0 and 9223372036854775807"),
        (["--step", str(10**300)], "got a number of 301 digits"),
        (["--faults", "nosuch"], "error: fault plan 'nosuch': <profile>: unknown fault profile 'nosuch'"),
        (["--faults", ""], "an empty name names no profile and no plan file"),
    ],
)
def test_cli_bad_input_is_a_clear_error(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = cli_main(["rollout", "--out", str(tmp_path), "--quiet", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert not list(tmp_path.iterdir())  # found before anything is written


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_unreachable_llm_url_is_one_error_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    out = tmp_path / "dump"
    out.mkdir()
    (out / "1.jsonl").write_text("the previous dump\n")
    assert cli_main(["rollout", "--out", str(out), "--quiet", "--llm-url", url, "--llm-model", "m"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --llm-url: cannot connect to 127.0.0.1:") and captured.out == ""
    assert (out / "1.jsonl").read_text() == "the previous dump\n"
    assert cli_main(["rollout", "--out", str(tmp_path / "new"), "--quiet", "--llm-url", url]) == 2
    assert not (tmp_path / "new").exists()
    with pytest.raises(RolloutError, match="--llm-url: cannot connect to"):
        run_rollout(RolloutOptions(trajectories=1, out=tmp_path / "lib", llm_url=url))
    assert not (tmp_path / "lib").exists()


def test_data_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rollout", "--out", str(tmp_path / "out"), "--quiet", "--data", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: --data {tmp_path} is a directory, not a GSM8K .jsonl or .parquet file\n"
    assert not (tmp_path / "out").exists()


def test_latency_models_and_their_bounds() -> None:
    assert parse_latency("fixed:0.2") == {"fixed": 0.2}
    assert parse_latency("lognormal:0.1,1") == {"lognormal": {"p50": 0.1, "p99": 1.0}}
    assert parse_latency("pareto:0.05,1.5,5") == {"pareto": {"scale": 0.05, "alpha": 1.5, "cap": 5.0}}
    # an unbounded tail gets the longest delay allowed as its cap
    assert parse_latency("pareto:0.05,1.5") == {"pareto": {"scale": 0.05, "alpha": 1.5, "cap": MAX_LATENCY_S}}
    assert parse_latency(f"fixed:{MAX_LATENCY_S}") == {"fixed": MAX_LATENCY_S}
    # the library's options are held to the same bounds
    with pytest.raises(RolloutError, match=r"--latency \{'fixed': 61\}: delays must be at most 60 seconds, got 61"):
        RolloutOptions(tool_latency={"fixed": 61}).check()
    with pytest.raises(RolloutError, match="--generation-latency must be between 0 and 60 seconds, got 61"):
        RolloutOptions(generation_latency=61).check()


@pytest.mark.slow
@pytest.mark.skipif(not GSM8K_TEST.exists(), reason="the GSM8K test split is not beside the checkout")
def test_real_gsm8k_test_split_reaches_the_offline_ceiling(tmp_path: Path) -> None:
    """All 1319 problems of the GSM8K test split, calm emulator: the mean reward equals the offline ceiling."""
    from harness.gsm8k.data import load_problems
    from harness.gsm8k.policy import offline_ceiling

    problems = load_problems(GSM8K_TEST)
    result = run_rollout(RolloutOptions(data=GSM8K_TEST, trajectories=len(problems), out=tmp_path))
    _check_consistent(result)
    print(f"\nGSM8K test split: mean reward {result.mean_reward:.4f} in {result.wall_s:.1f} s")
    assert result.mean_reward == pytest.approx(offline_ceiling(problems), abs=1e-12)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trajectories", "0"], "--trajectories must be between 1 and 100,000 (all run at once), got 0"),
        (["--generation-latency", "-1"], "--generation-latency must be between 0 and 60 seconds"),
    ],
)
def test_bench_modes_bad_input_is_a_clear_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["bench-modes", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("python", "message"),
    [
        ("/nonexistent/python3", "error: $SANDBOX_EMULATOR_PYTHON '/nonexistent/python3' is not an executable file"),
        ("/bin/true", "error: $SANDBOX_EMULATOR_PYTHON '/bin/true' is not a working Python interpreter"),
    ],
)
@pytest.mark.parametrize("command", ["rollout", "bench-modes"])
def test_a_bad_runtime_python_from_the_environment_is_one_line(
    command: str,
    python: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SANDBOX_EMULATOR_PYTHON", python)
    out = tmp_path / "out"
    argv = ["rollout", "--out", str(out), "--quiet"] if command == "rollout" else ["bench-modes", "--trajectories", "1"]
    assert cli_main(argv) == 2
    prefix = "error: " if command == "rollout" else "sandbox-emulator bench-modes: "
    assert capsys.readouterr().err == prefix + message.removeprefix("error: ") + "\n"
    assert not out.exists()


def test_a_failed_run_leaves_no_empty_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "dump"
    bad_data = tmp_path / "bad.jsonl"
    bad_data.write_text("{not json\n")
    assert cli_main(["rollout", "--out", str(out), "--quiet", "--data", str(bad_data)]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_json_may_not_replace_the_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dump"
    out.mkdir()
    (out / "1.jsonl").write_text("the previous dump\n")
    assert cli_main(["rollout", "--out", str(out), "--quiet", "--json", str(out / "1.jsonl")]) == 2
    assert "is in --out" in capsys.readouterr().err
    assert (out / "1.jsonl").read_text() == "the previous dump\n"


def test_a_dump_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.rollout.job as job

    def full_disk(*args: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(job, "write_step", full_disk)
    with pytest.raises(RolloutError, match=r"cannot write the dump .*1\.jsonl: No space left on device"):
        run_rollout(RolloutOptions(trajectories=1, out=tmp_path / "dump"))


def test_bench_modes_refuses_to_time_a_broken_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tool calls answered with the infrastructure-fault observation: the timing would compare nothing."""
    import harness.rollout.job as job
    from harness.bench.modes import ModesFailed, compare_modes

    real_run = job.run_rollout

    def under_an_outage(options: RolloutOptions, progress: Any = None) -> RolloutResult:
        options.faults = {"rules": [{"route": "sandbox_fusion.run_code", "fault": 503}]}
        return real_run(options, progress)

    monkeypatch.setattr(job, "run_rollout", under_an_outage)
    with pytest.raises(ModesFailed, match="infrastructure-fault observation; its time would compare a broken sandbox"):
        compare_modes(trajectories=2, generation_latency=0.0, models=[("none", {"fixed": 0.0})], progress=False)
