"""A CPU stand-in for ``python -m verl.trainer.main_ppo``, so CI can run the e2e scripts' orchestration.

The e2e scripts take their trainer command from ``E2E_TRAINER``. This one does what verl's entry point does with the
overrides up to the point where a GPU is needed (compose them onto verl's own ``ppo_trainer`` config, run verl's
``validate_config``), then plays one rollout step with the real tool: the tool config the script wrote is loaded
through verl's ``initialize_tools_from_config``, every prompt of the first batch calls it against the emulator the
script started, and the step is written with verl's own dump writer into ``trainer.rollout_data_dir``.

``E2E_FAKE_TRAINER_FAIL=exit`` makes it fail before dumping, ``=dump`` write a dump no validator accepts, and
``=hang`` wait until it is killed (to check that the script stops what it started).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from verl.tools.tool_registry import initialize_tools_from_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.reward_score import gsm8k


def load_config(overrides: list[str]) -> DictConfig:
    config_dir = Path(verl.__file__).resolve().parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """The prompt as verl's dump shows it: the chat template decoded with the special tokens skipped."""
    turns = "".join(f"{message['role']}\n{message['content']}\n" for message in messages)
    return turns + "assistant\n"


async def play(tool: Any, row: dict[str, Any]) -> tuple[str, str]:
    """One trajectory: a tool call that prints the answer, the observation, and the final answer."""
    ground_truth = str(row["reward_model"]["ground_truth"])
    create_kwargs = row["extra_info"]["tools_kwargs"][tool.name].get("create_kwargs") or {}
    code = f"answer = {ground_truth!r}\nprint(answer)"
    instance_id, _ = await tool.create(create_kwargs=create_kwargs)
    try:
        response, _, _ = await tool.execute(instance_id, {"code": code})
    finally:
        await tool.release(instance_id)
    observation = response.text or ""
    if ground_truth not in observation:
        raise SystemExit(f"fake trainer: the tool answered {observation!r}, expected the output {ground_truth!r}")
    call = json.dumps({"name": tool.name, "arguments": {"code": code}})
    output = (
        f"<tool_call>\n{call}\n</tool_call>\nuser\n<tool_response>\n{observation}\n</tool_response>\n"
        f"assistant\nThe code printed {ground_truth}.\n#### {ground_truth}"
    )
    return output, ground_truth


async def rollout(config: DictConfig) -> dict[str, list[Any]]:
    batch_size = int(config.data.train_batch_size)
    rows = pq.read_table(config.data.train_files).to_pylist()[:batch_size]
    if len(rows) < batch_size:
        raise SystemExit(f"fake trainer: {len(rows)} training rows, fewer than train_batch_size={batch_size}")
    tools = initialize_tools_from_config(config.actor_rollout_ref.rollout.multi_turn.tool_config_path)
    if len(tools) != 1:
        raise SystemExit(f"fake trainer: expected one tool, the config has {len(tools)}")
    [tool] = tools
    try:
        repeated = [row for row in rows for _ in range(int(config.actor_rollout_ref.rollout.n))]
        played = await asyncio.gather(*(play(tool, row) for row in repeated))
    finally:
        closer = getattr(tool, "aclose", None)
        if closer is not None:
            await closer()
    outputs = [output for output, _ in played]
    gts = [ground_truth for _, ground_truth in played]
    scores = [float(gsm8k.compute_score(output, gt)) for output, gt in played]
    return {
        "inputs": [render_prompt(list(row["prompt"])) for row in repeated],
        "outputs": outputs,
        "gts": gts,
        "scores": scores,
    }


def main(argv: list[str]) -> int:
    failure = os.environ.get("E2E_FAKE_TRAINER_FAIL", "")
    if failure == "exit":
        print("fake trainer: failing on request", file=sys.stderr)
        return 3
    if failure == "hang":
        print(f"fake trainer: hanging, pid {os.getpid()}", file=sys.stderr, flush=True)
        threading.Event().wait()  # until a signal ends the process
    config = load_config(argv)
    step = asyncio.run(rollout(config))
    dump_dir = str(config.trainer.rollout_data_dir)
    RayPPOTrainer._write_generations(
        step["inputs"], step["outputs"], step["gts"], step["scores"], {"acc": step["scores"]}, dump_dir, 1
    )
    if failure == "dump":
        with open(os.path.join(dump_dir, "1.jsonl"), "a", encoding="utf-8") as handle:
            handle.write("{this is not json\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
