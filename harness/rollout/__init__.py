"""Drive verl's real agent loop on CPU: a tiny local tokenizer, a scripted model server, config and run helpers.

Importing this package imports verl (the ``[verl]`` extra)."""

from harness.rollout.loop import (
    CODE_INTERPRETER_SCHEMA,
    SANDBOX_FUSION_TOOL_CLASS,
    Segment,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
    load_tools,
    mask_segments,
    observations,
    run_trajectory,
    sandbox_fusion_tool_entry,
    write_tool_config,
)
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
