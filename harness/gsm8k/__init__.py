"""GSM8K for tool-use rollouts: problems in the release's JSONL and verl's parquet, bundled problems written for
this project, and a scripted policy that solves them through the ``code_interpreter`` tool.

:mod:`harness.gsm8k.data` needs pyarrow only for parquet; :mod:`harness.gsm8k.policy` needs verl only to answer a
scripted server (``hermes_tool_call``) and to score (:func:`~harness.gsm8k.policy.offline_ceiling`)."""

from __future__ import annotations

from harness.gsm8k.data import (
    BUNDLED_PROBLEMS,
    SYSTEM_PROMPT,
    Calculation,
    DataError,
    Problem,
    convert_jsonl_to_parquet,
    extract_ground_truth,
    load_problems,
    parse_calculations,
    prompt_messages,
    register_cli,
    to_verl_row,
    write_verl_parquet,
)
from harness.gsm8k.policy import (
    VARIANTS,
    ScriptedGSM8KPolicy,
    Step,
    answer_from_observation,
    choose_variant,
    final_turn,
    offline_ceiling,
    plan,
    run_offline,
)

__all__ = [
    "BUNDLED_PROBLEMS",
    "SYSTEM_PROMPT",
    "VARIANTS",
    "Calculation",
    "DataError",
    "Problem",
    "ScriptedGSM8KPolicy",
    "Step",
    "answer_from_observation",
    "choose_variant",
    "convert_jsonl_to_parquet",
    "extract_ground_truth",
    "final_turn",
    "load_problems",
    "offline_ceiling",
    "parse_calculations",
    "plan",
    "prompt_messages",
    "register_cli",
    "run_offline",
    "to_verl_row",
    "write_verl_parquet",
]
