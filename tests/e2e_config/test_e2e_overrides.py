"""Every Hydra override the e2e scripts hand to verl's trainer composes against verl 0.9.1's own config.

The overrides are read from the scripts themselves (``--print-overrides``, after the environment is substituted),
so a key misspelled in a script, or a config group verl no longer has, fails here and not on a GPU box.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from hydra.errors import ConfigCompositionException, HydraException
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.config import RolloutConfig

Overrides = Callable[..., list[str]]
Compose = Callable[[list[str]], Any]


def _settings(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "MODEL_PATH": str(tmp_path / "models" / "qwen-e2e"),
        "E2E_WORK_DIR": str(tmp_path / "work"),
        "ROLLOUT_DATA_DIR": str(tmp_path / "dump"),
        "NUM_GPUS": "2",
        "TRAIN_BATCH_SIZE": "6",
        "ROLLOUT_N": "3",
        "MAX_TURNS": "4",
        **extra,
    }


def test_overrides_compose_with_the_values_that_matter(
    backend: str, script: Path, print_overrides: Overrides, compose_ppo: Compose, tmp_path: Path
) -> None:
    overrides = print_overrides(script, env=_settings(tmp_path))
    assert len(overrides) == len(set(overrides)) > 20
    # Each one overrides a key verl's config already has: nothing is appended (+) or deleted (~).
    assert not [item for item in overrides if item.startswith(("+", "~"))]

    config = compose_ppo(overrides)

    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "sglang"
    assert rollout.mode == "async"
    assert rollout.n == 3
    assert rollout.multi_turn.enable is True
    assert rollout.multi_turn.format == "hermes"
    assert rollout.multi_turn.max_assistant_turns == rollout.multi_turn.max_user_turns == 4
    assert rollout.multi_turn.tool_config_path == str(tmp_path / "work" / f"{backend}_tool_config.yaml")
    assert rollout.agent.default_agent_loop == "tool_agent"
    assert config.algorithm.adv_estimator == "grpo"
    assert config.actor_rollout_ref.model.path == str(tmp_path / "models" / "qwen-e2e")
    assert config.data.train_files == str(tmp_path / "work" / "data" / "train.parquet")
    assert config.data.train_batch_size == 6
    assert config.data.return_raw_chat is True
    trainer = config.trainer
    assert trainer.rollout_data_dir == str(tmp_path / "dump")
    assert trainer.total_training_steps == 1
    assert trainer.n_gpus_per_node == 2
    assert (trainer.val_before_train, trainer.test_freq, trainer.save_freq) == (False, -1, -1)
    assert list(trainer.logger) == ["console"]


@pytest.mark.parametrize("num_gpus", ["1", "4", "8"])
def test_composed_config_passes_verls_own_validation(
    script: Path, print_overrides: Overrides, compose_ppo: Compose, tmp_path: Path, num_gpus: str
) -> None:
    """With the default batch sizes, ``main_ppo``'s first step (``validate_config``) accepts the config on 1, 4 and
    8 GPUs, and the rollout section builds verl's ``RolloutConfig`` dataclass (its own checks included)."""
    config = compose_ppo(print_overrides(script, env={"NUM_GPUS": num_gpus}))
    assert need_critic(config) is False  # GRPO: no critic
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig)
    assert rollout.multi_turn.enable is True
    assert rollout.agent.default_agent_loop == "tool_agent"


def test_a_misspelled_key_fails_to_compose(script: Path, print_overrides: Overrides, compose_ppo: Compose) -> None:
    """The check has teeth: one of the script's own overrides with its key misspelled is refused..."""
    overrides = print_overrides(script)
    [index] = [i for i, item in enumerate(overrides) if item.startswith("actor_rollout_ref.rollout.multi_turn.enable=")]
    broken = [*overrides]
    broken[index] = broken[index].replace("multi_turn", "multiturn")
    with pytest.raises(ConfigCompositionException, match="multiturn"):
        compose_ppo(broken)


def test_an_extra_override_goes_through_and_is_checked(
    script: Path, print_overrides: Overrides, compose_ppo: Compose
) -> None:
    """...and so is a wrong extra override given on the script's command line, which is passed on last."""
    good = print_overrides(script, "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=512")
    assert good[-1] == "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=512"
    assert compose_ppo(good).actor_rollout_ref.rollout.multi_turn.max_tool_response_length == 512

    bad = print_overrides(script, "trainer.rollout_dta_dir=/tmp/dump")
    with pytest.raises(ConfigCompositionException, match="rollout_dta_dir"):
        compose_ppo(bad)


def test_a_missing_config_group_fails_to_compose(
    script: Path, print_overrides: Overrides, compose_ppo: Compose
) -> None:
    """A config group option verl does not ship (here the model engine the actor config is picked by) fails too."""
    overrides = print_overrides(script, "model_engine=no_such_engine")
    with pytest.raises(HydraException, match="no_such_engine"):
        compose_ppo(overrides)
