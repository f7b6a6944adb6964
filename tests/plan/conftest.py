"""Shared pieces of the unit plan: tool YAML files pointed at this test's emulator.

verl is imported lazily (inside fixtures) so that a checkout without the ``[verl]`` extra skips these modules
(each does ``pytest.importorskip("verl")``) instead of failing at collection."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The project's example tool YAML (verl 0.7.1 keys plus ``retry``).
EXAMPLE_TOOL_YAML = ROOT / "fixtures/tools/sandbox_fusion_tool_config.yaml"
#: Retries fast enough for tests: 4 tries, a few milliseconds apart.
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.005, "max_delay": 0.02, "max_retry_after": 1}


@pytest.fixture
def tool_yaml(tmp_path: Path, sandbox_fusion_url: str) -> Callable[..., Path]:
    """``tool_yaml(**config)``: the example tool YAML with this test's emulator URL and ``config`` overrides."""
    from harness.rollout import write_tool_config

    def make(name: str = "tools.yaml", **config: Any) -> Path:
        config.setdefault("retry", FAST_RETRY)
        # Pinned to the per-tool-object limiter: the tool's default (auto) would switch to a cluster-wide Ray limiter
        # whenever an earlier test of the session started Ray. The batch case also runs with backend ray.
        config.setdefault("rate_limiter", {"backend": "local"})
        return write_tool_config(tmp_path / name, base=EXAMPLE_TOOL_YAML, url=sandbox_fusion_url, **config)

    return make
