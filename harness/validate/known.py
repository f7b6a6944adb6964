"""Texts a tool turn can show that are not a program's output, and verl's GSM8K reward, loaded on first use.

The project's own texts come from the module the tools take them from (so a reworded message cannot drift from the
validator), which needs no verl. verl's own texts are not importable constants: they are f-strings inside its agent
loop and tools, reproduced here by their fixed parts. verl's GSM8K reward is loaded on first use: only
``--reward gsm8k`` needs verl.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from harness.tools.observations import INFRA_FAULT_OBSERVATION, NO_STDOUT

#: verl 0.7.1 ``ToolAgentLoop._call_tool``: any exception from a tool's ``execute`` (often a network error).
VERL_071_TOOL_EXCEPTION = "Error when executing tool:"
#: verl 0.9.1 ``ToolAgentLoop._call_tool``: the same path (``Error executing tool '<name>': <exception>``).
VERL_091_TOOL_EXCEPTION = "Error executing tool '"
#: verl 0.9.1's answer to a call of a tool it does not have (the model's doing; the tool never ran).
VERL_UNKNOWN_FUNCTION = "Unknown function '"
#: verl 0.9.1's answer to arguments that are not JSON (the model's doing; the tool never ran).
VERL_INVALID_ARGUMENTS = "Invalid JSON in arguments for '"


class MissingExtra(RuntimeError):
    """The validator needs verl (the ``[verl]`` extra) and it is not installed."""


@dataclass(frozen=True)
class InfraTemplate:
    """An infrastructure-fault observation of the project's tools: ``prefix + reason + suffix``."""

    prefix: str
    suffix: str

    def render(self, reason: str) -> str:
        return self.prefix + reason + self.suffix

    def matches(self, text: str) -> bool:
        return re.fullmatch(re.escape(self.prefix) + r".*" + re.escape(self.suffix), text, re.DOTALL) is not None

    def resembles(self, text: str) -> bool:
        """Shows a recognisable part of the template (also after verl truncated it)."""
        return self.prefix in text or (len(self.suffix) > 8 and self.suffix in text)


@functools.cache
def infra_templates() -> tuple[InfraTemplate, ...]:
    """The infra-fault observations of the project's tools. Both tools show the same text, so today there is one; a
    tool with its own text adds its template here."""
    templates: list[InfraTemplate] = []
    for text in (INFRA_FAULT_OBSERVATION,):
        prefix, marker, suffix = text.partition("{reason}")
        if not marker:
            raise RuntimeError(f"infra-fault observation {text!r} has no {{reason}} field")
        templates.append(InfraTemplate(prefix, suffix))
    return tuple(templates)


@functools.cache
def no_stdout_text() -> str:
    """verl 0.7.1's observation for any run that did not finish, API failures included (the project's tool keeps it
    for timeouts, compile errors and unsupported languages only)."""
    return NO_STDOUT


@functools.cache
def gsm8k_score() -> Callable[[str, str], float]:
    """verl's GSM8K rule reward (strict ``#### <number>`` in the last 300 characters, string equality)."""
    try:
        from verl.utils.reward_score.gsm8k import compute_score
    except ImportError as exc:
        raise MissingExtra(
            f"--reward gsm8k needs verl (install the [verl] extra, or use --reward none): {exc}"
        ) from None

    def score(output: str, ground_truth: str) -> float:
        return float(compute_score(output, ground_truth))  # type: ignore[no-untyped-call]

    return score
