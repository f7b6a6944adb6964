"""The reference run: verl 0.7.1's own ``SandboxFusionTool`` and ``TokenBucketWorker`` against the emulator.

These modules only make sense with verl 0.7.1 installed (``make test-verl071`` builds ``.venv-071`` for them); verl
0.8.0+ no longer ships ``verl.tools.sandbox_fusion_tools``. Under any other verl (the default run, verl 0.9.1) the
directory is not collected at all, so nothing is reported as skipped; ``make unit`` also passes
``--ignore=tests/reference_v071``. The reverse cannot hide a failure: ``make test-verl071`` runs only this directory,
and a run that collects nothing exits non-zero (pytest's exit code 5).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.rollout.schemas import CODE_INTERPRETER_SCHEMA

REFERENCE_VERL = "0.7.1"


def _installed_verl() -> str | None:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


if _installed_verl() != REFERENCE_VERL:
    collect_ignore_glob = ["test_*.py"]

#: verl 0.7.1's cluster-wide limiter: ``TokenBucketWorker.options(name="rate-limiter", get_if_exists=True)``.
LIMITER_ACTOR = "rate-limiter"
TOOL_CLASS = "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
#: verl 0.7.1's example schema (the project's tools use the same one).
SCHEMA = CODE_INTERPRETER_SCHEMA


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One private Ray cluster for the whole session (``address="local"`` never attaches to a neighbour's)."""
    import ray

    namespace = f"verl071-reference-{uuid.uuid4().hex[:6]}"
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=namespace, log_to_driver=False)
    try:
        yield namespace
    finally:
        ray.shutdown()


def kill_limiter() -> None:
    """Kill verl's named "rate-limiter" actor, if any, so the next tool creates it afresh with its own limit."""
    import ray

    try:
        actor = ray.get_actor(LIMITER_ACTOR)
    except ValueError:
        return
    ray.kill(actor)
    for _ in range(100):  # the name is freed asynchronously
        try:
            ray.get_actor(LIMITER_ACTOR)
        except ValueError:
            return
        import time

        time.sleep(0.05)


@pytest.fixture
def make_tools(ray_cluster: str, tmp_path: Path, sandbox_fusion_url: str) -> Iterator[Callable[..., list[Any]]]:
    """``make_tools(config, ...)``: verl 0.7.1 tools built by its own ``initialize_tools_from_config`` from a YAML
    file (one entry per config) whose ``sandbox_fusion_url`` is this test's emulator. Each test starts without a
    "rate-limiter" actor; the tools' execution-pool actors are killed afterwards."""
    import ray
    from verl.tools.utils.tool_registry import initialize_tools_from_config

    kill_limiter()
    made: list[Any] = []

    def make(*configs: dict[str, Any]) -> list[Any]:
        entries = []
        for config in configs:
            full = {"type": "native", "sandbox_fusion_url": sandbox_fusion_url, "num_workers": 10, **config}
            entries.append({"class_name": TOOL_CLASS, "config": full, "tool_schema": SCHEMA})
        path = tmp_path / f"tools-{len(made)}.yaml"
        path.write_text(yaml.safe_dump({"tools": entries}))
        tools = list(initialize_tools_from_config(str(path)))
        made.extend(tools)
        return tools

    yield make
    for tool in made:
        ray.kill(tool.execution_pool)
    kill_limiter()


@pytest.fixture
def fresh_limiter(ray_cluster: str) -> Iterator[dict[str, str]]:
    """No "rate-limiter" actor before or after the test; gives the session cluster's ``address`` and ``namespace``
    (for driver processes attached to it)."""
    import ray

    kill_limiter()
    yield {"address": ray.get_runtime_context().gcs_address, "namespace": ray_cluster}
    kill_limiter()


@pytest.fixture
def make_loop(ray_cluster: str, tmp_path: Path, sandbox_fusion_url: str) -> Iterator[Callable[..., Any]]:
    """``make_loop(server, tokenizer, tool_config={...}, **rollout)``: 0.7.1's ``ToolAgentLoop`` constructed as its
    ``AgentLoopWorker`` constructs one, with a tool YAML naming 0.7.1's ``SandboxFusionTool`` at this test's
    emulator. Call it inside the event loop that runs the trajectories (verl binds the running loop)."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    kill_limiter()
    built: list[Any] = []

    def make(
        server: Any,
        tokenizer: Any,
        *,
        tool_config: dict[str, Any] | None = None,
        prompt_length: int = 1024,
        response_length: int = 1024,
        max_assistant_turns: int | None = None,
    ) -> Any:
        config = {"type": "native", "sandbox_fusion_url": sandbox_fusion_url, "num_workers": 10, "rate_limit": 10}
        config.update(tool_config or {})
        path = tmp_path / f"tools-{len(built)}.yaml"
        path.write_text(
            yaml.safe_dump({"tools": [{"class_name": TOOL_CLASS, "config": config, "tool_schema": SCHEMA}]})
        )
        trainer = OmegaConf.create(
            {
                "actor_rollout_ref": {
                    "rollout": {
                        "prompt_length": prompt_length,
                        "response_length": response_length,
                        "multi_turn": {
                            "enable": True,
                            "max_assistant_turns": max_assistant_turns,
                            "max_user_turns": None,
                            "max_parallel_calls": 1,
                            "max_tool_response_length": 256,
                            "tool_response_truncate_side": "middle",
                            "tool_config_path": str(path),
                            "interaction_config_path": None,
                            "format": "hermes",
                        },
                        "agent": {"default_agent_loop": "tool_agent"},
                    },
                    "model": {},
                },
                "data": {"apply_chat_template_kwargs": {}},
            }
        )
        loop = ToolAgentLoop(
            trainer_config=DictConfigWrap(trainer),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(trainer.data),
        )
        built.append(loop)
        return loop

    yield make
    import ray

    for loop in built:
        for tool in loop.tools.values():
            ray.kill(tool.execution_pool)
    kill_limiter()
