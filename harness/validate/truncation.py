"""Does a tool-response body equal an observation, or one of verl's truncations of it?

``ToolAgentLoop`` shortens a tool's text longer than ``max_tool_response_length`` (L) in one of three shapes,
selected by ``tool_response_truncate_side`` (verl 0.7.1 and 0.9.1 swap the names ``left``/``right`` but not the
shapes)::

    head:   text[:L] + "...(truncated)"
    tail:   "(truncated)..." + text[-L:]
    middle: text[:L // 2] + "...(truncated)..." + text[-(L // 2):]

L is not in the dump, so every L below ``len(text)`` is accepted. Python slicing quirks are kept: with L == 0 the
tail and, with L // 2 == 0, the middle shape keep the whole text (``text[-0:]`` is all of it).
"""

from __future__ import annotations

HEAD_MARK = "...(truncated)"
TAIL_MARK = "(truncated)..."
MIDDLE_MARK = "...(truncated)..."


def truncation_form(body: str, observation: str) -> str | None:
    """``"exact"``, ``"head"``, ``"tail"`` or ``"middle"`` when ``body`` is ``observation`` as verl could have shown
    it; None when it cannot be."""
    if body == observation:
        return "exact"
    if not observation:
        return None  # verl truncates only a non-empty text
    size = len(observation)
    if body.endswith(HEAD_MARK):
        head = body[: -len(HEAD_MARK)]
        if len(head) < size and observation.startswith(head):
            return "head"
    if body.startswith(TAIL_MARK):
        tail = body[len(TAIL_MARK) :]
        # L == len(tail) < size, or L == 0 (text[-0:] is the whole text)
        if (len(tail) < size and observation.endswith(tail)) or tail == observation:
            return "tail"
    if body.startswith(MIDDLE_MARK) and body[len(MIDDLE_MARK) :] == observation:
        return "middle"  # L // 2 == 0 with L in {0, 1} < size
    extra = len(body) - len(MIDDLE_MARK)
    if extra >= 2 and extra % 2 == 0:
        half = extra // 2
        # L in {2 * half, 2 * half + 1} must be below size; the smallest is 2 * half
        if 2 * half < size and body == observation[:half] + MIDDLE_MARK + observation[-half:]:
            return "middle"
    return None


def truncate(observation: str, length: int, form: str) -> str:
    """verl's truncation of ``observation`` to ``length`` in shape ``form`` (``head``/``tail``/``middle``); the text
    unchanged when it is not longer than ``length`` or empty. For tests and for readers of this module."""
    if not observation or len(observation) <= length:
        return observation
    if form == "head":
        return observation[:length] + HEAD_MARK
    if form == "tail":
        return TAIL_MARK + observation[-length:]
    if form == "middle":
        half = length // 2
        return observation[:half] + MIDDLE_MARK + observation[-half:]
    raise ValueError(f"unknown truncation form {form!r}; expected head, tail or middle")
