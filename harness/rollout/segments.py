"""Read a finished trajectory: its response split by ``response_mask``, and the tool observations it carries.

Works on any agent-loop output with ``response_ids`` and ``response_mask`` (verl 0.7.1 and 0.9.1 alike); no verl
import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class TrajectoryOutput(Protocol):
    """What these helpers read of verl's ``AgentLoopOutput``."""

    @property
    def response_ids(self) -> Sequence[int]: ...

    @property
    def response_mask(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class Segment:
    """A run of response tokens with one mask value: 1 = the model's tokens, 0 = observation/template tokens."""

    mask: int
    start: int
    token_ids: list[int]
    text: str


def mask_segments(output: TrajectoryOutput, tokenizer: Any) -> list[Segment]:
    """Split a trajectory's response into runs of equal ``response_mask`` values, each decoded."""
    ids: list[int] = list(output.response_ids)
    mask: list[int] = list(output.response_mask)
    if len(ids) != len(mask):
        raise ValueError(f"response_ids ({len(ids)}) and response_mask ({len(mask)}) differ in length")
    segments: list[Segment] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            chunk = ids[start:i]
            text = str(tokenizer.decode(chunk, skip_special_tokens=False))
            segments.append(Segment(int(mask[start]), start, chunk, text))
            start = i
    return segments


def observations(output: TrajectoryOutput, tokenizer: Any) -> list[str]:
    """The tool results the model was shown, in order (the ``<tool_response>`` bodies of the masked segments)."""
    found: list[str] = []
    for segment in mask_segments(output, tokenizer):
        if segment.mask:
            continue
        rest = segment.text
        while "<tool_response>\n" in rest:
            _, _, rest = rest.partition("<tool_response>\n")
            body, _, rest = rest.partition("\n</tool_response>")
            found.append(body)
    return found
