"""Fixtures for the GSM8K tests: the bundled problems, the real test split when it is beside the checkout, and tool
YAML files pointed at this test's emulator (the tiny tokenizer comes from the root conftest).

verl is imported lazily so that the data tests run on a checkout without the ``[verl]`` extra."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.gsm8k import BUNDLED_PROBLEMS, Problem, load_problems

ROOT = Path(__file__).resolve().parents[2]
#: The GSM8K test split (1319 problems), read in place from the ``shared`` directory beside the checkout.
GSM8K_TEST_SPLIT = ROOT / ".." / "shared" / "data" / "gsm8k" / "test.jsonl"
EXAMPLE_TOOL_YAML = ROOT / "fixtures/tools/sandbox_fusion_tool_config.yaml"
FAST_RETRY = {"max_attempts": 3, "base_delay": 0.005, "max_delay": 0.02, "max_retry_after": 1}


@pytest.fixture(scope="session")
def bundled() -> list[Problem]:
    return load_problems(BUNDLED_PROBLEMS)


@pytest.fixture(scope="session")
def gsm8k_test_split() -> list[Problem]:
    if not GSM8K_TEST_SPLIT.is_file():
        pytest.skip("the GSM8K test split is not beside this checkout (../shared/data/gsm8k/test.jsonl)")
    return load_problems(GSM8K_TEST_SPLIT)


@pytest.fixture
def tool_yaml(tmp_path: Path, sandbox_fusion_url: str) -> Callable[..., Path]:
    """``tool_yaml(**config)``: the example tool YAML with this test's emulator URL and ``config`` overrides."""
    from harness.rollout import write_tool_config

    def make(name: str = "tools.yaml", **config: Any) -> Path:
        config.setdefault("retry", FAST_RETRY)
        config.setdefault("rate_limiter", {"backend": "local"})
        return write_tool_config(tmp_path / name, base=EXAMPLE_TOOL_YAML, url=sandbox_fusion_url, **config)

    return make
