"""``sandbox-emulator grpo``: a real GRPO run on CPU (TRL, a tiny model) with rewards from a Daytona sandbox pool,
one line per training step and a closing summary."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.rewards.grpo import DEFAULT_TASKS, GRPOSettings
from harness.rewards.job import GRPOJobError, GRPOJobOptions, GRPOJobResult, run_grpo_job


def step_line(step: int, steps: int, logs: dict[str, Any]) -> str:
    """One training step as the trainer logged it."""
    return (
        f"step {step}/{steps}  reward {logs.get('reward', float('nan')):+.3f}"
        f" (std {logs.get('reward_std', float('nan')):.3f})  loss {logs.get('loss', float('nan')):+.4f}"
        f"  grad norm {logs.get('grad_norm', float('nan')):.3f}"
    )


def summary_lines(result: GRPOJobResult) -> list[str]:
    """The closing summary, one figure per line."""
    options, settings, stats = result.options, result.options.settings, result.pool
    where = options.api_url or "embedded emulator"
    context = "a fresh context per run" if options.fresh_context else "the default context"
    per_step = ", ".join(f"{entry.get('reward', float('nan')):+.3f}" for entry in result.outcome.steps)
    lines = [
        f"backend        daytona ({where}); faults {options.faults or 'calm'}; pool {options.pool_size}, {context}",
        f"training       {len(result.outcome.steps)} GRPO steps, {result.completions} completions"
        f" ({settings.prompts_per_step} prompts x {settings.generations}),"
        f" weights moved by {result.outcome.weight_change:.4f}",
        f"rewards        mean {result.mean_reward:+.3f}; per step {per_step}",
        f"pool           {stats.created} created ({stats.replaced} replacements), {stats.executions} runs,"
        f" {stats.timeouts} timeouts, {stats.infra_failures} infra failures, {stats.create_failures} failed creations,"
        f" {stats.orphans_deleted} orphans deleted, {stats.gave_up} completions given up",
    ]
    if result.pool_problem is not None:
        lines.append(f"pool short     {result.pool_problem}")
    if result.runs_per_program is not None:
        ran = sum(result.runs_per_program.values())
        line = f"journal        {ran} programs ran; each completion ran exactly once: "
        if result.each_ran_once:
            line += "yes"
        else:
            line += f"no: {result.never_ran} never ran, {result.ran_again} ran again"
            if result.never_ran == stats.gave_up and not result.ran_again:
                line += " (every try failed outside the program: scored -1)"
        lines.append(line)
    if result.faults_injected:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(result.faults_injected.items()))
        lines.append(f"faults         {sum(result.faults_injected.values())} injected ({kinds})")
    if result.sandboxes_left is not None:
        left = ", ".join(result.sandboxes_left) or "none"
        lines.append(f"sandboxes left {len(result.sandboxes_left)} ({left})")
    lines.append(f"time           {result.wall_s:.1f} s in all, {result.train_s:.1f} s training")
    return lines


def interrupted_line(sandboxes_left: list[str] | None) -> str:
    """What an interrupted run says of the pool's sandboxes: deleted only when its cleanup said so."""
    if sandboxes_left is None:
        return "interrupted: training stopped (whether the pool's sandboxes were deleted is not known)"
    if sandboxes_left:
        return (
            f"interrupted: training stopped; {len(sandboxes_left)} of the pool's sandboxes could not be deleted:"
            f" {', '.join(sandboxes_left)}"
        )
    return "interrupted: training stopped and the pool's sandboxes were deleted"


def result_json(result: GRPOJobResult) -> dict[str, Any]:
    stats = result.pool
    return {
        "steps": result.outcome.steps,
        "completions": result.completions,
        "mean_reward": result.mean_reward,
        "weight_change": result.outcome.weight_change,
        "pool": vars(stats),
        "each_ran_once": result.each_ran_once,
        "never_ran": result.never_ran,
        "ran_again": result.ran_again,
        "sandboxes_left": result.sandboxes_left,
        "faults_injected": result.faults_injected,
        "pool_problem": result.pool_problem,
        "wall_s": result.wall_s,
        "train_s": result.train_s,
        "ok": result.ok,
    }


def _options(args: argparse.Namespace) -> GRPOJobOptions:
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    settings = GRPOSettings(
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        generations=args.generations,
        seed=args.seed,
        tasks=tasks,
    )
    return GRPOJobOptions(
        settings=settings,
        pool_size=args.pool,
        timeout=args.timeout,
        faults=args.faults,
        fresh_context=not args.shared_context,
        api_url=args.api_url,
        api_key=args.api_key,
    )


def run(args: argparse.Namespace) -> int:
    from harness.outputs import file_problem, write_text
    from harness.runtime import python_problem

    problem = python_problem() or (file_problem(args.json, "--json") if args.json else None)
    if problem:  # found out before training, not after
        print(f"error: {problem}", file=sys.stderr)
        return 2

    def progress(step: int, steps: int, logs: dict[str, Any]) -> None:
        print(step_line(step, steps, logs), file=sys.stderr, flush=True)

    try:
        result = run_grpo_job(_options(args), progress=None if args.quiet else progress)
    except GRPOJobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # the reward's cleanup has run by now, bounded and stoppable
        print(interrupted_line(getattr(exc, "sandboxes_left", None)), file=sys.stderr)
        return 130
    print("\n".join(summary_lines(result)))
    if args.json:
        problem = write_text(args.json, json.dumps(result_json(result), indent=2, default=str) + "\n", "--json")
        if problem:  # the summary above is already out; say why the file is not
            print(f"error: {problem}", file=sys.stderr)
            return 2
    if result.pool_problem is not None:  # trained on fewer sandboxes than asked for: not a clean run
        print(f"error: {result.pool_problem}", file=sys.stderr)
    return 0 if result.ok else 1


def register_cli(sub: Any) -> None:
    parser = sub.add_parser(
        "grpo",
        help="a GRPO run on CPU (TRL, a tiny local model) with rewards from a Daytona sandbox pool",
        description="Train a tiny, locally built model with TRL's GRPOTrainer for a few steps; every completion is "
        "scored in a pool of Daytona sandboxes (the embedded emulator unless --api-url is given). Nothing is "
        "downloaded.",
    )
    parser.add_argument("--steps", type=int, default=3, help="training steps (default: 3)")
    parser.add_argument("--prompts-per-step", type=int, default=2, help="prompts per step (default: 2)")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (default: 4)")
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated task names")
    parser.add_argument("--pool", type=int, default=8, help="sandboxes created up front, at most 1024 (default: 8)")
    parser.add_argument(
        "--timeout", type=float, default=1.0, help="whole seconds a program may run, 1 to 600 (default: 1)"
    )
    parser.add_argument("--faults", metavar="PROFILE_OR_FILE", help="fault plan for the embedded emulator")
    parser.add_argument(
        "--shared-context", action="store_true", help="run in the default interpreter context, as Daytona's example"
    )
    parser.add_argument("--api-url", help="a real Daytona API URL instead of the embedded emulator")
    parser.add_argument("--api-key", help="the Daytona API key for --api-url (default: DAYTONA_API_KEY)")
    parser.add_argument(
        "--seed", type=int, default=0, help="model initialisation and sampling, 0 to 2**32 - 1 (default: 0)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--quiet", action="store_true", help="no line per step")
    parser.set_defaults(func=run)
