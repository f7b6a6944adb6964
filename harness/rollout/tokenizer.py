"""A tiny byte-level BPE tokenizer with a Qwen2.5-style ChatML chat template, built locally (no download).

verl's agent loop only needs a Hugging Face tokenizer that renders chat templates with tools, encodes ``"\\n"`` as
one token and knows ``<|im_end|>`` (the Qwen Continuous Token builder checks both). A real Qwen tokenizer would need
the hub; this one is trained in well under a second from a small built-in corpus, deterministically, so tests and CI
runs need no network and no model files.

Special tokens follow Qwen2.5: ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos) are special;
``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` are added, non-special tokens, so a
decode keeps them and verl's Hermes tool parser finds the calls.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from tokenizers import (  # type: ignore[import-untyped]  # no stubs; pyproject's mypy overrides are not ours
    AddedToken,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

#: Qwen2.5-style ChatML template: tool signatures in the system turn, tool calls as ``<tool_call>`` JSON blocks,
#: consecutive tool results grouped in one ``user`` turn of ``<tool_response>`` blocks.
CHAT_TEMPLATE = r"""
{%- set default_system = 'You are a helpful assistant.' -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages[0].role == 'system' -%}{{- messages[0].content -}}{%- else -%}{{- default_system -}}{%- endif -%}
{{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' -}}{{- tool | tojson -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
{{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n' -}}
{{- '</tool_call><|im_end|>\n' -}}
{%- elif messages[0].role == 'system' -%}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role in ['user', 'system'] or (message.role == 'assistant' and not message.tool_calls) -%}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content -%}{{- '\n' + message.content -}}{%- endif -%}
{%- for call in message.tool_calls -%}
{%- if call.function is defined -%}{%- set call = call.function -%}{%- endif -%}
{{- '\n<tool_call>\n{"name": "' + call.name + '", "arguments": ' -}}
{%- if call.arguments is string -%}{{- call.arguments -}}{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' -}}
{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip()

#: Training text: chat scaffolding, tool-call JSON, Python and arithmetic, so common strings get short encodings.
_CORPUS = (
    "You are a helpful assistant. Solve the problem step by step and use the code interpreter when useful.",
    "# Tools\n\nYou may call one or more functions to assist with the user query.",
    '{"type": "function", "function": {"name": "code_interpreter", "description": "A tool for executing code.", '
    '"parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The code to '
    'execute."}}, "required": ["code"]}}}',
    '{"name": "code_interpreter", "arguments": {"code": "print(1 + 2)"}}',
    "import math\nimport sys\nprint(sum(range(10)))\nprint(math.sqrt(16))\nfor i in range(3):\n    print(i * i)\n",
    "def solve(x):\n    return x * 2 + 1\n\nprint(solve(3), file=sys.stderr)\nsys.exit(1)\n",
    "The answer is 42. Let me check with the tool. The result of the program is 149, so the final answer is 149.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 #### answer: task trajectory",
    'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nZeroDivisionError: division by zero',
)


def _train(vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tokenizer


def build_tiny_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """A fresh tiny Qwen-style tokenizer (trained here; ~0.1 s). Use :func:`tiny_tokenizer` for a shared one."""
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=_train(vocab_size),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    return fast


@functools.lru_cache(maxsize=4)
def tiny_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """The process-wide tiny tokenizer (built once per vocabulary size)."""
    return build_tiny_tokenizer(vocab_size)


def save_tiny_tokenizer(directory: str | Path, vocab_size: int = 600) -> Path:
    """Write the tiny tokenizer as a Hugging Face tokenizer directory (loadable with ``AutoTokenizer``)."""
    path = Path(directory)
    build_tiny_tokenizer(vocab_size).save_pretrained(str(path))
    return path


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without any added special tokens."""
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
