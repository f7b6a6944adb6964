"""The GRPO job: the tiny CPU GRPO run with its rewards from a Daytona pool, on the embedded emulator or a real
Daytona, and the figures that say whether the rewards were right and the sandboxes were cleaned up."""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from harness.rewards.grpo import TRAINABLE_TASKS, GRPOOutcome, GRPOSettings, RecordingReward, train_grpo
from harness.rewards.sandbox_reward import (
    DaytonaPool,
    PoolExhaustedError,
    PoolStats,
    SandboxReward,
    build_program,
    extract_code,
    precheck,
)
from harness.rewards.tasks import get_task
from harness.urls import url_problem

#: Called after each training step with (step, steps, that step's log entry).
StepProgress = Callable[[int, int, dict[str, Any]], None]

#: The longest ``--timeout`` (seconds) a program may be given: the Daytona daemon's own default limit for
#: ``run_code``, ten minutes (the emulator's ``DaytonaConfig.interpreter_timeout``). A reward program that runs longer
#: stalls its whole training step; a larger figure is almost always a slip (``1e12``, ``inf``).
MAX_TIMEOUT_S = 600.0
#: Bounds on the run's size, each far past a CPU run's useful range: a larger figure is a slip, and would make the
#: dataset (one row per task, step and prompt) or a step's completions (all scored at once) before failing.
MAX_STEPS = 10_000
MAX_PROMPTS_PER_STEP = 1024
MAX_GENERATIONS = 1024
MAX_COMPLETIONS_PER_STEP = 1024
MAX_DATASET_ROWS = 100_000  # steps x prompts per step
#: Seeds numpy accepts (``np.random.seed``, which the trainer calls): ``0 <= seed < 2**32``.
MAX_SEED = 2**32 - 1


class GRPOJobError(RuntimeError):
    """Bad options or a pool that could not be made: a message for the user, not a traceback."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the job; ``sandboxes_left`` are the ids of the pool's sandboxes its cleanup could not delete
    (it was bounded, or stopped by a second Ctrl-C)."""

    def __init__(self, sandboxes_left: list[str]) -> None:
        super().__init__()
        self.sandboxes_left = sandboxes_left


@dataclass(frozen=True)
class GRPOJobOptions:
    settings: GRPOSettings = field(default_factory=GRPOSettings)
    pool_size: int = 8
    timeout: float = 1.0
    faults: Any = None  # profile name, plan file or mapping; embedded emulator only
    fresh_context: bool = True
    api_url: str | None = None  # a real Daytona; None: the embedded emulator
    api_key: str | None = None


@dataclass
class GRPOJobResult:
    options: GRPOJobOptions
    outcome: GRPOOutcome
    recorder: RecordingReward
    pool: PoolStats
    wall_s: float
    train_s: float
    #: The emulator's report of the sandboxes left; against a real Daytona, those the pool could not delete.
    sandboxes_left: list[str] | None = None
    runs_per_program: Counter[str] | None = None  # embedded emulator only: from its journal
    expected_runs: Counter[str] = field(default_factory=Counter)
    faults_injected: dict[str, int] = field(default_factory=dict)
    #: Why the last sandbox creation failed ("" when none did).
    create_error: str = ""
    #: The pool's ``pool=<id>`` label: random against a real Daytona, from the seed on the embedded emulator.
    pool_id: str = ""

    @property
    def completions(self) -> int:
        return sum(len(call.rewards) for call in self.recorder.calls)

    @property
    def mean_reward(self) -> float:
        rewards = [r for call in self.recorder.calls for r in call.rewards]
        return fmean(rewards) if rewards else float("nan")

    @property
    def each_ran_once(self) -> bool | None:
        """Whether the journal shows each completion that passed the pre-check run exactly once (None: not known)."""
        return None if self.runs_per_program is None else self.runs_per_program == self.expected_runs

    @property
    def never_ran(self) -> int:
        """Completions the journal shows no run for (the pool gave up on them after every try failed)."""
        return 0 if self.runs_per_program is None else (self.expected_runs - self.runs_per_program).total()

    @property
    def ran_again(self) -> int:
        """Runs beyond one per completion: a completion scored twice (0 unless something is wrong)."""
        return 0 if self.runs_per_program is None else (self.runs_per_program - self.expected_runs).total()

    @property
    def pool_problem(self) -> str | None:
        """Why the pool fell short of its size up front (some sandboxes could not be created), or None."""
        missing = self.pool.not_created
        if not missing:
            return None
        size = self.options.pool_size
        reason = f" (last error: {self.create_error})" if self.create_error else ""
        return f"only {size - missing} of the pool's {size} sandboxes could be created{reason}"

    @property
    def ok(self) -> bool:
        """The whole pool was created, no completion ran twice, each one that never ran is one the pool gave up on,
        and no sandbox is left."""
        accounted = self.runs_per_program is None or self.never_ran == self.pool.gave_up
        return self.pool_problem is None and self.ran_again == 0 and accounted and not self.sandboxes_left


def expected_runs(recorder: RecordingReward) -> Counter[str]:
    """The programs the sandboxes should have run, once per completion that passed the pre-check (by digest)."""
    from emulator.daytona import code_digest

    runs: Counter[str] = Counter()
    for call in recorder.calls:
        for text, task_name in zip(call.completions, call.tasks, strict=True):
            task, code = get_task(task_name), extract_code(text)
            if precheck(task, code):
                runs[code_digest(build_program(task, code))] += 1
    return runs


def _progress_callback(progress: StepProgress, steps: int) -> Any:
    from transformers import TrainerCallback

    class StepLines(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                progress(state.global_step, steps, logs)

    return StepLines()


def _train(
    options: GRPOJobOptions, config: Any, progress: StepProgress | None, pool_id: str | None = None
) -> tuple[GRPOOutcome, RecordingReward, DaytonaPool, float]:
    pool = DaytonaPool(options.pool_size, config, fresh_context=options.fresh_context, pool_id=pool_id)
    callbacks = [] if progress is None else [_progress_callback(progress, options.settings.steps)]
    reward = SandboxReward(pool, timeout=options.timeout)
    try:
        with reward:
            recorder = RecordingReward(reward)
            started = time.monotonic()
            outcome = train_grpo(recorder, options.settings, callbacks=callbacks)
            train_s = time.monotonic() - started
    except PoolExhaustedError as exc:
        raise GRPOJobError(f"the sandbox pool: {exc}") from None
    except KeyboardInterrupt as exc:  # the cleanup has run by now: say what it could not delete
        raise TrainingInterrupted(reward.leaked) from exc
    return outcome, recorder, pool, train_s


#: The largest pool the job makes (Daytona's own tiers allow far fewer running sandboxes).
MAX_POOL = 1024


def embedded_emulator(faults: Any = None) -> Any:
    """The emulator the job runs on when no ``--api-url`` is given, under the fault plan ``faults``.

    Its Daytona applies none of the tier throttlers a served emulator applies by default (Tier 1: 300 sandbox
    creations a minute): the job's pool is created all at once, and a pool of more than 300 would otherwise fall
    short for a limit the user never asked for. A plan with limits (e.g. the ``daytona-tier1`` profile) still
    applies them.
    """
    from emulator.app import Emulator, EmulatorConfig
    from emulator.daytona import DaytonaConfig as EmulatedDaytona
    from emulator.faults import load_plan

    try:
        plan = load_plan(faults)
    except (ValueError, OSError) as exc:  # FaultPlanError is a ValueError
        raise GRPOJobError(f"fault plan {faults!r}: {exc}") from None
    return Emulator(EmulatorConfig(daytona=EmulatedDaytona(throttlers=())), faults=plan)


def run_grpo_job(options: GRPOJobOptions, progress: StepProgress | None = None) -> GRPOJobResult:
    """Run the job; see :class:`GRPOJobOptions`. Raises :class:`GRPOJobError` for bad options."""
    settings = options.settings
    if not settings.tasks:
        raise GRPOJobError("no task given: name at least one (e.g. --tasks sort_numbers)")
    for name in settings.tasks:
        try:
            get_task(name)
        except ValueError as exc:
            raise GRPOJobError(str(exc)) from None
        if name not in TRAINABLE_TASKS:
            raise GRPOJobError(
                f"task {name!r} cannot be trained here: the tiny policy writes programs for"
                f" {', '.join(TRAINABLE_TASKS)} only"
            )
    if min(options.pool_size, settings.steps, settings.prompts_per_step) < 1 or settings.generations < 2:
        raise GRPOJobError("the pool size, steps and prompts per step must be at least 1, and generations at least 2")
    for what, value, most in (
        ("steps", settings.steps, MAX_STEPS),
        ("prompts per step", settings.prompts_per_step, MAX_PROMPTS_PER_STEP),
        ("generations", settings.generations, MAX_GENERATIONS),
        (
            "completions a step (prompts per step x generations)",
            settings.prompts_per_step * settings.generations,
            MAX_COMPLETIONS_PER_STEP,
        ),
        ("steps x prompts per step", settings.steps * settings.prompts_per_step, MAX_DATASET_ROWS),
    ):
        if value > most:
            raise GRPOJobError(f"the {what} must be at most {most:,}, got {value:,}")
    if options.pool_size > MAX_POOL:  # each is a sandbox with its own interpreter process: a typo, not a pool
        raise GRPOJobError(f"the pool size must be at most {MAX_POOL}, got {options.pool_size}")
    if not (math.isfinite(options.timeout) and 0 < options.timeout <= MAX_TIMEOUT_S):
        raise GRPOJobError(
            f"the timeout must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, got {options.timeout}"
        )
    if options.timeout != int(options.timeout):  # Daytona's run_code would round it: a 0.5 s limit let 0.75 s pass
        raise GRPOJobError(
            f"the timeout must be whole seconds (Daytona's run_code takes no fraction), got {options.timeout}"
        )
    if not 0 <= settings.seed <= MAX_SEED:
        raise GRPOJobError(f"the seed must be between 0 and 2**32 - 1 ({MAX_SEED}), got {settings.seed}")
    from daytona import DaytonaConfig

    started = time.monotonic()
    if options.api_key is not None and options.api_url is None:
        raise GRPOJobError("--api-key goes with --api-url (the embedded emulator has its own key)")
    if options.api_url is not None:
        if options.faults is not None:
            raise GRPOJobError("fault plans apply to the embedded emulator only, not to --api-url")
        problem = url_problem(options.api_url)
        if problem is not None:
            raise GRPOJobError(f"--api-url: {problem}")
        api_key = options.api_key or os.environ.get("DAYTONA_API_KEY")
        if not api_key:
            raise GRPOJobError("--api-url needs an API key: pass --api-key or set DAYTONA_API_KEY")
        config = DaytonaConfig(api_url=options.api_url, api_key=api_key)
        outcome, recorder, pool, train_s = _train(options, config, progress)
        return _result(options, outcome, recorder, pool, train_s, started, sandboxes_left=pool.leaked)

    from emulator.daytona import interpreter_runs
    from emulator.server import EmulatorServer, quiet_reset_log

    emulator = embedded_emulator(options.faults)
    server = EmulatorServer(emulator)  # (uvicorn sets its loggers' levels here, so quiet them after)
    with quiet_reset_log(), server:
        config = DaytonaConfig(api_url=server.url + "/api", api_key=emulator.config.daytona.api_key)
        # The emulator is this job's alone, so the pool's label may be fixed: the plan then replays the same faults
        # on the same creations for the same seed (a random label would change every creation's request body).
        outcome, recorder, pool, train_s = _train(options, config, progress, pool_id=f"grpo-seed-{settings.seed}")
    entries = emulator.journal.entries()
    faults: Counter[str] = Counter(e.fault for e in entries if e.fault is not None)
    return _result(
        options,
        outcome,
        recorder,
        pool,
        train_s,
        started,
        sandboxes_left=[s.id for s in emulator.daytona_report().leaked],
        runs_per_program=interpreter_runs(entries),
        expected_runs=expected_runs(recorder),
        faults_injected=dict(faults),
    )


def _result(
    options: GRPOJobOptions,
    outcome: GRPOOutcome,
    recorder: RecordingReward,
    pool: DaytonaPool,
    train_s: float,
    started: float,
    **emulator_figures: Any,
) -> GRPOJobResult:
    """The job's figures from its training, against a real Daytona or (with ``emulator_figures``) the emulator."""
    return GRPOJobResult(
        options,
        outcome,
        recorder,
        pool.stats,
        time.monotonic() - started,
        train_s,
        create_error=pool.last_create_error,
        pool_id=pool.pool_id,
        **emulator_figures,
    )
