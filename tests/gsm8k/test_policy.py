"""The scripted GSM8K policy: plan shapes, turn-by-turn play against fed observations, answers read only from the
observations, and its offline ceiling on the bundled problems."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.utils.reward_score import gsm8k

from harness.gsm8k import (
    VARIANTS,
    Problem,
    ScriptedGSM8KPolicy,
    answer_from_observation,
    choose_variant,
    final_turn,
    offline_ceiling,
    plan,
    prompt_messages,
    run_offline,
)
from harness.gsm8k.policy import RETRY_TEXT_NO_ERROR, computation, execute_offline, last_observation
from harness.rollout import GenerateRequest
from harness.tools.observations import INFRA_FAULT_OBSERVATION

INFRA = INFRA_FAULT_OBSERVATION.format(reason="HTTP 504")


def first_prompt(problem: Problem) -> str:
    """The first prompt as the chat template renders it (what the policy searches for the question)."""
    system, user = prompt_messages(problem)
    return (
        f"<|im_start|>system\n{system['content']}<|im_end|>\n"
        f"<|im_start|>user\n{user['content']}<|im_end|>\n<|im_start|>assistant\n"
    )


def tool_code(reply: str) -> str | None:
    match = re.search(r"<tool_call>\n(.*)\n</tool_call>", reply, re.S)
    if match is None:
        return None
    call = json.loads(match.group(1))
    assert call["name"] == "code_interpreter"
    code: str = call["arguments"]["code"]
    return code


def play(
    policy: ScriptedGSM8KPolicy, problem: Problem, observe: Callable[[str], str], request_id: str = "r1"
) -> tuple[list[str], list[str]]:
    """Drive the policy as the agent loop does; ``observe(code)`` is the tool. Returns (replies, observations)."""
    prompt = first_prompt(problem)
    replies: list[str] = []
    seen: list[str] = []
    for turn in range(10):
        reply = policy(GenerateRequest(request_id, turn, [], {}, None, _text=prompt))
        replies.append(reply)
        code = tool_code(reply)
        if code is None:
            return replies, seen
        observation = observe(code)
        seen.append(observation)
        prompt += (
            f"{reply}<|im_end|>\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    raise AssertionError("the policy never stopped calling tools")


def test_plan_shapes(bundled: list[Problem]) -> None:
    stepwise_calls = Counter()
    for problem in bundled:
        expressions = computation(problem).expressions
        assert len(plan(problem, "single")) == 1
        assert len(plan(problem, "retry")) == 2
        stepwise = plan(problem, "stepwise")
        assert len(stepwise) == min(len(expressions), 5)
        stepwise_calls[len(stepwise)] += 1
        # Stepwise prints every step's value, once, in order.
        printed = sum(step.code.count("print(fmt(") for step in stepwise)
        assert printed == len(expressions)
        for variant in VARIANTS:
            for step in plan(problem, variant):
                assert step.text and step.code.endswith("\n")
                compile(step.code, "<plan>", "exec")
    assert set(stepwise_calls) == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match="unknown variant 'greedy'"):
        plan(bundled[0], "greedy")


def test_retry_variant_fixes_a_real_bug(bundled: list[Problem]) -> None:
    buggy, fixed = plan(bundled[2], "retry")
    observation = execute_offline(buggy.code)
    assert "NameError: name 'answer' is not defined" in observation
    assert answer_from_observation(observation) is None
    assert answer_from_observation(execute_offline(fixed.code)) == bundled[2].ground_truth


@pytest.mark.parametrize("variant", VARIANTS)
def test_policy_plays_every_bundled_problem(bundled: list[Problem], variant: str) -> None:
    policy = ScriptedGSM8KPolicy(bundled, variant=variant)
    for problem in bundled:
        request_id = f"{variant}-{problem.index}"
        replies, seen = play(policy, problem, execute_offline, request_id)
        assert len(replies) == len(plan(problem, variant)) + 1
        assert policy.problem_of(request_id) == problem
        assert policy.variant_of(request_id) == variant
        assert replies[-1].endswith(f"#### {problem.ground_truth}")
        assert gsm8k.compute_score(replies[-1], problem.ground_truth) == 1.0
        if variant == "retry":
            assert "NameError" in seen[0]
            assert "`NameError: name 'answer' is not defined`" in replies[1]


def test_answer_follows_the_observation_not_the_reference(bundled: list[Problem]) -> None:
    problem = bundled[0]  # ground truth 18
    for variant in VARIANTS:
        policy = ScriptedGSM8KPolicy([problem], variant=variant)
        replies, _ = play(policy, problem, lambda code: "17\n")
        assert replies[-1].endswith("#### 17")
        assert gsm8k.compute_score(replies[-1], problem.ground_truth) == 0


@pytest.mark.parametrize("observation", [INFRA, "no stdout here", "", "Traceback ...\nValueError: 3"])
def test_no_number_in_the_observation_gives_no_answer(bundled: list[Problem], observation: str) -> None:
    problem = bundled[0]
    for variant in VARIANTS:
        policy = ScriptedGSM8KPolicy([problem], variant=variant)
        replies, _ = play(policy, problem, lambda code, obs=observation: obs)
        assert replies[-1].endswith("#### ")
        assert problem.ground_truth not in replies[-1]
        assert gsm8k.compute_score(replies[-1], problem.ground_truth) == 0
        if variant == "retry" and "Error" not in observation:
            assert replies[1].startswith(RETRY_TEXT_NO_ERROR)


def test_final_turn_and_answer_parsing(bundled: list[Problem]) -> None:
    assert answer_from_observation("9\n18\n") == "18"
    assert answer_from_observation("  -2.5 \n\n") == "-2.5"
    assert answer_from_observation("40,800\n") == "40800"
    assert answer_from_observation("the answer is 18\n") is None
    assert answer_from_observation("18\nNameError: name 'x' is not defined\n") is None
    assert answer_from_observation(INFRA) is None
    assert final_turn(bundled[0], "18\n").endswith("\n#### 18")
    assert final_turn(bundled[0], None).endswith("#### ")
    assert last_observation("a<tool_response>\n1\n</tool_response>b<tool_response>\n2\n3\n</tool_response>") == "2\n3"
    assert last_observation("no tool yet") is None


def test_binding_errors(bundled: list[Problem]) -> None:
    policy = ScriptedGSM8KPolicy(bundled)
    with pytest.raises(LookupError, match=r"request x: none of the 53 problems' questions is in the prompt"):
        policy(GenerateRequest("x", 0, [], {}, None, _text="<|im_start|>user\nWhat is 2+2?<|im_end|>"))
    twin = replace(bundled[1], index=999)
    policy = ScriptedGSM8KPolicy([bundled[1], twin])
    with pytest.raises(LookupError, match=r"matches several problems \(indexes 1, 999\)"):
        policy(GenerateRequest("y", 0, [], {}, None, _text=first_prompt(bundled[1])))
    # A question that is part of a longer one does not make the longer one ambiguous.
    short = replace(bundled[3], question=bundled[3].question.split(". ")[0], index=500)
    policy = ScriptedGSM8KPolicy([short, bundled[3]], variant="single")
    policy(GenerateRequest("z", 0, [], {}, None, _text=first_prompt(bundled[3])))
    assert policy.problem_of("z") == bundled[3]
    with pytest.raises(KeyError, match="has not been seen"):
        policy.variant_of("unknown")
    with pytest.raises(ValueError, match="unknown variant"):
        ScriptedGSM8KPolicy(bundled, variant="greedy")


def test_too_many_turns(bundled: list[Problem]) -> None:
    policy = ScriptedGSM8KPolicy(bundled, variant="single")
    prompt = first_prompt(bundled[0])
    policy(GenerateRequest("r", 0, [], {}, None, _text=prompt))
    policy(GenerateRequest("r", 1, [], {}, None, _text=prompt))
    with pytest.raises(RuntimeError, match="has 2 turns; turn 3 was requested"):
        policy(GenerateRequest("r", 2, [], {}, None, _text=prompt))


def test_variant_mix_is_deterministic(bundled: list[Problem]) -> None:
    mix = Counter(choose_variant(p) for p in bundled)
    assert set(mix) == set(VARIANTS) and min(mix.values()) >= 10
    assert [choose_variant(p) for p in bundled] == [choose_variant(p, seed=0) for p in bundled]
    assert [choose_variant(p) for p in bundled] != [choose_variant(p, seed=1) for p in bundled]


def test_offline_ceiling_on_bundled_problems(bundled: list[Problem]) -> None:
    for variant in VARIANTS:
        assert offline_ceiling(bundled, variant=variant) == 1.0
        assert all(run_offline(p, variant) == p.ground_truth for p in bundled)
    assert offline_ceiling(bundled) == 1.0
    with pytest.raises(ValueError, match="no problems"):
        offline_ceiling([])


def test_offline_ceiling_counts_failures(bundled: list[Problem]) -> None:
    """A problem whose reference arithmetic does not reach its ground truth scores 0: nothing falls back."""
    wrong = replace(bundled[0], ground_truth="19")
    assert computation(wrong).source == "unverified"
    assert run_offline(wrong, "single") == "18"
    assert offline_ceiling([wrong, bundled[1]], variant="single") == 0.5
