"""``sandbox-emulator``: serve the emulator, run the GSM8K rollout job, validate dumps, benchmark.

Kept import-light: each subcommand imports what it needs, so ``serve`` starts fast on the bare install; the
subcommands that need verl say so when it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import sys
from collections.abc import Callable, Sequence

from harness.interrupts import INTERRUPTED, sigterm_as_interrupt


def _add_runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="interpreter that runs submitted Python (default: $SANDBOX_EMULATOR_PYTHON, else this Python)",
    )
    parser.add_argument(
        "--python-mode",
        choices=["fast", "faithful"],
        default="fast",
        help="fast: fork from a warm interpreter; faithful: a fresh interpreter per run (default: fast)",
    )
    parser.add_argument(
        "--temp-root",
        metavar="DIR",
        help="parent of the per-run work dirs (default: $TMPDIR, else /tmp); a tmpfs such as /dev/shm is faster, "
        "but programs then see that path instead of /tmp",
    )


def warm_interpreters(text: str) -> int:
    """``--warm-interpreters``: a whole number from 1 to 64 (argparse reports the error with the option's name)."""
    from emulator.executor.cores import MOST_WARM_INTERPRETERS

    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MOST_WARM_INTERPRETERS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MOST_WARM_INTERPRETERS}, got {text!r}")
    return count


def _add_warm_interpreters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warm-interpreters",
        type=warm_interpreters,
        metavar="N",
        help="warm interpreters that fork the fast path's programs (default: one per six usable cores, at most "
        "four); one bounds it near 1,500 runs/s on many cores",
    )


def check_temp_root(path: str | None) -> str | None:
    """The error for a --temp-root that cannot hold work dirs, or None (found by making and removing one)."""
    if path is None:
        return None
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(dir=path))
    except OSError:
        return f"--temp-root {path!r} is not a writable directory"
    return None


def _executor_config(args: argparse.Namespace) -> object:
    from emulator.executor import ExecutorConfig

    kwargs: dict[str, object] = {"python_mode": args.python_mode}
    if args.python:
        kwargs["python"] = args.python
    if getattr(args, "temp_root", None):
        kwargs["temp_root"] = os.path.realpath(args.temp_root)
    if getattr(args, "warm_interpreters", None):
        kwargs["warm_interpreters"] = args.warm_interpreters
    return ExecutorConfig(**kwargs)  # type: ignore[arg-type]


#: ``--daytona-latency`` keys: DaytonaConfig's ``create_latency``, ``start_latency`` and ``destroy_latency``.
DAYTONA_LATENCIES = ("create", "start", "destroy")


def parse_daytona_latency(text: str) -> dict[str, float]:
    """``create=S,start=S,destroy=S`` (any of them) as seconds by key; ValueError says what is wrong."""
    fields: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in DAYTONA_LATENCIES:
            known = ", ".join(f"{k}=SECONDS" for k in DAYTONA_LATENCIES)
            raise ValueError(f"--daytona-latency: {item.strip()!r} is not one of {known}")
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and 0 <= seconds <= 86_400):
            raise ValueError(f"--daytona-latency: {key} must be a number of seconds from 0 to 86400, got {value!r}")
        if key in fields:
            raise ValueError(f"--daytona-latency: {key} is given twice")
        fields[key] = seconds
    return fields


def parse_failed_auth(text: str) -> tuple[int, float]:
    """``LIMIT/TTL``: the failed-auth throttler's limit and its window (and block) in seconds."""
    limit_s, sep, ttl_s = text.partition("/")
    try:
        limit, ttl = int(limit_s), float(ttl_s)
    except ValueError:
        limit, ttl = 0, math.nan
    if not sep or limit < 1 or not (math.isfinite(ttl) and ttl > 0):
        raise ValueError(
            f"--daytona-failed-auth: {text!r} is not LIMIT/TTL (failures a client may make in TTL seconds, e.g. 5/60)"
        )
    return limit, ttl


def parse_listing_seed(text: str) -> int | None:
    """``--daytona-listing-seed``: a whole number, or ``none`` for creation order."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--daytona-listing-seed: {text!r} is not a whole number or none") from None


def daytona_config(args: argparse.Namespace) -> object:
    """The Daytona configuration ``serve``'s options ask for; ValueError for a bad one."""
    from emulator.daytona import DEFAULT_API_KEY, DaytonaConfig, ThrottlerSpec, tier_throttlers
    from emulator.daytona.config import FAILED_AUTH

    if args.daytona_api_key is not None and not args.daytona_api_key.strip():
        raise ValueError("--daytona-api-key must not be empty")
    throttlers = () if args.daytona_tier == "none" else tier_throttlers(int(args.daytona_tier))
    if args.daytona_failed_auth is not None:
        limit, ttl = parse_failed_auth(args.daytona_failed_auth)
        throttlers = (*throttlers, ThrottlerSpec(FAILED_AUTH, limit, ttl))
    latencies = parse_daytona_latency(args.daytona_latency) if args.daytona_latency is not None else {}
    seed = parse_listing_seed(args.daytona_listing_seed) if args.daytona_listing_seed is not None else 0
    return DaytonaConfig(
        api_key=args.daytona_api_key or DEFAULT_API_KEY,
        throttlers=throttlers,
        create_latency=latencies.get("create", 0.0),
        start_latency=latencies.get("start", 0.0),
        destroy_latency=latencies.get("destroy", 0.0),
        listing_seed=seed,
    )


def _serve(args: argparse.Namespace) -> int:
    from emulator.app import Emulator, EmulatorConfig
    from emulator.executor import ExecutorConfig
    from emulator.executor.cores import warm_interpreters
    from emulator.faults import FaultPlanError
    from emulator.server import serve_forever
    from harness.runtime import has_ipython, python_problem

    problem = python_problem(args.python) or check_temp_root(args.temp_root)
    if problem:
        print(f"sandbox-emulator: {problem}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"sandbox-emulator: --port must be between 0 and 65535, got {args.port}", file=sys.stderr)
        return 2
    if not args.host.strip():  # an unset variable in a script: it would bind every interface, silently
        print("sandbox-emulator: --host must not be empty (0.0.0.0 binds every interface)", file=sys.stderr)
        return 2
    from emulator.daytona import DaytonaConfig

    try:
        daytona = daytona_config(args)
    except ValueError as exc:
        print(f"sandbox-emulator: {exc}", file=sys.stderr)
        return 2
    assert isinstance(daytona, DaytonaConfig)
    executor_config = _executor_config(args)
    assert isinstance(executor_config, ExecutorConfig)
    daytona_key = daytona.api_key
    ipython = args.jupyter_engine != "python" and has_ipython(args.python)
    if args.jupyter_engine == "ipython" and not ipython:
        print(
            "sandbox-emulator: note: the runtime Python has no IPython, so /run_jupyter will fail as the real "
            "driver does without its kernel packages (install sandbox-emulator[jupyter] into it, or use "
            "--jupyter-engine auto)",
            file=sys.stderr,
        )
    config = EmulatorConfig(executor=executor_config, daytona=daytona, jupyter_engine=args.jupyter_engine)
    try:
        emulator = Emulator(config, faults=args.faults)
    except (FaultPlanError, OSError, ValueError) as exc:
        print(f"sandbox-emulator: bad --faults {args.faults!r}: {exc}", file=sys.stderr)
        return 2

    def announce(base: str) -> None:
        # Everything loaded so far lives as long as the server: out of the collector's sight, a full collection
        # no longer walks it (those walks were about a tenth of the server's CPU under load).
        gc.freeze()
        # The server keeps a journal entry and a decision record per request (the newest 200,000 of each), and
        # CPython's default thresholds walked them all in a full collection every thousand requests or so: up to
        # 0.2 s each, 15% of the server's CPU over 60,000 requests. So the collector runs rarely: the young
        # generation every 10,000 net allocations (cycles that die young are still collected there), a full
        # collection considered only after 2,000 of those. A `/run_code` request leaves no cycle behind.
        gc.set_threshold(10_000, 20, 100)
        print(f"Sandbox Fusion  {base}/run_code  {base}/run_jupyter  {base}/v1/ping", flush=True)
        print(f"Daytona         DAYTONA_API_URL={base}/api DAYTONA_API_KEY={daytona_key}", flush=True)
        print(f"Control plane   {base}/_emulator/  (health, reset, faults, journal, stats, decisions)", flush=True)
        warm = warm_interpreters(executor_config.warm_interpreters)
        interpreters = f"{warm} warm interpreter{'s' if warm > 1 else ''}"
        print(f"Python runtime  {emulator.python} ({args.python_mode} path, {interpreters})", flush=True)
        cells = "in IPython's shell, as the real kernel" if ipython else "as plain Python (no IPython in the runtime)"
        if args.jupyter_engine == "python":
            cells = "as plain Python"
        print(f"Jupyter cells   {cells} (--jupyter-engine {args.jupyter_engine})", flush=True)
        if args.faults:
            print(f"Fault plan      {args.faults}", flush=True)

    try:
        serve_forever(emulator, host=args.host, port=args.port, log_level=args.log_level, on_ready=announce)
    except OSError as exc:
        print(f"sandbox-emulator: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _bench(args: argparse.Namespace) -> int:
    from harness.bench.throughput import main as bench_main

    return bench_main(args)


def build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The full parser; ``wanted`` is the subcommand about to run (its module is the only one imported)."""
    parser = argparse.ArgumentParser(prog="sandbox-emulator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the emulator as its own process")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8080, help="port (default: 8080, as Sandbox Fusion; 0 picks one)")
    serve.add_argument("--faults", metavar="FILE_OR_PROFILE", help="fault plan: a YAML/JSON file or a profile name")
    serve.add_argument(
        "--daytona-api-key", metavar="KEY", help="bearer key the Daytona API accepts (default: printed at start)"
    )
    serve.add_argument(
        "--daytona-tier",
        choices=["1", "2", "3", "4", "none"],
        default="1",
        help="the Daytona API's rate limits (its throttlers and their headers): a tier's, or none (default: 1)",
    )
    serve.add_argument(
        "--daytona-latency",
        metavar="create=S,start=S,destroy=S",
        help="seconds a Daytona sandbox stays creating, starting, and found after its delete (default: 0 each)",
    )
    serve.add_argument(
        "--daytona-failed-auth",
        metavar="LIMIT/TTL",
        help="the Daytona API's failed-auth throttler: the LIMIT-th refused key in TTL seconds blocks the client "
        "for TTL seconds (default: off, as the API's)",
    )
    serve.add_argument(
        "--daytona-listing-seed",
        metavar="N|none",
        help="seed of the shuffled order in which sessions, their commands and interpreter contexts are listed (as "
        "the daemon's Go maps list them; default: 0); none lists them in creation order",
    )
    serve.add_argument(
        "--jupyter-engine",
        choices=["auto", "ipython", "python"],
        default="auto",
        help="how /run_jupyter runs cells: in IPython's shell as the real kernel does (ipython), as plain Python "
        "(python), or in IPython where the runtime Python has it (auto, the default)",
    )
    serve.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    _add_runtime_options(serve)
    _add_warm_interpreters(serve)
    serve.set_defaults(func=_serve)

    bench = sub.add_parser("bench-throughput", help="executions/s of print(2+2) over HTTP, fast and faithful paths")
    bench.add_argument(
        "--concurrency", nargs="+", default=["1,16,128"], help="levels, comma- or space-separated (default: 1,16,128)"
    )
    bench.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per level (default: 40 per connection on the fast path, 10 on the faithful one, at least 200)",
    )
    bench.add_argument("--modes", default="fast,faithful", help="comma-separated: fast, faithful")
    bench.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    bench.add_argument("--python", metavar="PATH", help="runtime interpreter for submitted Python")
    bench.add_argument("--temp-root", metavar="DIR", help="parent of the emulator's per-run work dirs (see serve)")
    _add_warm_interpreters(bench)
    bench.add_argument(
        "--client",
        default="lean",
        choices=["lean", "aiohttp"],
        help="load generator: lean (a bare keep-alive HTTP/1.1 client, the least CPU taken from the emulator) or "
        "aiohttp (default: lean)",
    )
    bench.set_defaults(func=_bench)

    daytona = sub.add_parser("bench-daytona", help="Daytona through the real SDK: creates/s, code_run/s, peak RSS")
    daytona.add_argument("--sandboxes", type=int, default=128, help="sandboxes, all created at once (default: 128)")
    daytona.add_argument("--rounds", type=int, default=5, help="rounds of one code_run per sandbox (default: 5)")
    daytona.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    daytona.set_defaults(func=_bench_daytona)
    for command in _EXTRA_COMMANDS:
        _register_extra(sub, command, load=command == wanted)
    return parser


#: Subcommands living in modules that need the ``[verl]`` extra: name -> (module, one-line help). A module is
#: imported only when its subcommand is the one asked for, so ``serve`` never pays for verl.
_EXTRA_COMMANDS = {
    "rollout": ("harness.rollout.command", "GSM8K multi-turn rollouts through verl's agent loop, dumped and validated"),
    "validate": ("harness.validate.cli", "check a rollout dump directory (ours or a real verl run's)"),
    "gsm8k-convert": ("harness.gsm8k.data", "convert raw GSM8K JSONL to verl parquet for the code tool"),
    "bench": ("harness.bench.backends", "calls/s and latency of sandbox backends, as Daytona's tool benchmark"),
    "bench-modes": ("harness.bench.modes", "rollout wall time: batch-synchronous against asynchronous tool calls"),
    "record": ("harness.reference.record", "record the reference suite's answers from a real service"),
    "check-reference": ("harness.reference.check", "compare the emulator (or a live service) with the recordings"),
    "grpo": ("harness.rewards.command", "a GRPO run on CPU (TRL, a tiny model) with rewards from a Daytona pool"),
}
#: The extra each of those commands needs, for the message when it is missing.
_EXTRA_OF = {
    "bench": "bench,daytona",
    "record": "dev,daytona",
    "check-reference": "dev,daytona",
    "grpo": "trl,daytona",
}


def _register_extra(sub: argparse._SubParsersAction[argparse.ArgumentParser], command: str, load: bool) -> None:
    """Let the module add its subcommand (``load``), else a placeholder; without its dependencies, a stub that says
    what to install."""
    import importlib

    module, help_text = _EXTRA_COMMANDS[command]
    extra = _EXTRA_OF.get(command, "verl")
    missing = ""
    if load:
        try:
            importlib.import_module(module).register_cli(sub)
            return
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in ("harness", "emulator"):
                raise  # our own module broken: a bug to see, not an extra to install
            missing = exc.name or str(exc)
    stub = sub.add_parser(command, help=help_text, add_help=not missing)
    stub.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def explain(args: argparse.Namespace) -> int:
        print(_missing_extra(command, extra, missing), file=sys.stderr)
        return 2

    stub.set_defaults(func=explain)


#: The extra that brings each third-party package a command may import only once it runs (the tools import verl, the
#: converter pyarrow, bench-daytona the SDK): the top-level module name -> the extra.
_EXTRA_OF_MODULE = {
    "verl": "verl",
    "torch": "verl",
    "pyarrow": "verl",
    "daytona": "daytona",
    "daytona_api_client": "daytona",
    "daytona_toolbox_api_client": "daytona",
    "aiohttp": "bench",
    "matplotlib": "bench",
    "trl": "trl,daytona",
    "redis": "redis",
    "ray": "ray",
}


def _missing_extra(command: str, extra: str, missing: str) -> str:
    """The one line a command prints when a package of one of our extras is not installed."""
    return (
        f"sandbox-emulator {command}: needs the [{extra}] extra ({missing} is not installed); install it with: "
        + ("pip install torch==2.13.0 && " if extra in ("verl", "trl,daytona") else "")
        + f"pip install 'sandbox-emulator[{extra}]'"
    )


def _run(command: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand; a package it needs that is not installed is that one line and exit 2, not a traceback.

    Ctrl-C or SIGTERM stops it through its cleanup (the emulator process it started, its sandboxes) and ends it with
    one line and status 130. ``serve`` keeps its own handling (the server's graceful shutdown).
    """
    if command == "serve":
        return func(args)
    try:
        with sigterm_as_interrupt():
            return func(args)
    except (KeyboardInterrupt, asyncio.CancelledError):  # asyncio.run cancels the main task on Ctrl-C
        print(f"sandbox-emulator {command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except ImportError as exc:
        top = (exc.name or "").split(".")[0]
        if not top or top in ("harness", "emulator"):
            raise  # our own module broken: a bug to see, not an extra to install
        extra = _EXTRA_OF_MODULE.get(top) or _EXTRA_OF.get(command, "verl")
        print(_missing_extra(command, extra, top), file=sys.stderr)
        return 2


def _bench_daytona(args: argparse.Namespace) -> int:
    from harness.bench.daytona import main as daytona_main

    return daytona_main(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    wanted = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(wanted)
    args = parser.parse_args(argv)
    return _run(args.command, args.func, args)


def entry() -> None:
    """The ``sandbox-emulator`` program: :func:`main`'s status as the process's exit status.

    An interrupted command has done its cleanup and said so by the time :func:`main` returns 130; it then exits at
    once. Left to the interpreter's own exit, a second interrupt pending from the event loop's signal handling could
    still end it by SIGINT (seen under SIGTERM with uvloop) instead of with 130.
    """
    status = main()
    if status == INTERRUPTED:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the work is stopped and said so: only the exit is left
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    entry()
