"""A real GRPO run on CPU whose rewards come from sandboxes: TRL's ``GRPOTrainer`` with a tiny model built here.

Nothing is downloaded. The tokenizer's vocabulary is the tasks' prompts and a set of candidate programs, one token
each (good, wrong, banned, raising and looping solutions), so a randomly initialised causal LM samples real programs
with known rewards. The training is real: generation, rewards from the sandbox reward function, group-relative
advantages, the policy loss and the optimiser step all run in TRL; only the language is small.

Needs the ``[trl]`` extra (``trl``, which brings ``transformers``, ``datasets`` and ``accelerate``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.rewards.tasks import get_task

EOS = "<|endoftext|>"
UNK = "<unk>"


@dataclass(frozen=True)
class Candidate:
    """A program the tiny model can write (as one token), and what it is meant to show."""

    task: str
    kind: str  # "good", "wrong", "banned", "raises" or "loops"
    code: str


#: The candidate programs for the two tasks of Daytona's TRL example. Each ends with a newline, so any sequence of
#: them is still a Python module (the last definition of a function wins).
CANDIDATES: tuple[Candidate, ...] = (
    Candidate(
        "sort_numbers",
        "good",
        "def sort_numbers(nums):\n"
        "    out = []\n"
        "    for x in nums:\n"
        "        out = [y for y in out if y < x] + [x] + [y for y in out if y >= x]\n"
        "    return out\n",
    ),
    Candidate("sort_numbers", "wrong", "def sort_numbers(nums):\n    return list(nums)\n"),
    Candidate("sort_numbers", "banned", "def sort_numbers(nums):\n    return sorted(nums)\n"),
    Candidate("sort_numbers", "raises", "def sort_numbers(nums):\n    raise ValueError('not today')\n"),
    Candidate("sort_numbers", "loops", "def sort_numbers(nums):\n    while True:\n        pass\n"),
    Candidate(
        "max_subarray_sum",
        "good",
        "def max_subarray_sum(nums):\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best\n",
    ),
    Candidate("max_subarray_sum", "wrong", "def max_subarray_sum(nums):\n    return max(nums)\n"),
    Candidate("max_subarray_sum", "wrong", "def max_subarray_sum(nums):\n    return sum(nums)\n"),
    Candidate("max_subarray_sum", "raises", "def max_subarray_sum(nums):\n    return nums[99]\n"),
)

#: The tasks of Daytona's TRL example.
DEFAULT_TASKS: tuple[str, ...] = ("sort_numbers", "max_subarray_sum")

#: The tasks the tiny policy can learn: those it has candidate programs for (for any other it can only write
#: programs that define the wrong function, so every reward is -1 and there is nothing to learn).
TRAINABLE_TASKS: tuple[str, ...] = tuple(dict.fromkeys(c.task for c in CANDIDATES))


def program_tokenizer(tasks: Sequence[str] = DEFAULT_TASKS, candidates: Sequence[Candidate] = CANDIDATES) -> Any:
    """A Hugging Face fast tokenizer whose tokens are the tasks' prompts and the candidate programs, plus ``EOS``
    (also the pad token). Decoding concatenates tokens, so a completion is a sequence of whole programs."""
    from tokenizers import (  # type: ignore[import-untyped]  # no stubs
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({EOS: 0, UNK: 1}, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.Fuse()
    pieces = [get_task(t).prompt for t in tasks] + [c.code for c in candidates]
    tokenizer.add_tokens([AddedToken(p, normalized=False) for p in dict.fromkeys(pieces)])
    tokenizer.add_special_tokens([AddedToken(EOS, special=True)])
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS, unk_token=UNK
    )


def tiny_causal_lm(vocab_size: int, seed: int = 0) -> Any:
    """A randomly initialised one-layer Qwen2 model (a few thousand parameters), built from a config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)  # type: ignore[no-untyped-call]


def task_dataset(tasks: Sequence[str] = DEFAULT_TASKS, repeats: int = 8) -> Any:
    """A ``datasets.Dataset`` with a ``prompt`` (the task's prompt) and a ``task`` column, which TRL passes to the
    reward function as the ``task`` keyword."""
    from datasets import Dataset

    rows = [{"prompt": get_task(t).prompt, "task": t} for t in tasks] * repeats
    return Dataset.from_list(rows)


@dataclass
class RewardCall:
    """One call of the reward function by the trainer: what it was given and what it answered."""

    completions: list[str]
    completion_ids: list[list[int]]
    tasks: list[str]
    rewards: list[float]


@dataclass
class RecordingReward:
    """Wraps a reward function and keeps every call, to check later what reached the trainer."""

    reward: Callable[..., list[float]]
    calls: list[RewardCall] = field(default_factory=list)

    @property
    def __name__(self) -> str:  # TRL names the logged metric after it
        return str(getattr(self.reward, "__name__", "reward"))

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        rewards = list(self.reward(prompts, completions, **kwargs))
        self.calls.append(
            RewardCall(
                [str(c) for c in completions],
                [list(map(int, ids)) for ids in kwargs.get("completion_ids") or []],
                [str(t) for t in kwargs.get("task") or []],
                [float(r) for r in rewards],
            )
        )
        return rewards


@dataclass(frozen=True)
class GRPOSettings:
    """The knobs of the tiny run; the defaults give 8 completions a step (2 prompts x 4 generations)."""

    steps: int = 3
    prompts_per_step: int = 2
    generations: int = 4
    max_completion_length: int = 2
    learning_rate: float = 0.05
    seed: int = 0
    tasks: tuple[str, ...] = DEFAULT_TASKS


@dataclass
class GRPOOutcome:
    """What the run left: the trainer's log history (one entry per step, then the summary) and how far the weights
    moved (the L2 norm of the change of all parameters)."""

    log_history: list[dict[str, Any]]
    weight_change: float

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The per-step entries of the log history (those with a loss)."""
        return [entry for entry in self.log_history if "loss" in entry]


def train_grpo(
    reward: Callable[..., list[float]],
    settings: GRPOSettings = GRPOSettings(),
    *,
    output_dir: str | None = None,
    callbacks: Sequence[Any] = (),
) -> GRPOOutcome:
    """Train the tiny model with TRL's ``GRPOTrainer`` on CPU for ``settings.steps`` steps.

    ``reward`` is any TRL reward function, e.g. an open :class:`~harness.rewards.SandboxReward`. ``callbacks`` are
    ``transformers.TrainerCallback`` objects; the trainer's own printing of each log dict is left out.
    """
    import torch
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    for name in settings.tasks:
        get_task(name)  # an unknown task is a clear error before any model is built
    tokenizer = program_tokenizer(settings.tasks)
    model = tiny_causal_lm(len(tokenizer), settings.seed)
    before = [p.detach().clone() for p in model.parameters()]
    with tempfile.TemporaryDirectory(prefix="grpo-") as scratch:
        args = GRPOConfig(
            output_dir=output_dir or scratch,
            use_cpu=True,
            per_device_train_batch_size=settings.prompts_per_step * settings.generations,
            num_generations=settings.generations,
            max_completion_length=settings.max_completion_length,
            max_steps=settings.steps,
            learning_rate=settings.learning_rate,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=settings.seed,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=task_dataset(settings.tasks, repeats=settings.steps * settings.prompts_per_step),
            processing_class=tokenizer,
            callbacks=list(callbacks),
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    change = sum(float(torch.sum((p.detach() - b) ** 2)) for p, b in zip(model.parameters(), before, strict=True))
    return GRPOOutcome(list(trainer.state.log_history), change**0.5)
