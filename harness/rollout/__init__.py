"""Drive verl's real agent loop on CPU: a tiny local tokenizer, a scripted model server, config and run helpers.

The names below are loaded on first use, so that ``harness.rollout.tokenizer`` and ``harness.rollout.server`` stay
importable under verl 0.7.1 (whose tool registry lives elsewhere); :mod:`harness.rollout.loop` needs verl 0.9.1.
Importing any of them imports verl (the ``[verl]`` extra)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.rollout.loop import (
        SANDBOX_FUSION_TOOL_CLASS,
        agent_loop_config,
        build_tool_agent_loop,
        close_tools,
        load_tools,
        run_trajectory,
        sandbox_fusion_tool_entry,
        write_tool_config,
    )
    from harness.rollout.schemas import CODE_INTERPRETER_SCHEMA
    from harness.rollout.segments import Segment, mask_segments, observations
    from harness.rollout.server import (
        GenerateCall,
        GenerateRequest,
        ScriptBook,
        ScriptedServerManager,
        ScriptExhausted,
        hermes_tool_call,
        sequence,
    )
    from harness.rollout.tokenizer import CHAT_TEMPLATE, build_tiny_tokenizer, save_tiny_tokenizer, tiny_tokenizer

_HOME = {
    "loop": [
        "SANDBOX_FUSION_TOOL_CLASS",
        "agent_loop_config",
        "build_tool_agent_loop",
        "close_tools",
        "load_tools",
        "run_trajectory",
        "sandbox_fusion_tool_entry",
        "write_tool_config",
    ],
    "schemas": ["CODE_INTERPRETER_SCHEMA"],
    "segments": ["Segment", "mask_segments", "observations"],
    "server": [
        "GenerateCall",
        "GenerateRequest",
        "ScriptBook",
        "ScriptExhausted",
        "ScriptedServerManager",
        "hermes_tool_call",
        "sequence",
    ],
    "tokenizer": ["CHAT_TEMPLATE", "build_tiny_tokenizer", "save_tiny_tokenizer", "tiny_tokenizer"],
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}

__all__ = [
    "CHAT_TEMPLATE",
    "CODE_INTERPRETER_SCHEMA",
    "SANDBOX_FUSION_TOOL_CLASS",
    "GenerateCall",
    "GenerateRequest",
    "ScriptBook",
    "ScriptExhausted",
    "ScriptedServerManager",
    "Segment",
    "agent_loop_config",
    "build_tiny_tokenizer",
    "build_tool_agent_loop",
    "close_tools",
    "hermes_tool_call",
    "load_tools",
    "mask_segments",
    "observations",
    "run_trajectory",
    "sandbox_fusion_tool_entry",
    "save_tiny_tokenizer",
    "sequence",
    "tiny_tokenizer",
    "write_tool_config",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
