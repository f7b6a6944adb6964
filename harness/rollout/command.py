"""``sandbox-emulator rollout``: the main job from the command line, with a progress bar and a closing summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO


def parse_latency(text: str) -> Any:
    """``fixed:0.2`` | ``lognormal:P50,P99`` | ``pareto:SCALE,ALPHA[,CAP]`` -> a fault-plan latency spec; ValueError
    (the reason, without the option) for anything else. A Pareto without CAP is capped at the longest delay allowed:
    its tail is unbounded, and one draw could stall the run for hours."""
    from harness.rollout.job import MAX_LATENCY_S, latency_problem

    kind, _, args = text.partition(":")
    try:
        values = [float(v) for v in args.split(",")] if args else []
    except ValueError:
        raise ValueError("latency numbers must be numbers") from None
    spec: dict[str, Any]
    if kind == "fixed" and len(values) == 1:
        spec = {"fixed": values[0]}
    elif kind == "lognormal" and len(values) == 2:
        spec = {"lognormal": {"p50": values[0], "p99": values[1]}}
    elif kind == "pareto" and len(values) in (2, 3):
        cap = values[2] if len(values) == 3 else max(MAX_LATENCY_S, values[0])  # a larger scale: its own error
        spec = {"pareto": {"scale": values[0], "alpha": values[1], "cap": cap}}
    else:
        raise ValueError("bad latency model: use fixed:SECONDS, lognormal:P50,P99 or pareto:SCALE,ALPHA[,CAP]")
    problem = latency_problem(spec)
    if problem is not None:
        raise ValueError(problem)
    return spec


class ProgressBar:
    """One line on a terminal, redrawn in place; on a pipe or file, a line every tenth of the way."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.tty = stream.isatty()
        self._last_decile = -1

    def __call__(self, done: int, total: int, tool_calls: int) -> None:
        fill = int(self.width * done / total)
        line = f"[{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} trajectories, {tool_calls} tool calls"
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write("\r" + line + end)
            self.stream.flush()
            return
        decile = done * 10 // total
        if decile != self._last_decile:
            self._last_decile = decile
            print(line, file=self.stream, flush=True)


def summary_lines(result: Any) -> list[str]:
    """The closing summary of a rollout, one figure per line."""
    options = result.options
    lines = [
        f"backend        {options.backend} (embedded emulator); faults {options.faults or 'calm'}; mode {options.mode}",
        f"trajectories   {len(result.trajectories)} ({result.errors} failed)",
        *[f"  failed: {t.error}" for t in result.trajectories if t.error][:3],
        f"tool calls     {result.tool_calls} ({result.tool_calls / len(result.trajectories):.2f} per trajectory)",
        f"mean reward    {result.mean_reward:.4f}",
    ]
    if result.offline_mean_reward is not None:
        lines.append(f"offline ceil.  {result.offline_mean_reward:.4f} (the same policy with a perfect sandbox)")
        lines.append(
            f"reward lost    {result.reward_lost:.1f} to the sandbox pipeline "
            f"({result.infra_faults_shown} calls shown the infrastructure-fault observation)"
        )
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result.fault_counts.items())) or "none"
    leaked = "n/a (stateless service)" if result.sandboxes_leaked is None else str(result.sandboxes_leaked)
    lines += [
        f"faults         {result.faults_injected} injected ({faults}) in {result.sandbox_requests} sandbox requests",
        f"retries        {result.retried_requests} requests were retries by the tool",
        f"sandboxes      {leaked} leaked",
        f"max in flight  {result.max_in_flight} requests at the sandbox",
        f"wall time      {result.wall_s:.2f} s; rollouts {result.rollout_s:.2f} s "
        f"({len(result.trajectories) / max(result.rollout_s, 1e-9):.1f} trajectories/s)",
        f"dump           {result.dump_path}{' (replaced the file there)' if result.replaced else ''}",
    ]
    return lines


def _options(args: argparse.Namespace) -> Any:
    """The job's options from the command line; RolloutError for a bad ``--latency`` or a lone ``--llm-model``."""
    from harness.rollout.job import RolloutError, RolloutOptions

    if args.llm_model is not None and not args.llm_url:  # the scripted policy has no model name to send
        raise RolloutError("--llm-model needs --llm-url (the model name is sent to that server)")
    try:
        latency = parse_latency(args.latency) if args.latency is not None else None
    except ValueError as exc:
        raise RolloutError(f"--latency {args.latency!r}: {exc}") from None
    return RolloutOptions(
        data=Path(args.data) if args.data else None,
        backend=args.backend,
        faults=args.faults,
        trajectories=args.trajectories,
        out=Path(args.out),
        step=args.step,
        mode=args.mode,
        variant=args.variant,
        seed=args.seed,
        rate_limit=args.rate_limit,
        generation_latency=args.generation_latency,
        tool_latency=latency,
        llm_url=args.llm_url,
        llm_model=args.llm_model or "default",
        python_mode=args.python_mode,
    )


def _json_in_dump(args: argparse.Namespace) -> str | None:
    """Why ``--json`` would spoil the dump, or None: a ``*.jsonl`` in ``--out`` is read as a step's dump (the summary
    written over ``{step}.jsonl`` would replace the rollouts themselves)."""
    if not args.json:
        return None
    target = Path(os.path.realpath(args.json))
    if target.suffix == ".jsonl" and target.parent == Path(os.path.realpath(args.out)):
        return f"--json {args.json!r} is in --out {args.out!r}, where every *.jsonl is read as a step's dump"
    return None


def run(args: argparse.Namespace) -> int:
    from harness.outputs import dir_problem, file_problem, write_text
    from harness.rollout.job import RolloutError, run_rollout

    try:
        options = _options(args)
        options.check()  # before --out is made: a bad option or an unreachable --llm-url creates nothing
    except RolloutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problem = (file_problem(args.json, "--json") if args.json else None) or _json_in_dump(args)
    # --out is made when the dump is written: a run that fails before leaves no empty directory behind
    problem = problem or dir_problem(args.out, "--out", create=False)
    if problem:  # found out before the rollout, not after
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        result = run_rollout(options, progress=None if args.quiet else ProgressBar())
    except RolloutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(result)))
    from harness.validate import UsageError, validate_file

    try:  # the file this run wrote, not whatever else --out holds
        report = validate_file(result.dump_path)
    except UsageError as exc:
        print(f"error: cannot validate the dump: {exc}", file=sys.stderr)
        return 2
    print(f"validate       {'ok' if report.ok else 'FAILED'}: {report.summary_line()}")
    if not report.ok:
        for line in report.shown_lines(10):
            print("  " + line)
    if args.json:
        problem = write_text(args.json, json.dumps(result_json(result, report.ok), indent=2) + "\n", "--json")
        if problem:  # the summary above is already out; say why the file is not
            print(f"error: {problem}", file=sys.stderr)
            return 2
    return 0 if report.ok and not result.errors else 1


def result_json(result: Any, valid: bool) -> dict[str, Any]:
    """The summary's figures as data (``--json``)."""
    return {
        "backend": result.options.backend,
        "faults": str(result.options.faults or "calm"),
        "mode": result.options.mode,
        "trajectories": len(result.trajectories),
        "failed_trajectories": result.errors,
        "tool_calls": result.tool_calls,
        "mean_reward": result.mean_reward,
        "offline_mean_reward": result.offline_mean_reward,
        "reward_lost": result.reward_lost,
        "infra_faults_shown": result.infra_faults_shown,
        "faults_injected": result.faults_injected,
        "fault_counts": result.fault_counts,
        "sandbox_requests": result.sandbox_requests,
        "retried_requests": result.retried_requests,
        "sandboxes_leaked": result.sandboxes_leaked,
        "max_in_flight": result.max_in_flight,
        "barrier_waits": result.barrier_waits,
        "wall_s": result.wall_s,
        "rollout_s": result.rollout_s,
        "dump": str(result.dump_path),
        "valid": valid,
    }


def register_cli(sub: Any) -> None:
    """Add ``rollout`` to the ``sandbox-emulator`` subcommands."""
    from harness.rollout.job import BACKENDS, MAX_LATENCY_S, MODES

    parser = sub.add_parser(
        "rollout",
        help="GSM8K multi-turn rollouts through verl's agent loop on the embedded emulator, dumped and validated",
    )
    parser.add_argument("--data", metavar="FILE", help="GSM8K JSONL or verl parquet (default: the bundled problems)")
    parser.add_argument(
        "--backend", choices=BACKENDS, default="sandbox-fusion", help="the tool's sandbox (default: sandbox-fusion)"
    )
    parser.add_argument(
        "--faults", metavar="PROFILE_OR_FILE", help="fault plan: a profile name or a YAML/JSON file (default: none)"
    )
    parser.add_argument("--trajectories", type=int, default=64, help="how many (default: 64)")
    parser.add_argument(
        "--out", default="rollouts", help="dump directory, like trainer.rollout_data_dir (default: rollouts)"
    )
    parser.add_argument("--step", type=int, default=1, help="the step number of the dump file (default: 1)")
    parser.add_argument(
        "--mode", choices=MODES, default="async", help="async: per trajectory; sync: lockstep turns (default: async)"
    )
    parser.add_argument("--variant", choices=("single", "stepwise", "retry"), help="one policy variant (default: mix)")
    parser.add_argument("--seed", type=int, default=0, help="problem order and variant mix (default: 0)")
    parser.add_argument("--rate-limit", type=int, help="the tool's in-flight cap (default: the tool config's)")
    parser.add_argument(
        "--latency",
        metavar="MODEL",
        help=f"tool latency, seconds up to {MAX_LATENCY_S:g}: fixed:S, lognormal:P50,P99, pareto:S,A[,CAP] "
        f"(CAP default {MAX_LATENCY_S:g})",
    )
    parser.add_argument(
        "--generation-latency",
        type=float,
        default=0.0,
        help=f"seconds per model turn, up to {MAX_LATENCY_S:g} (default: 0)",
    )
    parser.add_argument("--llm-url", help="an OpenAI-compatible server to use as the policy instead of the script")
    parser.add_argument("--llm-model", help="model name sent to --llm-url (default: default)")
    parser.add_argument(
        "--python-mode", choices=("fast", "faithful"), help="the emulator's Python path (default: fast)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the summary's figures as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)
