"""``sandbox-emulator bench``: file formats, Daytona's percentile rule, tiny end-to-end runs, clear errors."""

from __future__ import annotations

import asyncio
import csv
import gc
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.bench.backends import BenchOptions, run_backend
from harness.bench.drivers import SCENARIOS, CallOutcome, Scenario
from harness.bench.stats import (
    CSV_COLUMNS,
    EMULATOR_KEYS,
    RESULT_KEYS,
    SUMMARY_KEYS,
    LevelResult,
    PoolTimings,
    percentile,
    write_csv,
    write_summary,
)
from harness.cli import main as cli_main

EXPECTED_CSV = [
    "scenario",
    "concurrency",
    "p50_s",
    "p95_s",
    "max_s",
    "mean_s",
    "throughput_calls_per_s",
    "success_count",
    "failure_count",
]


def test_percentile_uses_the_rounded_index_without_interpolation() -> None:
    values = [float(v) for v in range(10, 0, -1)]  # unsorted on purpose: 10 .. 1
    assert percentile(values, 0.95) == 10.0  # index round(9 * 0.95) = round(8.55) = 9
    assert percentile(values, 0.50) == 5.0  # index round(4.5) = 4 (Python rounds half to even)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0  # index round(1.5) = 2
    assert percentile([7.0], 0.95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


@given(st.lists(st.floats(min_value=0, max_value=1e3), min_size=1, max_size=200), st.floats(0, 1), st.floats(0, 1))
def test_percentile_is_a_sample_and_monotonic(values: list[float], a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert percentile(values, low) in values
    assert percentile(values, low) <= percentile(values, high)


def _level() -> LevelResult:
    return LevelResult("simple_stdout", 2, (0.1, 0.2, 0.3, 0.4), (0.25, 0.5), success_count=3, failure_count=1)


def test_throughput_is_calls_over_the_sum_of_batch_walls() -> None:
    assert _level().throughput == pytest.approx(4 / 0.75)
    result = _level().result()
    assert result["mean_latency_s"] == pytest.approx(0.25)
    assert result["p95_latency_s"] == 0.4 and result["max_latency_s"] == 0.4


def test_the_emulators_own_time_adds_its_spread_to_the_result() -> None:
    level = LevelResult("simple_stdout", 2, (0.1, 0.2, 0.3, 0.4), (0.25, 0.5), 4, 0, emulator_s=(0.09, 0.05, 0.07))
    result = level.result()
    assert list(result) == [*[k for k in result if k not in EMULATOR_KEYS], *EMULATOR_KEYS]
    assert (result["p50_emulator_s"], result["p95_emulator_s"]) == (0.07, 0.09)
    assert level.row() == LevelResult("simple_stdout", 2, (0.1, 0.2, 0.3, 0.4), (0.25, 0.5), 4, 0).row()


def test_csv_and_summary_have_exactly_daytonas_columns_and_keys(tmp_path: Path) -> None:
    write_csv(tmp_path / "results.csv", [_level()])
    write_summary(
        tmp_path / "summary.json",
        {"backend": "x", "created_at": "t", "host": "h", "python_version": "3"},
        [_level()],
        PoolTimings((0.1, 0.2), 0.3, (0.05,), 0.05),
    )
    with (tmp_path / "results.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == EXPECTED_CSV == list(CSV_COLUMNS)
    # p50: index round(3 * 0.5) = 2 of the sorted latencies
    assert rows[1] == ["simple_stdout", "2", "0.3000", "0.4000", "0.4000", "0.2500", "5.33", "3", "1"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == set(SUMMARY_KEYS)
    assert list(summary["results"][0]) == sorted(RESULT_KEYS)
    assert summary["setup_result"]["setup"]["sandbox_count"] == 2
    assert summary["setup_result"]["teardown"]["sandbox_count"] == 1


def test_scenarios_are_judged_on_text_and_error_flag() -> None:
    assert CallOutcome("4\n", False).judge(SCENARIOS["simple_stdout"])
    assert not CallOutcome("4\n", True).judge(SCENARIOS["simple_stdout"])
    assert not CallOutcome("5\n", False).judge(SCENARIOS["simple_stdout"])
    assert CallOutcome("Traceback ...\nValueError: boom", True).judge(SCENARIOS["runtime_error"])
    assert not CallOutcome("ValueError", False).judge(SCENARIOS["runtime_error"])
    assert not CallOutcome("4", False, infra_fault="HTTP 504").judge(SCENARIOS["simple_stdout"])


def _read_run(out: Path, backend: str) -> tuple[list[dict[str, str]], dict[str, object]]:
    with (out / backend / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return rows, json.loads((out / backend / "summary.json").read_text())


@pytest.mark.parametrize(
    "backend", ["emulator-sf-fast", "emulator-sf-faithful", "emulator-daytona-fast", "local-subprocess"]
)
def test_a_tiny_run_end_to_end(backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--quick", "--backends", backend, "--concurrency", "2", "--iterations", "2"]
    argv += ["--scenarios", "runtime_error", "--out", str(tmp_path), "--no-plot"]
    assert cli_main(argv) == 0
    rows, summary = _read_run(tmp_path, backend)
    assert [(r["scenario"], r["concurrency"], r["success_count"], r["failure_count"]) for r in rows] == [
        ("runtime_error", "2", "4", "0")
    ]
    assert float(rows[0]["throughput_calls_per_s"]) > 0
    assert summary["backend"] == backend
    assert summary["machine_speed"]["fork_exit_ms"] > 0  # type: ignore[index]
    captured = capsys.readouterr()
    assert f"{backend}: machine speed: a pure-Python loop at" in captured.err
    assert f"{backend}" in captured.out and "Thru(c/s)" in captured.out  # the final table
    assert "c=2" in captured.err  # the progress line
    result = summary["results"][0]  # type: ignore[index]
    if backend == "local-subprocess":
        assert not set(EMULATOR_KEYS) & set(result) and "in the emulator" not in captured.err
    else:  # the emulator's own time of the measured calls, from its journal: within each call's latency
        assert 0 < result["p50_emulator_s"] <= result["p95_emulator_s"] <= result["max_latency_s"]
        assert "in the emulator p50" in captured.err


def test_plot_and_fixed_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the [bench] extra (matplotlib) is not installed")
    argv = ["bench", "--quick", "--backends", "emulator-sf-fast", "--concurrency", "1", "--iterations", "3"]
    argv += ["--scenarios", "simple_stdout", "--fixed-latency-ms", "50", "--out", str(tmp_path)]
    assert cli_main(argv) == 0
    assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows, summary = _read_run(tmp_path, "emulator-sf-fast")
    assert summary["injected_latency_s"] == 0.05
    assert float(rows[0]["p50_s"]) >= 0.05  # the injected latency is in every call
    result = summary["results"][0]  # type: ignore[index]
    assert 0.05 <= result["p50_emulator_s"] < result["p50_latency_s"]  # the rest is the client's
    out = capsys.readouterr().out
    assert "p50-inj(ms)" in out and "emulator(ms)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency takes positive integers"),
        (["--concurrency", "eight"], "--concurrency takes positive integers"),
        (["--backends", "docker"], "unknown 'docker'"),
        (["--backends", ""], "--backends: unknown an empty list"),  # not "all of them"
        (["--scenarios", "nope"], "unknown 'nope'"),
        (["--sandbox-fusion-url", "localhost:8080"], "is not an http(s) URL"),
        (["--daytona-api-url", "ftp://example.com"], "is not an http(s) URL"),
        (["--sandbox-fusion-url", "http://127.0.0.1:9", "--concurrency", "1"], "--sandbox-fusion-url: cannot connect"),
        (["--sandbox-fusion-url", "http://[::1"], "is not a valid URL"),
        (["--backends", "local-subprocess", "--fixed-latency-ms", "50"], "none of these backends runs on it"),
    ],
)
def test_bad_arguments_are_a_clear_error(args: list[str], message: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "harness.cli", "bench", "--quick", "--no-plot", "--out", str(tmp_path / "out"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_backends_measured_before_a_failure_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A service that accepts connections but is no Sandbox Fusion fails after the local baseline ran: that
    baseline's table is still printed, and its files are there."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "out"
    try:
        argv = ["bench", "--backends", "local-subprocess", "--scenarios", "simple_stdout", "--concurrency", "1"]
        argv += ["--warmups", "0", "--iterations", "1", "--no-plot", "--out", str(out)]
        argv += ["--sandbox-fusion-url", f"http://127.0.0.1:{server.server_address[1]}"]
        assert cli_main(argv) == 2
    finally:
        server.shutdown()
        server.server_close()
    captured = capsys.readouterr()
    assert "sandbox-fusion: the service failed a first print(2 + 2)" in captured.err
    assert "local-subprocess" in captured.out and "simple_stdout" in captured.out
    assert (out / "local-subprocess" / "results.csv").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", ""], "--modes: unknown an empty list"),
        (["--modes", "fast,quick"], "--modes: unknown 'quick'"),
        (["--concurrency", "0"], "--concurrency takes positive integers, got '0'"),
        (["--concurrency", "1,64", "--requests", "10"], "--requests 10 is fewer than --concurrency 64"),
    ],
)
def test_bench_throughput_names_the_bad_option(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["bench-throughput", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--sandboxes", "0"], ["--rounds", "-1"]])
def test_bench_daytona_needs_one_sandbox_and_one_round(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["bench-daytona", *args]) == 2
    err = capsys.readouterr().err
    assert f"{args[0]} must be 1 or more, got {args[1]}" in err and "Traceback" not in err


def test_bench_daytona_runs_end_to_end_with_the_machine_speed(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "bench-daytona",
        "--sandboxes",
        "2",
        "--rounds",
        "1",
        "--json",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["machine_python_loop_ns"] > 0 and figures["machine_fork_exit_ms"] > 0
    assert figures["child_processes"] >= 2  # each sandbox's interpreter, alive when counted
    assert "machine_fork_exit_ms" in done.stdout


#: A fault plan that lets two sandboxes be created and refuses the rest (a Daytona-style 429), at once.
TWO_CREATIONS = {
    "limits": [
        {
            "name": "two-creations",
            "route": "daytona.sandbox.create",
            "rate": 0.001,
            "burst": 2,
            "headers_style": "daytona",
        }
    ]
}


def _tiny_creation_limit(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``module``'s emulator process allow two sandbox creations (a limit that binds at once)."""
    from harness.bench.emulator_process import EmulatorProcess

    def limited(python_mode: str = "fast", fault_plan: object = None, **kwargs: Any) -> EmulatorProcess:
        assert fault_plan is None  # no other plan to merge with
        return EmulatorProcess(python_mode, TWO_CREATIONS, **kwargs)

    monkeypatch.setattr(f"{module}.EmulatorProcess", limited)


def test_bench_daytona_says_in_one_line_why_the_sdk_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("daytona", reason="the [daytona] extra is not installed")
    _tiny_creation_limit(monkeypatch, "harness.bench.daytona")
    assert cli_main(["bench-daytona", "--sandboxes", "3", "--rounds", "1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("sandbox-emulator bench-daytona: the Daytona SDK failed: DaytonaRateLimitError: ")
    assert "Too Many Requests" in last


def test_bench_reports_a_daytona_pool_it_could_not_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("daytona", reason="the [daytona] extra is not installed")
    _tiny_creation_limit(monkeypatch, "harness.bench.emulator_process")  # open_backend imports it from there
    argv = ["bench", "--backends", "emulator-daytona-fast", "--concurrency", "3", "--warmups", "0"]
    argv += ["--iterations", "1", "--scenarios", "simple_stdout", "--no-plot", "--out", str(tmp_path)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(
        r"emulator-daytona-fast: could not create the sandbox pool: PoolCreationError: sandbox [0-2]: HTTP 429", err
    ), err


def test_a_daytona_slot_whose_creation_failed_raises(tmp_path: Path) -> None:
    pytest.importorskip("daytona", reason="the [daytona] extra is not installed")
    from harness.bench.drivers import DaytonaBackend, PoolCreationError
    from harness.bench.emulator_process import DAYTONA_KEY, EmulatorProcess

    async def create_three(url: str) -> list[BaseException | None]:
        backend = DaytonaBackend("d", url + "/api", DAYTONA_KEY, 3)
        try:
            return await asyncio.gather(*(backend.create(i) for i in range(3)), return_exceptions=True)
        finally:
            await backend.aclose()

    with EmulatorProcess(fault_plan=TWO_CREATIONS) as emulator:
        outcomes = asyncio.run(create_three(emulator.base_url))
    failed = [o for o in outcomes if o is not None]
    assert len(failed) == 1 and isinstance(failed[0], PoolCreationError)
    assert re.fullmatch(r"sandbox [0-2]: HTTP 429", str(failed[0]))


def test_daytona_url_needs_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    assert cli_main(["bench", "--daytona-api-url", "http://127.0.0.1:9/api", "--out", str(tmp_path)]) == 2
    assert "DAYTONA_API_KEY" in capsys.readouterr().err


class _RecordingBackend:
    """Answers every call at once and records the collector's frozen count as each call ran."""

    name = "recording"

    def __init__(self) -> None:
        self.frozen_during_calls: list[int] = []
        self.released = 0

    async def create(self, index: int) -> None:
        return None

    async def call(self, index: int, scenario: Scenario) -> CallOutcome:
        self.frozen_during_calls.append(gc.get_freeze_count())
        return CallOutcome(scenario.expect, scenario.had_error)

    async def release(self, index: int) -> None:
        self.released += 1

    async def aclose(self) -> None:
        return None


def test_measured_calls_run_with_the_setup_heap_frozen_and_it_is_thawed_after(tmp_path: Path) -> None:
    backend = _RecordingBackend()
    scenario = SCENARIOS["simple_stdout"]
    options = BenchOptions(("recording",), (scenario,), (1, 4), 1, 2, tmp_path)
    before = gc.get_freeze_count()
    run = asyncio.run(run_backend(backend, options))
    probe, *measured = backend.frozen_during_calls
    assert probe == before  # the first call (the probe) is not measured
    assert len(measured) == (1 + 2) * (1 + 4) and min(measured) > before
    assert gc.get_freeze_count() == before
    assert [level.success_count for level in run.levels] == [2, 8] and backend.released == 4


class _LostJournal:
    """An emulator journal that cannot be read (its process is gone, say)."""

    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on
        self.calls: list[str] = []

    def mark(self) -> None:
        self.calls.append("mark")
        if self.fail_on == "mark":
            raise OSError("connection refused")

    def spans(self) -> tuple[float, ...]:
        self.calls.append("spans")
        raise ValueError("not JSON")


@pytest.mark.parametrize("fail_on", ["mark", "spans"])
def test_a_journal_that_cannot_be_read_costs_only_its_figure(fail_on: str, tmp_path: Path) -> None:
    backend = _RecordingBackend()
    backend.journal = _LostJournal(fail_on)  # type: ignore[attr-defined]
    options = BenchOptions(("recording",), (SCENARIOS["simple_stdout"],), (2,), 1, 3, tmp_path)
    run = asyncio.run(run_backend(backend, options))
    [level] = run.levels
    assert (level.success_count, level.emulator_s) == (6, ())
    assert "p50_emulator_s" not in level.result()
    assert backend.journal.calls == (["mark"] if fail_on == "mark" else ["mark", "spans"])  # type: ignore[attr-defined]


def test_a_machine_speed_probe_that_fails_costs_only_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.bench import machine

    def broken(*args: object, **kwargs: object) -> machine.MachineSpeed:
        raise machine.ProbeError("the machine-speed probe did not run: no fork here")

    monkeypatch.setattr(machine, "measure", broken)
    argv = ["bench", "--backends", "local-subprocess", "--concurrency", "1", "--warmups", "0", "--iterations", "1"]
    argv += ["--scenarios", "simple_stdout", "--out", str(tmp_path), "--no-plot"]
    assert cli_main(argv) == 0
    rows, summary = _read_run(tmp_path, "local-subprocess")
    assert summary["machine_speed"] is None and rows[0]["success_count"] == "1"
    assert "local-subprocess: the machine-speed probe did not run: no fork here" in capsys.readouterr().err


def test_results_that_cannot_be_written_are_still_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "local-subprocess").write_text("in the way\n")  # where the backend's directory would go
    argv = ["bench", "--backends", "local-subprocess", "--concurrency", "1", "--warmups", "0", "--iterations", "1"]
    argv += ["--scenarios", "simple_stdout", "--out", str(tmp_path), "--no-plot"]
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert f"local-subprocess: cannot write {tmp_path / 'local-subprocess'}" in captured.err
    assert "some results could not be written" in captured.err and "Traceback" not in captured.err
    assert "local-subprocess       simple_stdout" in captured.out  # the figures are not lost
    assert (tmp_path / "local-subprocess").read_text() == "in the way\n"


def test_the_plot_title_gives_the_range_of_the_machine_speed() -> None:
    from harness.bench.backends import BackendRun, speed_title
    from harness.bench.machine import MachineSpeed

    pool = PoolTimings((), 0.0)

    def run(speed: MachineSpeed | None) -> BackendRun:
        return BackendRun("b", (), pool, machine_speed=speed)

    assert speed_title([run(None)]) == ""
    one = speed_title([run(MachineSpeed(98.4, 0.451)), run(None)])
    assert one.endswith("cores; a pure-Python loop at 98 ns per iteration, fork plus exit 0.45 ms")
    two = speed_title([run(MachineSpeed(98.4, 0.451)), run(MachineSpeed(102.0, 0.72))])
    assert two.endswith("loop at 98 to 102 ns per iteration, fork plus exit 0.45 to 0.72 ms")
