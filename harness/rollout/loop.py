"""Build and run verl 0.9.1's real ``ToolAgentLoop`` on CPU: config, tools from YAML, one trajectory.

Everything here is verl's own code path except the model: the loop is ``verl.experimental.agent_loop.
tool_agent_loop.ToolAgentLoop`` constructed with the arguments ``AgentLoopWorker`` gives it, tools come from
``verl.tools.tool_registry.initialize_tools_from_config`` reading a YAML file, and the model is a
:class:`~harness.rollout.server.ScriptedServerManager`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.dataset.rl_dataset import RLHFDataset

from harness.rollout.schemas import CODE_INTERPRETER_SCHEMA

#: ``class_name`` of the project's Sandbox Fusion tool in a verl tool YAML.
SANDBOX_FUSION_TOOL_CLASS = "harness.tools.sandbox_fusion.SandboxFusionTool"


def agent_loop_config(
    *,
    prompt_length: int = 1024,
    response_length: int = 1024,
    max_assistant_turns: int | None = None,
    max_user_turns: int | None = None,
    max_parallel_calls: int = 1,
    max_tool_response_length: int = 256,
    tool_response_truncate_side: str = "middle",
    tool_format: str = "hermes",
    tool_config_path: str | None = None,
    full_determinism: bool = False,
    apply_chat_template_kwargs: Mapping[str, Any] | None = None,
) -> DictConfig:
    """The slice of verl's trainer config the tool agent loop reads (defaults as ``rollout.yaml``)."""
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "full_determinism": full_determinism,
                    "multi_turn": {
                        "enable": True,
                        "max_assistant_turns": max_assistant_turns,
                        "max_user_turns": max_user_turns,
                        "max_parallel_calls": max_parallel_calls,
                        "max_tool_response_length": max_tool_response_length,
                        "tool_response_truncate_side": tool_response_truncate_side,
                        "tool_config_path": tool_config_path,
                        "function_tool_path": None,
                        "format": tool_format,
                    },
                    "agent": {"default_agent_loop": "tool_agent"},
                }
            },
            "data": {
                "apply_chat_template_kwargs": dict(apply_chat_template_kwargs or {}),
                "mm_processor_kwargs": {},
            },
        }
    )
    assert isinstance(config, DictConfig)
    return config


def sandbox_fusion_tool_entry(url: str, schema: Mapping[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    """One ``tools:`` entry for the project's Sandbox Fusion tool (verl 0.7.1 keys; ``config`` overrides)."""
    return {
        "class_name": SANDBOX_FUSION_TOOL_CLASS,
        "config": {"type": "native", "sandbox_fusion_url": url, **config},
        "tool_schema": dict(schema or CODE_INTERPRETER_SCHEMA),
    }


def write_tool_config(
    path: str | Path,
    entries: Iterable[Mapping[str, Any]] | None = None,
    *,
    base: str | Path | None = None,
    url: str | None = None,
    **config: Any,
) -> Path:
    """Write a verl tool YAML. Either ``entries`` (``tools:`` items), or ``base`` (an existing tool YAML) whose every
    entry gets ``sandbox_fusion_url=url`` (when given) and the ``config`` overrides."""
    if entries is not None and base is not None:
        raise ValueError("give entries or base, not both")
    if base is not None:
        document = yaml.safe_load(Path(base).read_text())
        tools = document["tools"]
        for entry in tools:
            if url is not None:
                entry["config"]["sandbox_fusion_url"] = url
            entry["config"].update(config)
    elif entries is not None:
        tools = [dict(e) for e in entries]
    else:
        if url is None:
            raise ValueError("give entries, base or url")
        tools = [sandbox_fusion_tool_entry(url, **config)]
    out = Path(path)
    out.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    return out


def load_tools(path: str | Path) -> list[BaseTool]:
    """Tools from a YAML file, through verl's own registry."""
    return list(initialize_tools_from_config(str(path)))


async def close_tools(tools: Iterable[Any]) -> None:
    """Close tools that hold connections (the project's tools have ``aclose``)."""
    for tool in tools:
        closer = getattr(tool, "aclose", None)
        if closer is not None:
            await closer()


def build_tool_agent_loop(
    config: DictConfig,
    server_manager: Any,
    tokenizer: Any,
    tools: Sequence[Any],
    *,
    hf_model_type: str = "qwen2",
) -> ToolAgentLoop:
    """A ``ToolAgentLoop`` built as ``AgentLoopWorker`` builds one (``hf_model_type`` picks the Qwen token builder).

    Construct it inside the event loop that will run it (verl binds the running loop at construction)."""
    return ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server_manager,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type=hf_model_type,
        tools=ToolListWrap(list(tools)),
    )


async def run_trajectory(
    loop: ToolAgentLoop,
    messages: Sequence[Mapping[str, Any]],
    *,
    sampling_params: Mapping[str, Any] | None = None,
    tools_kwargs: Mapping[str, Any] | None = None,
    extra_info: Mapping[str, Any] | None = None,
) -> AgentLoopOutput:
    """One trajectory: ``loop.run`` with a dataset row's fields (``raw_prompt``, ``tools_kwargs``, ``extra_info``)."""
    params = dict(sampling_params or {"temperature": 1.0, "top_p": 1.0, "repetition_penalty": 1.0, "logprobs": False})
    output: AgentLoopOutput = await loop.run(
        params,
        raw_prompt=[dict(m) for m in messages],
        tools_kwargs=dict(tools_kwargs or {}),
        extra_info=dict(extra_info or {}),
    )
    return output
