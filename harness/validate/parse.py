"""Split a dumped ``output`` back into the model's turns, its tool calls and the tool turns that answered them.

verl decodes the response with ``skip_special_tokens=True``. With a Qwen-style ChatML template the special
``<|im_start|>``/``<|im_end|>`` disappear while the role names and newlines around them stay, and the added
(non-special) ``<tool_call>``/``<tool_response>`` tags survive. A trajectory therefore reads::

    TURN \\nuser\\n<tool_response>\\nBODY\\n</tool_response>[\\n<tool_response>\\n...]\\nassistant\\n TURN ...

(the first ``\\n`` is the newline verl's Qwen token builder adds after a model turn that ended in ``<|im_end|>``; a
turn stopped otherwise has none). Tool calls inside a model turn are found as verl's Hermes parser finds them: each
non-greedy ``<tool_call>...</tool_call>`` block whose JSON is an object with ``name`` and ``arguments``.

Pure text processing: no verl import, so the parser is cheap to property-test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"

#: A tool turn as it survives decoding: ``[\n]user`` + responses (``\n<tool_response>\nBODY\n</tool_response>``,
#: one or more) + the next generation prompt ``\nassistant\n``. A body may hold any text, so the span of
#: responses is cut into bodies afterwards (``_RESPONSE``); :func:`_tool_turns` finds the spans.
_TURN_HEAD = "user\n<tool_response>\n"
_FIRST_OPEN = len("\n<tool_response>\n")
_TURN_TAIL = "\n</tool_response>\nassistant\n"
_RESPONSE = re.compile(r"\n<tool_response>\n(.*?)\n</tool_response>(?=\n<tool_response>\n|$)", re.DOTALL)
#: verl's Hermes parser: non-greedy blocks, searched in each model turn.
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class ToolCall:
    """One ``<tool_call>`` block of a model turn."""

    turn: int
    index: int  # position among the blocks of its turn
    raw: str  # the text between the tags
    name: str | None = None
    arguments: Any = None
    error: str | None = None  # why the block is not a well-formed call (None when it is)
    parsed_by_verl: bool = False  # verl's Hermes parser turns it into a call (JSON object with name and arguments)
    response: str | None = None  # the body of the tool response that answered it, if any


@dataclass
class ModelTurn:
    """A span the model generated, with its calls and the tool turn that follows it (if any)."""

    index: int
    text: str
    calls: list[ToolCall] = field(default_factory=list)
    responses: list[str] | None = None  # bodies of the following tool turn; None for the last turn
    stray_call_tags: int = 0  # ``<tool_call>``/``</tool_call>`` not part of a complete block
    unclosed_call_at_end: bool = False  # a ``<tool_call>`` opened and never closed at the end of the turn
    stray_response_tags: int = 0  # ``<tool_response>`` tags inside the model's own text


@dataclass
class ParsedOutput:
    """A dumped ``output`` split into model turns (``len(turns) == tool_turns + 1``)."""

    turns: list[ModelTurn]

    @property
    def tool_turns(self) -> int:
        return len(self.turns) - 1

    @property
    def calls(self) -> list[ToolCall]:
        return [call for turn in self.turns for call in turn.calls]

    @property
    def responses(self) -> list[str]:
        return [body for turn in self.turns for body in (turn.responses or [])]


def parse_output(output: str) -> ParsedOutput:
    """Parse a decoded response (see the module docstring for the shape)."""
    texts: list[str] = []
    groups: list[list[str]] = []
    position = 0
    for start, responses, end in _tool_turns(output):
        texts.append(output[position:start])
        groups.append(_RESPONSE.findall(responses))
        position = end
    texts.append(output[position:])
    turns: list[ModelTurn] = []
    for index, text in enumerate(texts):
        turn = ModelTurn(index=index, text=text, responses=groups[index] if index < len(groups) else None)
        _find_calls(turn)
        turn.stray_response_tags = text.count(RESPONSE_OPEN) + text.count(RESPONSE_CLOSE)
        if turn.responses is not None:
            answered = [call for call in turn.calls if call.parsed_by_verl]
            for call, body in zip(answered, turn.responses, strict=False):
                call.response = body
        turns.append(turn)
    return ParsedOutput(turns)


def _tool_turns(output: str) -> list[tuple[int, str, int]]:
    """(start, span of responses, end) of each tool turn, left to right, in linear time.

    What a regular expression ``\\n?user((?:\\n<tool_response>\\n.*?\\n</tool_response>)+)\\nassistant\\n`` would
    match, without its backtracking (exponential in the number of blocks when no ``\\nassistant\\n`` follows): a
    turn ends at the first ``\\n</tool_response>\\nassistant\\n`` after its first opening tag, since a body may
    hold any text, so one block can always span the whole. When no turn end follows a head, none follows a later one.
    """
    found: list[tuple[int, str, int]] = []
    position = 0
    while True:
        head = output.find(_TURN_HEAD, position)
        if head < 0:
            return found
        blocks = head + len("user")
        close = output.find(_TURN_TAIL, blocks + _FIRST_OPEN)
        if close < 0:
            return found
        start = head - 1 if head > position and output[head - 1] == "\n" else head
        end = close + len(_TURN_TAIL)
        found.append((start, output[blocks : close + len("\n</tool_response>")], end))
        position = end


def _find_calls(turn: ModelTurn) -> None:
    text = turn.text
    rest_parts: list[str] = []
    last = 0
    for index, match in enumerate(_CALL_BLOCK.finditer(text)):
        rest_parts.append(text[last : match.start()])
        last = match.end()
        turn.calls.append(_read_call(turn.index, index, match.group(1)))
    tail = text[last:]
    rest = "".join(rest_parts) + tail
    turn.stray_call_tags = rest.count(CALL_OPEN) + rest.count(CALL_CLOSE)
    if CALL_OPEN in tail and CALL_CLOSE not in tail[tail.rindex(CALL_OPEN) :]:
        turn.unclosed_call_at_end = True
        turn.stray_call_tags -= 1  # reported on its own


def _read_call(turn: int, index: int, raw: str) -> ToolCall:
    call = ToolCall(turn=turn, index=index, raw=raw)
    try:
        value = json.loads(raw)
    except ValueError as exc:
        call.error = f"not JSON ({exc})"
        return call
    except RecursionError:  # verl's parser skips the block as well (it catches any exception)
        call.error = "JSON nested too deeply to decode"
        return call
    if not isinstance(value, dict):
        call.error = f"JSON {type(value).__name__}, not an object"
        return call
    missing = [key for key in ("name", "arguments") if key not in value]
    if missing:
        call.error = f"no {' and no '.join(repr(k) for k in missing)} key"
        return call
    call.arguments = value["arguments"]
    if not isinstance(value["name"], str):  # verl's FunctionCall(name=...) refuses it, and the parser skips the block
        call.error = f"'name' is {type(value['name']).__name__}, not a string"
        return call
    call.parsed_by_verl = True
    call.name = value["name"]
    if not isinstance(value["arguments"], dict):  # verl runs it; the tool gets arguments that are not an object
        call.error = f"'arguments' is {type(value['arguments']).__name__}, not an object"
    return call
