"""Property tests: the output parser recovers any generated turn sequence as verl would decode it, and every
truncation verl can make of an observation is recognised as one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.validate.parse import _tool_turns, parse_output
from harness.validate.truncation import truncate, truncation_form

# Model text: no tags, no role names (a model writing a whole fake tool turn is indistinguishable after decoding).
MODEL_TEXT = st.text(alphabet="abcdfgh 0123456789#.,\n{}", max_size=30)
# Observations: anything a program prints, except the closing tag on its own line.
BODY = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40).filter(
    lambda s: "\n</tool_response>" not in s and "</tool_response>" not in s
)
ARGUMENTS = st.dictionaries(st.sampled_from(["code", "x", "timeout"]), st.text(max_size=10) | st.integers(), max_size=3)


@dataclass
class Turn:
    text: str
    calls: list[tuple[str, dict[str, object]]]
    bodies: list[str]
    ends_with_eos: bool


@st.composite
def trajectories(draw: st.DrawFn) -> list[Turn]:
    count = draw(st.integers(min_value=1, max_value=5))
    turns = []
    for index in range(count):
        calls = draw(st.lists(st.tuples(st.sampled_from(["code_interpreter", "calc"]), ARGUMENTS), max_size=3))
        last = index == count - 1
        # verl answers at most max_parallel_calls of them, and at least one when it continues
        answered = 0 if last else draw(st.integers(min_value=1, max_value=max(1, len(calls))))
        bodies = draw(st.lists(BODY, min_size=answered, max_size=answered))
        turns.append(Turn(draw(MODEL_TEXT), calls, bodies, draw(st.booleans())))
    return turns


def render(turns: list[Turn]) -> str:
    """What verl's dump holds: model turns, then each tool turn with <|im_start|>/<|im_end|> dropped."""
    out = []
    for index, turn in enumerate(turns):
        blocks = ["<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>" for n, a in turn.calls]
        out.append(turn.text + "\n".join(blocks))
        if index < len(turns) - 1:
            out.append("\n" if turn.ends_with_eos else "")
            out.append("user" + "".join(f"\n<tool_response>\n{b}\n</tool_response>" for b in turn.bodies))
            out.append("\nassistant\n")
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(trajectories())
def test_parser_recovers_turns_calls_and_responses(turns: list[Turn]) -> None:
    # a model turn that ends in a bare "\n" right before a tool turn is ambiguous only in where that newline goes
    parsed = parse_output(render(turns))
    assert len(parsed.turns) == len(turns)
    assert parsed.tool_turns == len(turns) - 1
    for got, want in zip(parsed.turns, turns, strict=True):
        assert [(c.name, c.arguments) for c in got.calls] == want.calls
        assert all(c.error is None and c.parsed_by_verl for c in got.calls)
        assert got.responses == (want.bodies if got.index < len(turns) - 1 else None)
        answered = [c.response for c in got.calls if c.response is not None]
        assert answered == want.bodies[: len(want.calls)]
        assert got.stray_call_tags == 0 and got.stray_response_tags == 0 and not got.unclosed_call_at_end
    assert parsed.responses == [b for t in turns[:-1] for b in t.bodies]


@settings(max_examples=100, deadline=None)
@given(trajectories(), st.integers(min_value=1, max_value=20))
def test_a_cut_last_call_is_seen_as_unclosed(turns: list[Turn], keep: int) -> None:
    cut = "<tool_call>\n" + json.dumps({"name": "code_interpreter", "arguments": {"code": "print(1)"}})[:keep]
    parsed = parse_output(render(turns) + cut)
    assert parsed.turns[-1].unclosed_call_at_end
    assert parsed.turns[-1].stray_call_tags == 0


@settings(max_examples=300, deadline=None)
@given(BODY, st.integers(min_value=0, max_value=60), st.sampled_from(["head", "tail", "middle"]))
def test_every_verl_truncation_is_recognised(observation: str, length: int, form: str) -> None:
    shown = truncate(observation, length, form)
    assert truncation_form(shown, observation) is not None
    if shown != observation and observation:
        assert truncation_form(shown, observation + "\x00") is None or form != "middle" or length // 2 == 0


def test_truncation_examples() -> None:
    text = "0123456789"
    assert truncation_form("01234...(truncated)", text) == "head"
    assert truncation_form("(truncated)...789", text) == "tail"
    assert truncation_form("012...(truncated)...789", text) == "middle"
    assert truncation_form("...(truncated)...0123456789", text) == "middle"  # L // 2 == 0 keeps all of it
    assert truncation_form("012...(truncated)...78", text) is None  # unequal halves
    assert truncation_form("0123456789...(truncated)", text) is None  # nothing was cut
    assert truncation_form("", "") == "exact" and truncation_form("(truncated)...", "") is None


# The tool-turn pattern the parser used to run as a regular expression: its backtracking was exponential in the
# number of response blocks when no ``\nassistant\n`` followed. The linear scan must find what it found.
_TOOL_TURN_PATTERN = re.compile(r"\n?user((?:\n<tool_response>\n.*?\n</tool_response>)+)\nassistant\n", re.DOTALL)
_PIECES = st.sampled_from(
    ["user", "\n", "<tool_response>", "</tool_response>", "assistant", "x", "\nuser\n<tool_response>\n"]
)


@settings(max_examples=400)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_tool_turns_are_what_the_pattern_matched(text: str) -> None:
    expected = [(m.start(), m.group(1), m.end()) for m in _TOOL_TURN_PATTERN.finditer(text)]
    assert _tool_turns(text) == expected


def test_many_unanswered_response_blocks_parse_as_one_model_turn() -> None:
    # 200 blocks and no generation prompt after them: the old pattern would try 2**200 splits.
    text = "call\nuser" + "\n<tool_response>\nx\n</tool_response>" * 200 + "\nnope"
    parsed = parse_output(text)
    assert parsed.tool_turns == 0
    assert parsed.turns[0].stray_response_tags == 400
