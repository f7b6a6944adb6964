"""Plan item "tool registration": the Sandbox Fusion tool loads from YAML through verl 0.9.1's own registry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools

from harness.rollout import (
    CODE_INTERPRETER_SCHEMA,
    ScriptedServerManager,
    agent_loop_config,
    build_tool_agent_loop,
    close_tools,
)
from harness.tools.sandbox_fusion import SandboxFusionTool

#: verl 0.7.1's example ``sandbox_fusion_tool_config.yaml``, only ``class_name`` changed (and the URL).
V071_YAML = """
tools:
  - class_name: "harness.tools.sandbox_fusion.SandboxFusionTool"
    config:
      sandbox_fusion_url: "{url}"
      num_workers: 10
      enable_global_rate_limit: true
      rate_limit: 10
      default_timeout: 30
      default_language: "python"
      memory_limit_mb: 1024
      type: native
    tool_schema:
      type: "function"
      function:
        name: "code_interpreter"
        description: "A tool for executing code."
        parameters:
          type: "object"
          properties:
            code:
              type: "string"
              description: "The code to execute."
          required: ["code"]
"""

#: verl 0.6.1's test resource ``tool_configs/sandbox_fusion_tool_config``: URL and type only, no schema.
V061_TEST_RESOURCE_YAML = """
tools:
  - class_name: "harness.tools.sandbox_fusion.SandboxFusionTool"
    config:
      sandbox_fusion_url: "{url}"
      type: native
"""


def test_tools_registration(tool_yaml: Callable[..., Path], sandbox_fusion_url: str, tiny_tokenizer: Any) -> None:
    """The project's example YAML: one tool, the right class, name, schema and config."""
    path = tool_yaml(rate_limit=3, num_workers=5)
    tools = initialize_tools_from_config(str(path))
    assert len(tools) == 1
    [tool] = tools
    assert isinstance(tool, SandboxFusionTool)
    assert tool.name == "code_interpreter"
    assert tool.tool_schema == OpenAIFunctionToolSchema.model_validate(CODE_INTERPRETER_SCHEMA)
    assert tool.url == sandbox_fusion_url
    assert (tool.rate_limit, tool.num_workers, tool.enable_global_rate_limit) == (3, 5, True)
    assert tool.retry.max_attempts == 4

    # verl's AgentLoopWorker path: load_all_tools, then the loop's view of the tools (what it puts in the prompt).
    [same] = load_all_tools(str(path), None)
    assert isinstance(same, SandboxFusionTool)

    async def loop_view() -> tuple[list[str], list[dict[str, object]], str]:
        config = agent_loop_config()
        loop = build_tool_agent_loop(config, ScriptedServerManager(tiny_tokenizer, []), tiny_tokenizer, [tool])
        await close_tools([tool])
        return list(loop.tools), loop.tool_schemas, type(loop.tool_parser).__name__

    names, schemas, parser = asyncio.run(loop_view())
    assert names == ["code_interpreter"]
    assert schemas == [CODE_INTERPRETER_SCHEMA]
    assert parser == "HermesToolParser"


def test_tools_registration_v071_yaml_keys(tmp_path: Path, sandbox_fusion_url: str) -> None:
    """verl 0.7.1's YAML, unchanged but for ``class_name``, loads and every 0.7.1 key takes effect."""
    path = tmp_path / "sandbox_fusion_tool_config.yaml"
    path.write_text(V071_YAML.format(url=sandbox_fusion_url))
    [tool] = initialize_tools_from_config(str(path))
    assert isinstance(tool, SandboxFusionTool)
    assert tool.name == "code_interpreter"
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == CODE_INTERPRETER_SCHEMA
    assert tool.url == sandbox_fusion_url
    assert tool.num_workers == 10
    assert tool.rate_limit == 10
    assert tool.enable_global_rate_limit is True
    assert tool.default_timeout == 30
    assert tool.default_language == "python"
    assert tool.memory_limit_mb == 1024
    assert tool.config["type"] == "native"  # verl passes ``type`` through inside the config


def test_tools_registration_minimal_resource_and_no_global_limit(tmp_path: Path, sandbox_fusion_url: str) -> None:
    """verl 0.6.1's minimal test resource (no schema) gets the default code_interpreter schema; and
    ``enable_global_rate_limit: false`` is accepted (0.7.1 crashed on every call with it)."""
    path = tmp_path / "sandbox_fusion_tool_config"  # no extension, as in verl's test resources
    path.write_text(V061_TEST_RESOURCE_YAML.format(url=sandbox_fusion_url))
    [tool] = initialize_tools_from_config(str(path))
    assert isinstance(tool, SandboxFusionTool)
    assert tool.name == "code_interpreter"
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == CODE_INTERPRETER_SCHEMA
    assert (tool.num_workers, tool.rate_limit, tool.default_language) == (10, 10, "python")

    unlimited = tmp_path / "unlimited.yaml"
    unlimited.write_text(
        V071_YAML.format(url=sandbox_fusion_url).replace(
            "enable_global_rate_limit: true", "enable_global_rate_limit: false"
        )
    )
    [tool] = initialize_tools_from_config(str(unlimited))
    assert tool.enable_global_rate_limit is False


def test_verl_091_has_no_sandbox_fusion_tool() -> None:
    """Why this tool exists: 0.7.1's class path no longer imports on verl 0.8+."""
    with pytest.raises(ModuleNotFoundError):
        __import__("verl.tools.sandbox_fusion_tools")
