"""The tool config the e2e scripts write loads through verl 0.9.1's ``initialize_tools_from_config`` and reaches the
emulator it names: one real call through the loaded tool, on each backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.tools.tool_registry import initialize_tools_from_config

from emulator.server import EmulatorServer
from harness.tools.daytona import DaytonaTool
from harness.tools.sandbox_fusion import SandboxFusionTool

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL_CLASSES: dict[str, type[Any]] = {"sandbox_fusion": SandboxFusionTool, "daytona": DaytonaTool}
#: The keys a script sets in the project's tool config fixture; everything else is the fixture's.
ENDPOINT_KEYS = {"sandbox_fusion": {"sandbox_fusion_url"}, "daytona": {"api_url", "api_key"}}


async def _call_once(tool: Any) -> str:
    instance_id, _ = await tool.create(create_kwargs={"ground_truth": "42"})
    try:
        response, _, _ = await tool.execute(instance_id, {"code": "print(6 * 7)"})
    finally:
        await tool.release(instance_id)
        await tool.aclose()
    text: str = response.text or ""
    return text


def test_written_tool_config_loads_through_verl_and_reaches_the_emulator(
    backend: str,
    script: Path,
    run_script: Callable[..., Any],
    sandbox_emulator: EmulatorServer,
    tmp_path: Path,
) -> None:
    out = tmp_path / "written" / "tool_config.yaml"
    key = sandbox_emulator.emulator.config.daytona.api_key
    result = run_script(
        script,
        "--write-tool-config",
        str(out),
        env={"E2E_EMULATOR_URL": sandbox_emulator.url, "E2E_DAYTONA_API_KEY": key},
    )
    assert result.returncode == 0, result.stderr

    written = yaml.safe_load(out.read_text())
    fixture = yaml.safe_load((REPO_ROOT / "fixtures" / "tools" / f"{backend}_tool_config.yaml").read_text())
    [written_tool], [fixture_tool] = written["tools"], fixture["tools"]
    changed = {name for name, value in written_tool["config"].items() if fixture_tool["config"].get(name) != value}
    assert changed <= ENDPOINT_KEYS[backend]  # the Daytona key may equal the fixture's (the emulator's default)
    assert changed & {"sandbox_fusion_url", "api_url"}  # the emulator's port is never the fixture's 8080
    assert set(written_tool["config"]) == set(fixture_tool["config"])
    assert {**written_tool, "config": None} == {**fixture_tool, "config": None}

    [tool] = initialize_tools_from_config(str(out))
    assert isinstance(tool, TOOL_CLASSES[backend])
    assert tool.name == "code_interpreter"
    if backend == "sandbox_fusion":
        assert tool.url == sandbox_emulator.run_code_url
    else:
        assert (tool.api_url, tool.api_key) == (sandbox_emulator.url + "/api", key)

    before = len(sandbox_emulator.emulator.journal.entries())
    assert "42" in asyncio.run(_call_once(tool))
    assert len(sandbox_emulator.emulator.journal.entries()) > before
