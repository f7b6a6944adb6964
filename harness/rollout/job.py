"""The main job: GSM8K multi-turn rollouts through verl's real ``ToolAgentLoop`` against the embedded emulator.

N trajectories run concurrently (``async``: each at its own pace; ``sync``: batch-synchronous turns, see
:mod:`harness.rollout.lockstep`), the model is the scripted GSM8K policy (or any OpenAI-compatible server), the
``code_interpreter`` tool is the project's Sandbox Fusion or Daytona tool on an in-process emulator with any fault
plan, the score is verl's own GSM8K reward, and the step is dumped as verl's trainer dumps ``rollout_data_dir``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from emulator.app import Emulator
from emulator.faults import (
    DelayTooLongError,
    FaultPlanError,
    FixedLatency,
    LatencySpec,
    LognormalLatency,
    ParetoLatency,
    UniformLatency,
    load_plan,
)
from emulator.faults.plan import parse_latency
from emulator.server import EmulatorServer, quiet_reset_log
from harness.gsm8k.data import BUNDLED_PROBLEMS, Problem, load_problems, prompt_messages
from harness.gsm8k.policy import ScriptedGSM8KPolicy, choose_variant, final_turn, run_offline
from harness.paths import FIXTURES
from harness.rollout.dump import build_entries, decode_sample, step_path, write_step
from harness.rollout.lockstep import TRAJECTORY_INDEX, LockstepServerManager, TurnBarrier
from harness.rollout.recording import CallLog, RecordingTool, ToolCallRecord
from harness.runtime import python_problem
from harness.urls import unreachable, url_problem

TOOL_CONFIGS = {
    "sandbox-fusion": FIXTURES / "tools" / "sandbox_fusion_tool_config.yaml",
    "daytona": FIXTURES / "tools" / "daytona_tool_config.yaml",
}
BACKENDS = tuple(TOOL_CONFIGS)
MODES = ("async", "sync")
DATA_SOURCE = "openai/gsm8k"
RUN_CODE_ROUTE = "sandbox_fusion.run_code"
#: The most seconds a model turn (``--generation-latency``) or a tool call (``--latency``) may be made to wait, as
#: bench's ``--fixed-latency-ms`` caps it: more is a typo (milliseconds for seconds), and the run would seem to hang.
MAX_LATENCY_S = 60.0
#: Trajectories of one run: all run at once, so a typo of a few more zeros would take the machine's memory.
MAX_TRAJECTORIES = 100_000
#: The largest ``--step``: a trainer's step counter is a 64-bit integer, and the dump is named after it.
MAX_STEP = 2**63 - 1


class RolloutError(RuntimeError):
    """A rollout that cannot start (bad option, missing data); the message says what to change."""


@dataclass
class RolloutOptions:
    """What ``sandbox-emulator rollout`` takes; every field has a default that works with nothing else given."""

    data: Path | None = None  # raw GSM8K JSONL or verl parquet; None: the bundled problems
    backend: str = "sandbox-fusion"
    faults: Any = None  # profile name, plan file, or plan mapping; None: calm
    trajectories: int = 64
    out: Path = Path("rollouts")
    step: int = 1
    mode: str = "async"
    variant: str | None = None  # None: a deterministic mix of the policy's variants
    seed: int = 0
    rate_limit: int | None = None  # the tool's in-flight cap; None: the tool config's
    generation_latency: float = 0.0  # seconds per model turn (the scripted policy answers instantly otherwise)
    tool_latency: Any = None  # extra latency model on the execution route (fault-plan syntax), e.g. {"fixed": 0.2}
    llm_url: str | None = None
    llm_model: str = "default"
    prompt_length: int = 2048
    response_length: int = 4096
    max_assistant_turns: int = 8
    max_tool_response_length: int = 256
    python_mode: str | None = None  # the emulator's executor path for Python: "fast" or "faithful"
    retry: Mapping[str, Any] | None = None  # the tool's retry block; None: the tool config's
    virtual_time: bool = False  # run on a virtual clock (harness.chaos.vtime): waits cost no real time

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise RolloutError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.mode not in MODES:
            raise RolloutError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if not 1 <= self.trajectories <= MAX_TRAJECTORIES:
            raise RolloutError(
                f"--trajectories must be between 1 and {MAX_TRAJECTORIES:,} (all run at once), got {self.trajectories}"
            )
        if self.rate_limit is not None and self.rate_limit < 1:
            raise RolloutError(f"--rate-limit must be at least 1, got {self.rate_limit}")
        if not 0 <= self.step <= MAX_STEP:
            got = str(self.step) if len(str(self.step)) <= 30 else f"a number of {len(str(abs(self.step)))} digits"
            raise RolloutError(f"--step must be between 0 and {MAX_STEP} (the trainer's step number), got {got}")
        if not (math.isfinite(self.generation_latency) and 0 <= self.generation_latency <= MAX_LATENCY_S):
            raise RolloutError(
                f"--generation-latency must be between 0 and {MAX_LATENCY_S:g} seconds, got {self.generation_latency}"
            )
        problem = latency_problem(self.tool_latency) if self.tool_latency is not None else None
        if problem is not None:
            raise RolloutError(f"--latency {self.tool_latency!r}: {problem}")
        if self.data is not None:
            try:
                if not Path(self.data).exists():
                    raise RolloutError(f"data file not found: {self.data}")
                if Path(self.data).is_dir():
                    raise RolloutError(f"--data {self.data} is a directory, not a GSM8K .jsonl or .parquet file")
            except OSError as exc:  # a parent that cannot be searched
                raise RolloutError(f"--data {self.data}: cannot look there: {exc.strerror or exc}") from None
        problem = python_problem()
        if problem is not None:
            raise RolloutError(problem)
        _emulator_setup(self)  # the fault plan, loaded now: a bad one costs nothing but this line
        # last: the only check that waits (up to 5 s on a host that drops packets)
        problem = (url_problem(self.llm_url) or unreachable(self.llm_url)) if self.llm_url is not None else None
        if problem is not None:  # one line now, not a failed trajectory per problem and a dump of failures
            raise RolloutError(f"--llm-url: {problem}")


def latency_problem(spec: Any) -> str | None:
    """Why ``spec`` (fault-plan latency syntax, e.g. ``{"fixed": 0.2}``) cannot be the tool's extra latency, or None.

    The emulator's own parser judges the model; its delays (not a Pareto's shape) may not exceed ``MAX_LATENCY_S``.
    """
    try:
        parsed = parse_latency(spec, "latency")
    except DelayTooLongError as exc:  # past even a plan's day: past our bound too
        return f"delays must be at most {MAX_LATENCY_S:g} seconds, got {exc.seconds:g}"
    except FaultPlanError as exc:
        field = ".".join(exc.path.split(".")[2:])  # "latency.pareto.alpha" -> "alpha"
        return f"{field}: {exc.message}" if field else exc.message
    longest = max(_latency_seconds(parsed))
    if longest > MAX_LATENCY_S:
        return f"delays must be at most {MAX_LATENCY_S:g} seconds, got {longest:g}"
    return None


def _latency_seconds(parsed: LatencySpec) -> list[float]:
    """The delays a latency model is given in seconds (a ramp's or a Pareto's other numbers are not delays)."""
    if isinstance(parsed, FixedLatency):
        return [parsed.seconds]
    if isinstance(parsed, UniformLatency):
        return [parsed.low, parsed.high]
    if isinstance(parsed, LognormalLatency):
        return [parsed.p50, parsed.p99]
    if isinstance(parsed, ParetoLatency):
        return [parsed.scale] if parsed.cap is None else [parsed.scale, parsed.cap]
    return [parsed.start_value, parsed.end_value]  # a ramp


@dataclass
class Trajectory:
    """One finished trajectory, with what the dump and the summary need."""

    index: int
    problem: Problem
    variant: str | None
    request_id: str
    input: str
    output: str
    score: float
    num_turns: int
    tool_calls: list[ToolCallRecord]
    offline_score: float | None  # the same policy with a perfect sandbox (None for an LLM policy)
    error: str | None = None  # the loop raised: the trajectory is dumped with score 0 and this message


@dataclass
class RolloutResult:
    """A finished rollout: trajectories, where they were dumped, and the figures of the closing summary."""

    options: RolloutOptions
    trajectories: list[Trajectory]
    dump_path: Path
    wall_s: float  # the whole job: emulator start, tools, rollouts, scoring
    faults_injected: int
    sandbox_requests: int
    retried_requests: int
    max_in_flight: int
    sandboxes_leaked: int | None  # None: the backend has no sandboxes (Sandbox Fusion is stateless)
    barrier_waits: int = 0
    rollout_s: float = 0.0  # first trajectory started to last one finished (virtual seconds with virtual_time)
    emulator: Any = None  # the emulator the rollout ran against (its journal and decision log, for the judges)
    fault_counts: dict[str, int] = field(default_factory=dict)
    replaced: bool = False  # the dump file existed before and was replaced (as verl's trainer replaces it)

    @property
    def tool_calls(self) -> int:
        return sum(len(t.tool_calls) for t in self.trajectories)

    @property
    def infra_faults_shown(self) -> int:
        """Tool calls whose observation was the infrastructure-fault text (the retry budget ran out)."""
        return sum(1 for t in self.trajectories for c in t.tool_calls if c.infra_fault)

    @property
    def mean_reward(self) -> float:
        return sum(t.score for t in self.trajectories) / len(self.trajectories)

    @property
    def offline_mean_reward(self) -> float | None:
        scores = [t.offline_score for t in self.trajectories]
        if any(s is None for s in scores):
            return None
        return sum(s for s in scores if s is not None) / len(scores)

    @property
    def reward_lost(self) -> float | None:
        """Reward the policy would have had with a perfect sandbox and did not get (summed over trajectories)."""
        if self.offline_mean_reward is None:
            return None
        return sum(max(0.0, (t.offline_score or 0.0) - t.score) for t in self.trajectories)

    @property
    def errors(self) -> int:
        return sum(1 for t in self.trajectories if t.error)


class Endpoint(Protocol):
    """Where the emulator listens: an ``EmulatorServer`` (a thread) or an ``InLoopEmulator`` (virtual time)."""

    @property
    def url(self) -> str: ...

    @property
    def run_code_url(self) -> str: ...

    @property
    def emulator(self) -> Emulator: ...


def _write_tool_config(options: RolloutOptions, server: Endpoint, directory: Path) -> Path:
    document = yaml.safe_load(TOOL_CONFIGS[options.backend].read_text())
    for entry in document["tools"]:
        config = entry["config"]
        if options.backend == "sandbox-fusion":
            config["sandbox_fusion_url"] = server.run_code_url
        else:
            config["api_url"] = server.url + "/api"
            config["api_key"] = server.emulator.config.daytona.api_key
        # One tool object per rollout process: its own limiter (no Ray needed to run the job).
        config["rate_limiter"] = {"backend": "local"}
        if options.rate_limit is not None:
            config["rate_limit"] = options.rate_limit
        if options.retry is not None:
            config["retry"] = dict(options.retry)
    path = directory / "tools.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _emulator_setup(options: RolloutOptions) -> tuple[Any, Any]:
    """The emulator's config and fault plan for these options."""
    from emulator.app import EmulatorConfig
    from emulator.executor import ExecutorConfig

    if options.python_mode not in (None, "fast", "faithful"):
        raise RolloutError(f"python_mode must be 'fast' or 'faithful', got {options.python_mode!r}")
    try:
        executor = ExecutorConfig(python_mode="faithful" if options.python_mode == "faithful" else "fast")
    except ValueError as exc:  # the runtime interpreter ($SANDBOX_EMULATOR_PYTHON)
        raise RolloutError(str(exc)) from None
    try:
        plan = load_plan(options.faults)
        if options.tool_latency is not None:
            spec = plan.to_dict()
            route = RUN_CODE_ROUTE if options.backend == "sandbox-fusion" else "daytona.interpreter.execute"
            spec["rules"].append({"id": "tool-latency", "route": route, "latency": options.tool_latency})
            plan = load_plan(spec)
        return EmulatorConfig(executor=executor), plan
    except (ValueError, OSError) as exc:  # FaultPlanError is a ValueError
        raise RolloutError(f"fault plan {options.faults!r}: {exc}") from None


def _score(output: str, ground_truth: str) -> float:
    from verl.utils.reward_score import default_compute_score

    return float(default_compute_score(DATA_SOURCE, output, ground_truth))  # type: ignore[no-untyped-call]


def _offline_score(problem: Problem, variant: str) -> float:
    observation = run_offline(problem, variant)
    return _score(final_turn(problem, observation), problem.ground_truth)


def select_problems(problems: Sequence[Problem], n: int, seed: int) -> list[Problem]:
    """``n`` problems: all of them in a seeded order, cycled when ``n`` exceeds the data (several samples each)."""
    order = list(problems)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(n)]


Progress = Callable[[int, int, int], None]  # (finished trajectories, total, tool calls so far)


async def _run_async(
    options: RolloutOptions, server: Endpoint, problems: list[Problem], progress: Progress | None
) -> tuple[list[Trajectory], int, float]:
    from harness.rollout import ScriptedServerManager, agent_loop_config, build_tool_agent_loop, load_tools
    from harness.rollout.tokenizer import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    log = CallLog()
    with tempfile.TemporaryDirectory(prefix="rollout-tools-") as tmp, contextlib.redirect_stdout(io.StringIO()):
        # (verl's BaseTool prints every tool schema it builds; the job's output is its summary)
        tools = [RecordingTool(t, log) for t in load_tools(_write_tool_config(options, server, Path(tmp)))]
    policy: ScriptedGSM8KPolicy | None = None
    if options.llm_url:
        from harness.rollout.openai_policy import OpenAICompletionsServerManager

        base: Any = OpenAICompletionsServerManager(tokenizer, options.llm_url, model=options.llm_model)
    else:
        unique = list({(p.split, p.index, p.question): p for p in problems}.values())
        policy = ScriptedGSM8KPolicy(unique, variant=options.variant, seed=options.seed)
        base = ScriptedServerManager(
            tokenizer,
            policy,
            prompt_length=options.prompt_length,
            response_length=options.response_length,
            latency=options.generation_latency,
        )
    barrier = TurnBarrier(len(problems)) if options.mode == "sync" else None
    manager = LockstepServerManager(base, barrier)
    config = agent_loop_config(
        prompt_length=options.prompt_length,
        response_length=options.response_length,
        max_assistant_turns=options.max_assistant_turns,
        max_tool_response_length=options.max_tool_response_length,
    )
    loop = build_tool_agent_loop(config, manager, tokenizer, tools)
    finished = 0

    async def one(index: int, problem: Problem) -> Trajectory:
        nonlocal finished
        TRAJECTORY_INDEX.set(index)
        variant = None if options.llm_url else (options.variant or choose_variant(problem, options.seed))
        try:
            output = await loop.run(
                {"temperature": 1.0, "top_p": 1.0, "repetition_penalty": 1.0, "logprobs": False},
                raw_prompt=prompt_messages(problem),
                tools_kwargs={"code_interpreter": {"create_kwargs": {"ground_truth": problem.ground_truth}}},
                extra_info={"index": problem.index, "split": problem.split},
            )
        except Exception as exc:  # a broken trajectory is reported, never lost
            failure = f"{type(exc).__name__}: {exc}"
            started_as = manager.request_of.get(index, "")  # the calls it made before it broke are kept
            calls = log.for_request(started_as) if started_as else []
            return Trajectory(index, problem, variant, started_as, "", "", 0.0, 0, calls, None, failure)
        finally:
            if barrier is not None:
                await barrier.finish(index)
            finished += 1  # failed or not, the trajectory is over
            if progress is not None:
                progress(finished, len(problems), sum(len(v) for v in log.calls.values()))
        request_id = manager.request_of.get(index, "")
        text_in, text_out = decode_sample(tokenizer, output.prompt_ids, output.response_ids)
        calls = log.for_request(request_id)
        offline = _offline_score(problem, variant) if variant is not None else None
        return Trajectory(
            index=index,
            problem=problem,
            variant=variant,
            request_id=request_id,
            input=text_in,
            output=text_out,
            score=_score(text_out, problem.ground_truth),
            num_turns=int(output.num_turns),
            tool_calls=calls,
            offline_score=offline,
        )

    clock = asyncio.get_running_loop()  # virtual seconds on a virtual-time loop
    started = clock.time()
    try:
        trajectories = await asyncio.gather(*(one(i, p) for i, p in enumerate(problems)))
        rollout_s = clock.time() - started
    finally:
        for tool in tools:
            await tool.aclose()
        closer = getattr(base, "aclose", None)
        if closer is not None:
            await closer()
    return list(trajectories), barrier.waits if barrier is not None else 0, rollout_s


def _leaked(emulator: Emulator, backend: str) -> int | None:
    if backend != "daytona":
        return None
    return len(emulator.daytona_report().leaked)


def _run_virtual(
    options: RolloutOptions, config: Any, plan: Any, problems: list[Problem], progress: Progress | None
) -> tuple[Emulator, tuple[list[Trajectory], int, float]]:
    """The rollout on a virtual-time loop with the emulator in the same loop: injected latency, Retry-After waits and
    outage windows cost no real time (program executions still run in real time)."""
    from harness.chaos.inloop import in_loop_emulator
    from harness.chaos.vtime import VirtualTime

    async def main() -> tuple[Emulator, tuple[list[Trajectory], int, float]]:
        async with in_loop_emulator(plan, config=config) as server:
            with quiet_reset_log():
                return server.emulator, await _run_async(options, server, problems, progress)

    virtual = VirtualTime()
    try:
        return virtual.run(main())
    finally:
        virtual.close()


def run_rollout(options: RolloutOptions, progress: Progress | None = None) -> RolloutResult:
    """Run the job: rollouts, scores, the dump ``{out}/{step}.jsonl``; returns the figures for the summary."""
    options.check()
    try:
        problems_all = load_problems(options.data or BUNDLED_PROBLEMS)
    except ValueError as exc:  # DataError is a ValueError
        raise RolloutError(str(exc)) from None
    if not problems_all:
        raise RolloutError(f"no problems in {options.data or BUNDLED_PROBLEMS}")
    problems = select_problems(problems_all, options.trajectories, options.seed)
    config, plan = _emulator_setup(options)
    started = time.monotonic()
    if options.virtual_time:
        emulator, (trajectories, waits, rollout_s) = _run_virtual(options, config, plan, problems, progress)
    else:
        emulator = Emulator(config, faults=plan)
        server = EmulatorServer(emulator)  # (uvicorn sets its loggers' levels here, so quiet them after)
        with quiet_reset_log(), server:
            trajectories, waits, rollout_s = asyncio.run(_run_async(options, server, problems, progress))
    wall = time.monotonic() - started
    trajectories.sort(key=lambda t: t.index)
    entries = build_entries(
        [t.input for t in trajectories],
        [t.output for t in trajectories],
        [t.problem.ground_truth for t in trajectories],
        [t.score for t in trajectories],
        options.step,
        {
            # verl 0.9.1's reward loop gives a float score's value again as ``acc``, and its dump writes it
            "acc": [t.score for t in trajectories],
            "request_id": [t.request_id for t in trajectories],
            "num_turns": [t.num_turns for t in trajectories],
            "tool_calls": [[c.to_dict() for c in t.tool_calls] for t in trajectories],
        },
    )
    for trajectory, row in zip(trajectories, entries, strict=True):
        if trajectory.error is not None:  # verl's trainer would have stopped; the row says why it is empty
            row["error"] = trajectory.error
    replaced = step_path(options.out, options.step).exists()
    try:
        dump_path = write_step(options.out, options.step, entries)
    except OSError as exc:  # the disk filled up, --out went away during the run
        target = step_path(options.out, options.step)
        raise RolloutError(f"cannot write the dump {target}: {exc.strerror or exc}") from None
    journal = emulator.journal.entries()
    faults: dict[str, int] = {}
    for entry in journal:
        if entry.fault:
            faults[entry.fault] = faults.get(entry.fault, 0) + 1
    route = RUN_CODE_ROUTE if options.backend == "sandbox-fusion" else None
    return RolloutResult(
        options=options,
        trajectories=trajectories,
        dump_path=dump_path,
        wall_s=wall,
        faults_injected=sum(faults.values()),
        sandbox_requests=len(journal),
        # From the tools' own counts: the journal's attempt number is per request body, and identical programs of
        # different trajectories (a problem sampled twice) share one.
        retried_requests=sum(max(0, c.attempts - 1) for t in trajectories for c in t.tool_calls),
        max_in_flight=emulator.journal.max_in_flight(route),
        sandboxes_leaked=_leaked(emulator, options.backend),
        barrier_waits=waits,
        rollout_s=rollout_s,
        emulator=emulator,
        fault_counts=faults,
        replaced=replaced,
    )
