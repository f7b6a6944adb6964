"""A scripted, tool-using GSM8K policy: it turns a reference solution into code_interpreter calls and answers with
the number the sandbox printed.

The programs come from the solution's arithmetic (its ``<<expression=result>>`` annotations, and when those do not
reach the ground truth, the prose equation that does); the final ``#### <answer>`` is read from the last tool
observation and never from the reference. A faithful sandbox therefore earns reward 1 wherever the reference's own
arithmetic reaches the ground truth, and any corruption of the computation on the way (a lost, truncated or faked
output) shows up as reward 0.

Variants (1 to 5 tool calls): ``single`` (one program), ``stepwise`` (one call per annotated step, grouped into at
most 5 calls), ``retry`` (a buggy program first; the policy reads the traceback and sends the fixed one).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.gsm8k.data import Problem
from harness.gsm8k.numbers import FORMAT_HELPER, evaluate, format_number, prose_equations, python_candidates

if TYPE_CHECKING:
    from harness.rollout.server import GenerateRequest

VARIANTS: tuple[str, ...] = ("single", "stepwise", "retry")
#: Most tool calls a stepwise trajectory makes (verl's GSM8K configs allow 5 assistant turns).
MAX_CALLS = 5
TOOL_NAME = "code_interpreter"

_BARE_NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b.*$")


@dataclass(frozen=True)
class Step:
    """One tool-calling turn: what the assistant writes before the call, and the program it sends."""

    text: str
    code: str


@dataclass(frozen=True)
class Computation:
    """The Python expressions a problem's programs compute, in order; the last one is the answer.

    ``source`` says where the answer expression came from: ``annotation`` (an annotation reaches the ground
    truth), ``prose`` (a prose equation does), ``unverified`` (nothing does: the last expression is computed
    anyway and the reward will be 0), or ``none`` (no arithmetic found at all)."""

    expressions: tuple[str, ...]
    source: str


@functools.lru_cache(maxsize=4096)
def computation(problem: Problem) -> Computation:
    """What the policy computes for ``problem``.

    Every annotation that is plain arithmetic becomes a step (GSM8K's ``x``, ``$``, ``%`` and commas translated).
    If the last annotation whose value matches the ground truth exists, the steps stop there. Otherwise the last
    prose equation whose value matches is appended as the answer step; failing that, the last step stands as the
    answer (an honest attempt that will score 0)."""
    steps: list[str] = []
    for calculation in problem.calculations:
        python = next(python_candidates(calculation.expression), None)
        if python is not None:
            steps.append(python)
    for position in range(len(steps) - 1, -1, -1):
        if _formats_to(steps[position], problem.ground_truth):
            return Computation(tuple(steps[: position + 1]), "annotation")
    prose = _prose_answer(problem)
    if prose is not None:
        return Computation((*steps, prose), "prose")
    if steps:
        return Computation(tuple(steps), "unverified")
    fallback = [p for e in prose_equations(problem.solution) for p in python_candidates(e)]
    return Computation(tuple(fallback[-1:]), "unverified" if fallback else "none")


def _formats_to(python: str, ground_truth: str) -> bool:
    try:
        return format_number(evaluate(python)) == ground_truth
    except ValueError:
        return False


def _prose_answer(problem: Problem) -> str | None:
    """The last prose equation reaching the ground truth: as written first, then with unit words dropped."""
    for with_units in (False, True):
        for expression in reversed(prose_equations(problem.solution, with_units=with_units)):
            for python in python_candidates(expression):
                if _formats_to(python, problem.ground_truth):
                    return python
    return None


def _program(expressions: Sequence[str], first: int, *, print_each: bool, assign_answer: bool = True) -> str:
    """A self-contained program computing ``expressions`` as ``step_<n>`` (numbered from ``first``)."""
    lines = [FORMAT_HELPER]
    names = []
    for offset, expression in enumerate(expressions):
        name = f"step_{first + offset}"
        names.append(name)
        lines.append(f"{name} = {expression}")
        if print_each:
            lines.append(f"print(fmt({name}))")
    if not print_each:
        if assign_answer:
            lines.append(f"answer = {names[-1]}")
        lines.append("print(fmt(answer))")
    return "\n".join(lines) + "\n"


def _chunks(count: int, parts: int) -> list[range]:
    """``range(count)`` split into ``parts`` contiguous runs, the longer runs first."""
    size, extra = divmod(count, parts)
    runs, start = [], 0
    for index in range(parts):
        stop = start + size + (1 if index < extra else 0)
        runs.append(range(start, stop))
        start = stop
    return runs


NO_ARITHMETIC_PROGRAM = 'print("no calculation found")\n'
RETRY_TEXT = "The program failed with `{error}`: I printed `answer` without assigning it. Here is the fixed program."
RETRY_TEXT_NO_ERROR = "The first run gave no usable output. I'm running the complete program again."


def plan(problem: Problem, variant: str) -> list[Step]:
    """The tool-calling turns of ``variant`` for ``problem`` (1 call for single, 1-5 for stepwise, 2 for retry)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    expressions = computation(problem).expressions
    if not expressions:
        return [Step("I'll look for a calculation to run with the code interpreter.", NO_ARITHMETIC_PROGRAM)]
    if variant == "single":
        return [Step("I'll compute every step with the code interpreter.", _program(expressions, 1, print_each=False))]
    if variant == "retry":
        buggy = _program(expressions, 1, print_each=False, assign_answer=False)
        fixed = _program(expressions, 1, print_each=False)
        return [
            Step("I'll compute every step with the code interpreter.", buggy),
            Step(RETRY_TEXT.format(error="NameError: name 'answer' is not defined"), fixed),
        ]
    runs = _chunks(len(expressions), min(len(expressions), MAX_CALLS))
    steps = []
    for number, run in enumerate(runs, start=1):
        which = f"step {run.start + 1}" if len(run) == 1 else f"steps {run.start + 1} to {run.stop}"
        text = f"Part {number} of {len(runs)}: I'll compute {which} with the code interpreter."
        steps.append(Step(text, _program(expressions[run.start : run.stop], run.start + 1, print_each=True)))
    return steps


def choose_variant(problem: Problem, seed: int = 0) -> str:
    """A deterministic, roughly even mix of the variants over problems (stable across processes and runs)."""
    key = f"{seed}\x00{problem.index}\x00{problem.question}".encode()
    return VARIANTS[int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % len(VARIANTS)]


def answer_from_observation(observation: str) -> str | None:
    """The number on the observation's last non-empty line when that line is a bare number (commas dropped);
    None for anything else (a traceback, ``no stdout here``, an infrastructure-fault message, empty output)."""
    lines = [line.strip() for line in observation.splitlines() if line.strip()]
    if not lines or not _BARE_NUMBER.fullmatch(lines[-1]):
        return None
    return lines[-1].replace(",", "")


def final_turn(problem: Problem, observation: str | None) -> str:
    """The last assistant turn: the answer the observation shows, or, when it shows none, ``#### `` with nothing
    numeric after it (reward 0; the reference answer is never used)."""
    answer = answer_from_observation(observation) if observation is not None else None
    if answer is None:
        return "The code interpreter did not give me a number, so I cannot state a checked answer.\n#### "
    return f"The code interpreter printed {answer}, so the answer is {answer}.\n#### {answer}"


def last_observation(prompt_text: str) -> str | None:
    """The body of the last ``<tool_response>`` in a prompt (what the tool returned for the latest call)."""
    start = prompt_text.rfind("<tool_response>\n")
    if start < 0:
        return None
    body = prompt_text[start + len("<tool_response>\n") :]
    end = body.find("\n</tool_response>")
    return body if end < 0 else body[:end]


def error_line(observation: str) -> str | None:
    """The exception line of a Python traceback in ``observation``, if there is one."""
    for line in reversed(observation.splitlines()):
        if _ERROR_LINE.match(line.strip()):
            return line.strip()
    return None


class ScriptedGSM8KPolicy:
    """Responder for :class:`~harness.rollout.server.ScriptedServerManager` playing :func:`plan` per problem.

    A request id is bound to its problem on its first call by finding the problem's question in the prompt; the
    variant is ``variant`` or :func:`choose_variant`. Each turn ``t`` before the last sends ``plan(...)[t]``; the
    retry variant words its second turn after the first call's observation; the last turn is :func:`final_turn`
    of the latest observation."""

    def __init__(self, problems: Sequence[Problem], *, variant: str | None = None, seed: int = 0) -> None:
        if variant is not None and variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
        if not problems:
            raise ValueError("the policy needs at least one problem")
        self.problems = list(problems)
        self.variant = variant
        self.seed = seed
        self._bound: dict[str, tuple[Problem, str, list[Step]]] = {}

    def __call__(self, request: GenerateRequest) -> str:
        bound = self._bound.get(request.request_id)
        if bound is None:
            problem = self._match(request.request_id, request.prompt_text)
            variant = self.variant or choose_variant(problem, self.seed)
            bound = self._bound[request.request_id] = (problem, variant, plan(problem, variant))
        problem, variant, steps = bound
        turn = request.turn
        if turn < len(steps):
            text = steps[turn].text
            if variant == "retry" and turn == 1:
                text = self._retry_text(last_observation(request.prompt_text))
            return text + "\n" + _tool_call(steps[turn].code)
        if turn == len(steps):
            return final_turn(problem, last_observation(request.prompt_text))
        raise RuntimeError(
            f"request {request.request_id}: problem {problem.index} ({variant}) has {len(steps) + 1} turns; "
            f"turn {turn + 1} was requested"
        )

    @staticmethod
    def _retry_text(observation: str | None) -> str:
        error = error_line(observation or "")
        return RETRY_TEXT.format(error=error) if error else RETRY_TEXT_NO_ERROR

    def _match(self, request_id: str, prompt: str) -> Problem:
        found = [p for p in self.problems if p.question in prompt]
        # A question that is part of a longer matching question is not a separate match.
        found = [p for p in found if not any(p.question != q.question and p.question in q.question for q in found)]
        if len(found) == 1:
            return found[0]
        if not found:
            count = len(self.problems)
            raise LookupError(f"request {request_id}: none of the {count} problems' questions is in the prompt")
        indexes = ", ".join(str(p.index) for p in found)
        raise LookupError(f"request {request_id}: the prompt matches several problems (indexes {indexes})")

    def variant_of(self, request_id: str) -> str:
        """The variant a request plays (KeyError before its first call)."""
        return self._state(request_id)[1]

    def problem_of(self, request_id: str) -> Problem:
        """The problem a request was bound to (KeyError before its first call)."""
        return self._state(request_id)[0]

    def _state(self, request_id: str) -> tuple[Problem, str, list[Step]]:
        try:
            return self._bound[request_id]
        except KeyError:
            raise KeyError(f"request {request_id!r} has not been seen by this policy") from None


def _tool_call(code: str) -> str:
    from harness.rollout.server import hermes_tool_call

    return hermes_tool_call(TOOL_NAME, {"code": code})


def execute_offline(code: str) -> str:
    """Run a program in this process, as a perfect sandbox would: its stdout, then a traceback if it raised."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<program>", "exec"), {"__name__": "__main__"})
    except Exception as exc:
        error = "".join(traceback.format_exception_only(type(exc), exc))
        return out.getvalue() + 'Traceback (most recent call last):\n  File "<program>"\n' + error
    return out.getvalue()


def offline_observations(problem: Problem, variant: str) -> list[str]:
    """The observations each call of ``plan(problem, variant)`` gets from :func:`execute_offline`."""
    return [execute_offline(step.code) for step in plan(problem, variant)]


def run_offline(problem: Problem, variant: str) -> str | None:
    """The answer the policy gives with a perfect sandbox (no sandbox involved): the last observation's number."""
    return answer_from_observation(offline_observations(problem, variant)[-1])


def offline_ceiling(problems: Sequence[Problem], *, variant: str | None = None, seed: int = 0) -> float:
    """Mean of verl's strict GSM8K score of the policy's final turn over ``problems``, observations from
    :func:`execute_offline`: the best reward any sandbox pipeline can give this policy."""
    from verl.utils.reward_score import gsm8k

    score: Callable[..., Any] = gsm8k.compute_score
    if not problems:
        raise ValueError("no problems to score")
    total = 0.0
    for problem in problems:
        chosen = variant or choose_variant(problem, seed)
        text = final_turn(problem, offline_observations(problem, chosen)[-1])
        total += float(score(text, problem.ground_truth))
    return total / len(problems)
