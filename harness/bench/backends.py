"""``sandbox-emulator bench``: calls/s and latency of sandbox backends, by the method of Daytona's tool benchmark.

Daytona's ``benchmark_tool_backends.py`` (its veRL guide) pre-creates ``max(concurrency)`` sandboxes, then for each
scenario and concurrency level ``c`` runs warm-up batches and measured batches of ``c`` calls at once (call ``i`` on
sandbox ``i``), reports p50/p95 by the index ``round((n - 1) * pct)``, max, mean, and throughput as measured calls
over the sum of batch wall times. This reproduces that method on the emulator (its own process, fast and faithful
paths, Sandbox Fusion through ``SandboxFusionTool`` and Daytona through ``DaytonaTool`` and the real SDK), a
``python -c`` per call baseline, and any real service given by URL.

Output: ``OUT/<backend>/results.csv`` and ``OUT/<backend>/summary.json`` (one directory per backend, so each CSV
has Daytona's columns exactly), ``OUT/throughput.png``, a progress line per level and a table at the end. For the
emulator's backends, its own time of each measured call (from its journal, see ``emulator_time``) goes beside the
calls' latency: the rest is the client's.
Exit status: 0 when every call succeeded, 1 when some failed, 2 for bad arguments, a missing extra or a backend that
cannot run, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import os
import platform
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.bench import machine
from harness.bench.drivers import SCENARIOS, Backend, Scenario
from harness.bench.machine import MachineSpeed
from harness.bench.stats import LevelResult, PoolTimings, write_csv, write_summary
from harness.interrupts import INTERRUPTED, sigterm_as_interrupt
from harness.outputs import dir_problem
from harness.urls import unreachable, url_problem

EMULATOR_BACKENDS = ("emulator-sf-fast", "emulator-sf-faithful", "emulator-daytona-fast")
DEFAULT_BACKENDS = (*EMULATOR_BACKENDS, "local-subprocess")
DEFAULT_LEVELS = (1, 4, 8, 16, 32, 64, 128)
QUICK_LEVELS = (1, 8, 32)


class BenchError(Exception):
    """A problem the user can fix (bad argument, unreachable service): one line on stderr, exit status 2.

    Raised by :func:`run` partway, it carries in ``completed`` the backends measured before (their files are
    written), so that their table is still shown.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.completed: list[BackendRun] = []


@dataclass(frozen=True)
class BenchOptions:
    """A parsed, validated command line."""

    backends: tuple[str, ...]
    scenarios: tuple[Scenario, ...]
    levels: tuple[int, ...]
    warmups: int
    iterations: int
    out: Path
    fixed_latency_s: float | None = None
    sandbox_fusion_url: str | None = None
    daytona_api_url: str | None = None
    daytona_api_key: str | None = None
    plot: bool = True


@dataclass(frozen=True)
class BackendRun:
    """Everything measured for one backend."""

    backend: str
    levels: tuple[LevelResult, ...]
    pool: PoolTimings
    #: Whether its results.csv and summary.json were written.
    written: bool = True
    #: The machine's speed just before it ran (None when the probe failed).
    machine_speed: MachineSpeed | None = None


# ---------------------------------------------------------------------------------------------------- measuring


async def _timed(step: Awaitable[None]) -> tuple[float, BaseException | None]:
    start = time.perf_counter()
    try:
        await step
    except Exception as exc:
        return time.perf_counter() - start, exc
    return time.perf_counter() - start, None


async def _batch(backend: Backend, scenario: Scenario, concurrency: int) -> tuple[list[float], float, int]:
    """``concurrency`` calls at once, call ``i`` on sandbox ``i``: (latencies, batch wall time, successes)."""

    async def one(index: int) -> tuple[float, bool]:
        start = time.perf_counter()
        try:
            outcome = await backend.call(index, scenario)
        except Exception:  # a client bug or a dead service is a failed call, not a dead benchmark
            return time.perf_counter() - start, False
        return time.perf_counter() - start, outcome.judge(scenario)

    start = time.perf_counter()
    calls = await asyncio.gather(*(one(i) for i in range(concurrency)))
    wall = time.perf_counter() - start
    return [latency for latency, _ in calls], wall, sum(ok for _, ok in calls)


async def measure_level(
    backend: Backend, scenario: Scenario, concurrency: int, warmups: int, iterations: int
) -> LevelResult:
    """Warm-up batches (not counted), then ``iterations`` measured batches (and, from the emulator's journal, its own
    time for each measured call)."""
    for _ in range(warmups):
        await _batch(backend, scenario, concurrency)
    journal = getattr(backend, "journal", None)
    if journal is not None:
        try:
            await asyncio.to_thread(journal.mark)
        except (OSError, ValueError):  # the calls are what is measured: without the journal, only its figure is lost
            journal = None
    latencies: list[float] = []
    walls: list[float] = []
    ok = 0
    for _ in range(iterations):
        batch_latencies, wall, good = await _batch(backend, scenario, concurrency)
        latencies += batch_latencies
        walls.append(wall)
        ok += good
    emulator: tuple[float, ...] = ()
    if journal is not None:
        with contextlib.suppress(OSError, ValueError):
            emulator = await asyncio.to_thread(journal.spans)
    return LevelResult(scenario.name, concurrency, tuple(latencies), tuple(walls), ok, len(latencies) - ok, emulator)


async def run_backend(
    backend: Backend, options: BenchOptions, progress: Callable[[str], None] = lambda line: None
) -> BackendRun:
    """Create the pool, check one call gets through, measure every (scenario, level), release the pool."""
    pool_size = max(options.levels)
    started = time.perf_counter()
    created = await asyncio.gather(*(_timed(backend.create(i)) for i in range(pool_size)))
    create_wall = time.perf_counter() - started
    failed = [exc for _, exc in created if exc is not None]
    try:
        if failed:
            raise BenchError(f"{backend.name}: could not create the sandbox pool: {_reason(failed[0])}")
        probe = await backend.call(0, SCENARIOS["simple_stdout"])
        if probe.infra_fault is not None:
            raise BenchError(f"{backend.name}: the service failed a first print(2 + 2): {probe.infra_fault}")
        levels: list[LevelResult] = []
        with frozen_heap():
            for scenario in options.scenarios:
                for concurrency in options.levels:
                    level = await measure_level(backend, scenario, concurrency, options.warmups, options.iterations)
                    levels.append(level)
                    injected = options.fixed_latency_s if backend.name in EMULATOR_BACKENDS else None
                    progress(_progress_line(backend.name, level, injected))
    finally:
        started = time.perf_counter()
        released = await asyncio.gather(
            *(_timed(backend.release(i)) for i, (_, exc) in enumerate(created) if exc is None)
        )
        release_wall = time.perf_counter() - started
        await backend.aclose()
    pool = PoolTimings(tuple(t for t, _ in created), create_wall, tuple(t for t, _ in released), release_wall)
    return BackendRun(backend.name, tuple(levels), pool)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the collector off what exists before measuring: this process's imports (verl, torch, the SDKs).

    The benchmark process holds some 400,000 objects after its imports. A full collection walks them all, about
    165 ms, and a run of 1,536 calls at concurrency 128 met one: its level lost a tenth of its throughput, at random.
    Younger collections also cost more with so big a heap. Frozen, they are not the backend's cost any more (a
    trainer can do the same with ``gc.freeze()`` after its setup).
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _progress_line(name: str, level: LevelResult, latency: float | None) -> str:
    result = level.result()
    line = (
        f"  {name:22s} {level.scenario:17s} c={level.concurrency:<4d} {result['measured_call_count']:6d} calls "
        f"{level.throughput:9.1f} calls/s  p50 {result['p50_latency_s'] * 1000:8.1f} ms  "
        f"p95 {result['p95_latency_s'] * 1000:8.1f} ms  failures {level.failure_count}"
    )
    if "p50_emulator_s" in result:
        line += f"  in the emulator p50 {result['p50_emulator_s'] * 1000:.2f} ms"
    if latency is not None:
        line += f"  p50 over injected {(result['p50_latency_s'] - latency) * 1000:.2f} ms"
        if "p50_emulator_s" in result:
            line += f" (emulator {(result['p50_emulator_s'] - latency) * 1000:.2f})"
    return line


# ---------------------------------------------------------------------------------------------------- backends


@contextmanager
def open_backend(name: str, options: BenchOptions) -> Iterator[Backend]:
    """The backend, with its emulator process running for as long as the ``with`` block (Ctrl-C included)."""
    from harness.bench.drivers import DaytonaBackend, LocalSubprocessBackend, SandboxFusionBackend
    from harness.bench.emulator_process import DAYTONA_KEY, EmulatorProcess, EmulatorStartError, fixed_latency_plan
    from harness.bench.emulator_time import ROUTES, EmulatorJournal

    pool = max(options.levels)
    if name in EMULATOR_BACKENDS:
        mode = name.rsplit("-", 1)[1]
        plan = fixed_latency_plan(options.fixed_latency_s) if options.fixed_latency_s is not None else None
        emulator = EmulatorProcess(mode, plan)
        try:
            emulator.start()
        except EmulatorStartError as exc:
            raise BenchError(f"{name}: {exc}") from None
        try:
            if name.startswith("emulator-sf-"):
                journal = EmulatorJournal(emulator.base_url, ROUTES["sandbox-fusion"])
                yield SandboxFusionBackend(name, emulator.base_url + "/run_code", pool, journal)
            else:
                journal = EmulatorJournal(emulator.base_url, ROUTES["daytona"])
                yield DaytonaBackend(name, emulator.base_url + "/api", DAYTONA_KEY, pool, journal)
        finally:
            emulator.stop()
    elif name == "local-subprocess":
        yield LocalSubprocessBackend()
    elif name == "sandbox-fusion":
        assert options.sandbox_fusion_url is not None
        yield SandboxFusionBackend(name, options.sandbox_fusion_url, pool)
    elif name == "daytona":
        assert options.daytona_api_url is not None and options.daytona_api_key is not None
        yield DaytonaBackend(name, options.daytona_api_url, options.daytona_api_key, pool)
    else:  # parse_options only lets known names through
        raise BenchError(f"unknown backend {name!r}")


def _header(name: str, options: BenchOptions, speed: MachineSpeed | None) -> dict[str, Any]:
    return {
        "backend": name,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "host": socket.gethostname(),
        "python_version": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "warmups": options.warmups,
        "iterations": options.iterations,
        "injected_latency_s": options.fixed_latency_s if name in EMULATOR_BACKENDS else None,
        "machine_speed": speed.as_dict() if speed is not None else None,
    }


def _machine_speed(name: str, progress: Callable[[str], None]) -> MachineSpeed | None:
    """This machine's speed just before a backend runs (it drifts within an hour on a shared VM)."""
    try:
        speed = machine.measure()
    except machine.ProbeError as exc:
        progress(f"{name}: {exc}")
        return None
    progress(f"{name}: machine speed: {speed.describe()}")
    return speed


def _load_clients(backends: Sequence[str]) -> None:
    """Import the tools the backends drive before the first one runs: a missing verl or daytona (an ImportError,
    which the command line turns into what to install) is then found out before anything is measured."""
    import importlib

    if any(name != "local-subprocess" for name in backends):
        importlib.import_module("harness.tools.sandbox_fusion")
    if any("daytona" in name for name in backends):
        importlib.import_module("harness.tools.daytona")


def run(options: BenchOptions, progress: Callable[[str], None] = lambda line: None) -> list[BackendRun]:
    """Measure every backend in turn (each in its own event loop), writing its files as soon as it is done."""
    _load_clients(options.backends)
    runs: list[BackendRun] = []
    for name in options.backends:
        speed = _machine_speed(name, progress)
        progress(f"{name}: creating {max(options.levels)} sandboxes")

        async def go(name: str = name) -> BackendRun:
            with open_backend(name, options) as backend:
                return await run_backend(backend, options, progress)

        try:
            result = dataclasses.replace(asyncio.run(go()), machine_speed=speed)
        except BenchError as exc:
            exc.completed = runs
            raise
        directory = options.out / name
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_csv(directory / "results.csv", result.levels)
            write_summary(directory / "summary.json", _header(name, options, speed), result.levels, result.pool)
        except OSError as exc:  # the run goes on: its figures are in the table at the end
            progress(f"{name}: cannot write {directory}: {exc.strerror or exc}; its figures are in the table only")
            result = dataclasses.replace(result, written=False)
        runs.append(result)
    return runs


def speed_title(runs: Sequence[BackendRun]) -> str:
    """The plot's title: the range of the machine's speed over the backends' runs, so a shared plot carries it."""
    speeds = [r.machine_speed for r in runs if r.machine_speed is not None]
    if not speeds:
        return ""

    def span(values: list[float], digits: int) -> str:
        low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
        return low if low == high else f"{low} to {high}"

    loop = span([s.python_loop_ns for s in speeds], 0)
    fork = span([s.fork_exit_ms for s in speeds], 2)
    return f"{os.cpu_count()} cores; a pure-Python loop at {loop} ns per iteration, fork plus exit {fork} ms"


def table(runs: Sequence[BackendRun], latency: float | None = None) -> str:
    """Daytona's terminal table, with a backend column; with an injected latency, the p50 over it (of the calls, and
    of the emulator's own time: the rest is the client's)."""
    head = f"{'Backend':22s} {'Scenario':17s} {'Conc':>5s} {'p50':>8s} {'p95':>8s} {'Thru(c/s)':>10s}"
    head += f" {'OK':>6s} {'Fail':>5s}"
    if latency is not None:
        head += f" {'p50-inj(ms)':>12s} {'emulator(ms)':>12s}"
    lines = [head, "-" * len(head)]
    for run_ in runs:
        for level in run_.levels:
            r = level.result()
            line = (
                f"{run_.backend:22s} {level.scenario:17s} {level.concurrency:5d} {r['p50_latency_s']:8.4f} "
                f"{r['p95_latency_s']:8.4f} {level.throughput:10.2f} {level.success_count:6d} {level.failure_count:5d}"
            )
            if latency is not None:
                over = (r["p50_latency_s"] - latency) * 1000 if run_.backend in EMULATOR_BACKENDS else float("nan")
                own = (r["p50_emulator_s"] - latency) * 1000 if "p50_emulator_s" in r else float("nan")
                line += f" {over:12.2f} {own:12.2f}"
            lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- command line


def _levels(raw: Sequence[str]) -> tuple[int, ...]:
    levels: list[int] = []
    for item in (part for chunk in raw for part in chunk.split(",") if part.strip()):
        try:
            value = int(item)
        except ValueError:
            raise BenchError(f"--concurrency takes positive integers, got {item!r}") from None
        if value < 1:
            raise BenchError(f"--concurrency takes positive integers, got {value}")
        levels.append(value)
    if not levels:
        raise BenchError("--concurrency needs at least one level")
    return tuple(dict.fromkeys(levels))


def _names(raw: str, known: Sequence[str], flag: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        given = ", ".join(map(repr, unknown)) or "an empty list"
        raise BenchError(f"{flag}: unknown {given}; choose from {', '.join(known)}")
    return names


def _url(raw: str, flag: str) -> str:
    problem = url_problem(raw)
    if problem is not None:
        raise BenchError(f"{flag}: {problem}")
    return raw.rstrip("/")


def _services_unreachable(options: BenchOptions) -> str | None:
    """Why a real service given by URL cannot be measured (nothing accepts a connection), or None: found before the
    other backends spend their minutes, not after."""
    for flag, url in (
        ("--sandbox-fusion-url", options.sandbox_fusion_url),
        ("--daytona-api-url", options.daytona_api_url),
    ):
        problem = unreachable(url) if url else None
        if problem is not None:
            return f"{flag}: {problem}"
    return None


def parse_options(args: argparse.Namespace) -> BenchOptions:
    """Validate the command line; :class:`BenchError` says what is wrong."""
    given = args.backends is not None  # an empty --backends is a mistake, not "all of them"
    backends = _names(args.backends, DEFAULT_BACKENDS, "--backends") if given else DEFAULT_BACKENDS
    if args.sandbox_fusion_url or args.daytona_api_url:
        backends = _names(args.backends, DEFAULT_BACKENDS, "--backends") if given else ()
    scenarios = tuple(SCENARIOS[n] for n in _names(args.scenarios, tuple(SCENARIOS), "--scenarios"))
    levels = _levels(args.concurrency) if args.concurrency else (QUICK_LEVELS if args.quick else DEFAULT_LEVELS)
    warmups = args.warmups if args.warmups is not None else (1 if args.quick else 3)
    iterations = args.iterations if args.iterations is not None else (3 if args.quick else 20)
    if warmups < 0 or iterations < 1:
        raise BenchError("--warmups must be >= 0 and --iterations >= 1")
    latency = None
    if args.fixed_latency_ms is not None:
        if not 0 <= args.fixed_latency_ms <= 60_000:
            raise BenchError(f"--fixed-latency-ms must be between 0 and 60000, got {args.fixed_latency_ms}")
        latency = args.fixed_latency_ms / 1000
    sf_url = daytona_url = daytona_key = None
    if args.sandbox_fusion_url:
        sf_url = _url(args.sandbox_fusion_url, "--sandbox-fusion-url")
        sf_url = sf_url if sf_url.endswith("/run_code") else sf_url + "/run_code"
        backends += ("sandbox-fusion",)
    if args.daytona_api_url:
        daytona_url = _url(args.daytona_api_url, "--daytona-api-url")
        daytona_key = os.environ.get("DAYTONA_API_KEY")
        if not daytona_key:
            raise BenchError("--daytona-api-url needs the API key in the environment variable DAYTONA_API_KEY")
        backends += ("daytona",)
    if not backends:
        raise BenchError("no backend to run")
    if latency is not None and not any(name in EMULATOR_BACKENDS for name in backends):
        raise BenchError("--fixed-latency-ms is injected by the emulator, and none of these backends runs on it")
    out = Path(args.out) if args.out else Path("bench-results") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return BenchOptions(
        backends=backends,
        scenarios=scenarios,
        levels=levels,
        warmups=warmups,
        iterations=iterations,
        out=out,
        fixed_latency_s=latency,
        sandbox_fusion_url=sf_url,
        daytona_api_url=daytona_url,
        daytona_api_key=daytona_key,
        plot=not args.no_plot,
    )


def main(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        options = parse_options(args)
        # found out before measuring, not after; made by the first backend's results (a failure before, no dir)
        problem = dir_problem(options.out, "--out", create=False) or _services_unreachable(options)
        if problem:
            raise BenchError(problem)
        with ExitStack() as stack:
            stack.enter_context(sigterm_as_interrupt())
            runs = run(options, say)
    except BenchError as exc:
        if exc.completed:  # measured and written before the failure: shown, not lost
            print(table(exc.completed, options.fixed_latency_s))
            say(f"results of {', '.join(r.backend for r in exc.completed)}: {options.out}/<backend>/")
        print(f"sandbox-emulator bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sandbox-emulator bench: interrupted; emulator stopped, sandboxes released", file=sys.stderr)
        return INTERRUPTED
    print(table(runs, options.fixed_latency_s))
    if options.plot:
        from harness.bench.plot import plot_throughput

        try:
            levels = {r.backend: r.levels for r in runs}
            plot_throughput(options.out / "throughput.png", levels, speed_title(runs))
        except ImportError:
            say("no plot: matplotlib is missing (pip install 'sandbox-emulator[bench]')")
        except OSError as exc:
            say(f"no plot: cannot write {options.out / 'throughput.png'}: {exc.strerror or exc}")
        else:
            say(f"plot: {options.out / 'throughput.png'}")
    say(f"results: {options.out}/<backend>/results.csv and summary.json")
    if not all(r.written for r in runs):
        say("sandbox-emulator bench: some results could not be written (see above)")
        return 2
    return 0 if all(level.failure_count == 0 for r in runs for level in r.levels) else 1


def register_cli(sub: Any) -> None:
    """Add ``bench`` to the ``sandbox-emulator`` subcommands."""
    parser = sub.add_parser(
        "bench",
        help="calls/s and latency of sandbox backends, as Daytona's tool benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--backends",
        metavar="LIST",
        help=f"comma-separated, from {', '.join(DEFAULT_BACKENDS)} (default: all of them, or none when a URL is given)",
    )
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), metavar="LIST", help="comma-separated (default: all three)"
    )
    parser.add_argument(
        "--concurrency",
        nargs="+",
        metavar="N",
        help=f"levels (default: {' '.join(map(str, DEFAULT_LEVELS))}; with --quick {' '.join(map(str, QUICK_LEVELS))})",
    )
    parser.add_argument("--warmups", type=int, help="unmeasured batches per level (default: 3; --quick 1)")
    parser.add_argument("--iterations", type=int, help="measured batches per level (default: 20; --quick 3)")
    parser.add_argument("--quick", action="store_true", help="a short run: fewer levels and batches")
    parser.add_argument(
        "--fixed-latency-ms", type=float, metavar="MS", help="inject this latency on every emulator execution"
    )
    parser.add_argument("--sandbox-fusion-url", metavar="URL", help="also a real Sandbox Fusion (/run_code URL)")
    parser.add_argument("--daytona-api-url", metavar="URL", help="also a real Daytona API (key in DAYTONA_API_KEY)")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: bench-results/<UTC time>)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.set_defaults(func=main)
