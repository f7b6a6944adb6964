"""Batch-synchronous against trajectory-asynchronous tool execution, on CPU, under the emulator's latency models.

VerlTool (Jiang et al., 2025) reports that letting each trajectory go on as soon as its own tool call returns, instead
of waiting for the slowest call of the batch at every turn, speeds rollouts up 1.32x on Math-TIR (up to 1.97x on
other tasks). This runs the same GSM8K rollout twice per latency model, ``--mode sync`` and ``--mode async``, with
the same problems, the same policy and the same per-request latencies (the emulator draws a request's latency from
its logical key, so both modes see identical tool latencies), and reports the ratio of rollout times (first
trajectory started to last finished; the emulator's start and the tools' set-up are left out).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Latency models on the execution route: (label, fault-plan latency spec).
LATENCY_MODELS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fixed 0.2 s", {"fixed": 0.2}),
    ("log-normal p50 0.1 s, p99 1 s", {"lognormal": {"p50": 0.1, "p99": 1.0}}),
    ("heavy-tailed Pareto 0.05 s, alpha 1.5, cap 5 s", {"pareto": {"scale": 0.05, "alpha": 1.5, "cap": 5.0}}),
)
#: VerlTool's reported speed-ups of asynchronous over synchronous tool execution.
PAPER_FIGURES = (("VerlTool, Math-TIR", 1.32), ("VerlTool, best task", 1.97))


class ModesFailed(Exception):
    """A run failed trajectories or showed the model infrastructure faults: its time measures something else."""


@dataclass
class ModeRow:
    """One latency model: wall time in each mode and their ratio."""

    model: str
    trajectories: int
    tool_calls: int
    sync_s: float
    async_s: float
    sync_reward: float
    async_reward: float
    barrier_waits: int

    @property
    def speedup(self) -> float:
        return self.sync_s / self.async_s


def compare_modes(
    *,
    trajectories: int = 64,
    generation_latency: float = 0.05,
    models: Sequence[tuple[str, dict[str, Any]]] = LATENCY_MODELS,
    seed: int = 0,
    variant: str | None = None,
    progress: bool = True,
) -> list[ModeRow]:
    """Run both modes for each latency model; rewards are reported to show both did the same work."""
    from harness.rollout.job import RolloutOptions, run_rollout

    rows: list[ModeRow] = []
    with tempfile.TemporaryDirectory(prefix="bench-modes-") as tmp:
        for label, latency in models:
            results = {}
            for mode in ("sync", "async"):
                options = RolloutOptions(
                    trajectories=trajectories,
                    out=Path(tmp) / f"{len(rows)}-{mode}",
                    mode=mode,
                    seed=seed,
                    variant=variant,
                    rate_limit=trajectories,  # the tool's cap out of the way: the comparison is about waiting
                    generation_latency=generation_latency,
                    tool_latency=latency,
                )
                result = results[mode] = run_rollout(options)
                if result.errors or result.infra_faults_shown:
                    raise ModesFailed(
                        f"the {mode} run under {label}: {result.errors} failed trajectories, "
                        f"{result.infra_faults_shown} tool calls answered with the infrastructure-fault observation; "
                        "its time would compare a broken sandbox, not the two modes"
                    )
                if progress:
                    print(f"  {label:<48} {mode:>5}: {results[mode].rollout_s:6.2f} s", flush=True)
            sync, asyn = results["sync"], results["async"]
            rows.append(
                ModeRow(
                    model=label,
                    trajectories=trajectories,
                    tool_calls=asyn.tool_calls,
                    sync_s=sync.rollout_s,
                    async_s=asyn.rollout_s,
                    sync_reward=sync.mean_reward,
                    async_reward=asyn.mean_reward,
                    barrier_waits=sync.barrier_waits,
                )
            )
    return rows


def markdown_table(rows: Sequence[ModeRow]) -> str:
    """The comparison as a Markdown table, the paper's figures below it."""
    lines = [
        "| tool latency model | trajectories | tool calls | sync (s) | async (s) | async speed-up |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.model} | {row.trajectories} | {row.tool_calls} | {row.sync_s:.2f} | {row.async_s:.2f} "
            f"| {row.speedup:.2f}x |"
        )
    for label, figure in PAPER_FIGURES:
        lines.append(f"| {label} (published) | | | | | {figure:.2f}x |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from harness.outputs import file_problem, write_text
    from harness.rollout.job import RolloutError

    problem = file_problem(args.json, "--json") if args.json else None
    if problem:
        print(f"sandbox-emulator bench-modes: {problem}", file=sys.stderr)
        return 2
    try:
        rows = compare_modes(
            trajectories=args.trajectories,
            generation_latency=args.generation_latency,
            seed=args.seed,
            variant=args.variant,
        )
    except RolloutError as exc:
        print(f"sandbox-emulator bench-modes: {exc}", file=sys.stderr)
        return 2
    except ModesFailed as exc:
        print(f"sandbox-emulator bench-modes: {exc}", file=sys.stderr)
        return 1
    print(markdown_table(rows))
    if args.json:
        data = [{**row.__dict__, "speedup": row.speedup} for row in rows]
        problem = write_text(args.json, json.dumps(data, indent=2) + "\n", "--json")
        if problem:
            print(f"sandbox-emulator bench-modes: {problem}", file=sys.stderr)
            return 2
    return 0


def register_cli(sub: Any) -> None:
    """Add ``bench-modes`` to the ``sandbox-emulator`` subcommands."""
    parser = sub.add_parser("bench-modes", help="rollout wall time, batch-synchronous against asynchronous tool calls")
    parser.add_argument("--trajectories", type=int, default=64, help="per run (default: 64)")
    parser.add_argument("--generation-latency", type=float, default=0.05, help="seconds per model turn (default: 0.05)")
    parser.add_argument("--variant", choices=("single", "stepwise", "retry"), help="one policy variant (default: mix)")
    parser.add_argument("--seed", type=int, default=0, help="problem order and variant mix (default: 0)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.set_defaults(func=main)
