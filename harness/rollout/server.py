"""A scripted stand-in for verl's LLM server client: ``generate()`` returns token ids a test scripts.

verl's agent loops call ``await server_manager.generate(request_id=..., prompt_ids=..., sampling_params=..., ...)``
and expect a :class:`verl.workers.rollout.replica.TokenOutput`. :class:`ScriptedServerManager` answers each call from
a *responder* that sees the request (its id, which turn of that request it is, the prompt ids and their text) and
returns the assistant's turn as text (encoded here, ``<|im_end|>`` appended as a model would emit it) or as raw ids.
Every call is recorded, so tests can read what the model was shown (observations included) on each turn.

Like verl's vLLM server, the output is capped at ``min(response_length, prompt_length + response_length -
len(prompt_ids))`` new tokens when those lengths are given (``sampling_params["max_tokens"]`` overrides).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.workers.rollout.replica import TokenOutput

from harness.rollout.tokenizer import EOS_TOKEN, encode


@dataclass
class GenerateRequest:
    """One ``generate`` call as the responder sees it."""

    request_id: str
    turn: int  # 0 for the first call of this request id
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    tokenizer: Any = field(repr=False)
    _text: str | None = field(default=None, repr=False)

    @property
    def prompt_text(self) -> str:
        """The prompt decoded (special tokens kept), computed once."""
        if self._text is None:
            self._text = str(self.tokenizer.decode(self.prompt_ids, skip_special_tokens=False))
        return self._text


@dataclass(frozen=True)
class GenerateCall:
    """A finished ``generate`` call: what was asked and what the script answered."""

    request_id: str
    turn: int
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    output_ids: list[int]
    started: float
    finished: float


#: What a responder returns: the assistant turn as text, or as token ids (used verbatim).
Reply = str | Sequence[int]
Responder = Callable[[GenerateRequest], Reply]


class ScriptExhausted(RuntimeError):
    """The loop asked for more turns than the script has."""


class ScriptBook:
    """Responder that picks a script by a tag found in a request's first prompt, then plays its turns in order.

    ``ScriptBook({"[task 7]": ["turn 1 ...", "turn 2 ..."]})``: the request whose first prompt contains
    ``[task 7]`` gets those turns. Tags must be unique and none may contain another.
    """

    def __init__(self, scripts: Mapping[str, Sequence[Reply]]) -> None:
        tags = list(scripts)
        for tag in tags:
            if any(tag != other and tag in other for other in tags):
                raise ValueError(f"script tag {tag!r} is contained in another tag; tags must not overlap")
        self.scripts = {tag: list(turns) for tag, turns in scripts.items()}
        self.bound: dict[str, str] = {}  # request id -> tag

    def __call__(self, request: GenerateRequest) -> Reply:
        tag = self.bound.get(request.request_id)
        if tag is None:
            text = request.prompt_text
            found = [t for t in self.scripts if t in text]
            if len(found) != 1:
                raise LookupError(f"request {request.request_id}: expected one script tag in the prompt, found {found}")
            tag = self.bound[request.request_id] = found[0]
        turns = self.scripts[tag]
        if request.turn >= len(turns):
            raise ScriptExhausted(f"script {tag!r} has {len(turns)} turns; turn {request.turn + 1} was requested")
        return turns[request.turn]


def sequence(turns: Sequence[Reply]) -> Responder:
    """Responder playing the same turns for every request (turn ``n`` of each request gets ``turns[n]``)."""
    book = list(turns)

    def respond(request: GenerateRequest) -> Reply:
        if request.turn >= len(book):
            raise ScriptExhausted(f"script has {len(book)} turns; turn {request.turn + 1} was requested")
        return book[request.turn]

    return respond


class ScriptedServerManager:
    """Duck-types verl's ``LLMServerClient.generate`` for agent loops, answering from a responder."""

    def __init__(
        self,
        tokenizer: Any,
        responder: Responder | Sequence[Reply],
        *,
        prompt_length: int | None = None,
        response_length: int | None = None,
        latency: float = 0.0,
        append_eos: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.responder: Responder = responder if callable(responder) else sequence(responder)
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.latency = latency
        self.append_eos = append_eos
        self.calls: list[GenerateCall] = []
        self._turns: dict[str, int] = {}
        self._in_flight = 0
        self.max_in_flight = 0

    def _max_tokens(self, prompt_ids: Sequence[int], sampling_params: Mapping[str, Any]) -> int | None:
        for key in ("max_tokens", "max_new_tokens"):
            if sampling_params.get(key) is not None:
                return int(sampling_params[key])
        if self.response_length is None:
            return None
        if self.prompt_length is None:
            return self.response_length
        return max(1, min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids)))

    def _to_ids(self, reply: Reply) -> list[int]:
        if isinstance(reply, str):
            text = reply + EOS_TOKEN if self.append_eos and not reply.endswith(EOS_TOKEN) else reply
            return encode(self.tokenizer, text)
        return [int(i) for i in reply]

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **kwargs: Any,
    ) -> TokenOutput:
        turn = self._turns.get(request_id, 0)
        self._turns[request_id] = turn + 1
        started = time.monotonic()
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            request = GenerateRequest(request_id, turn, list(prompt_ids), dict(sampling_params), self.tokenizer)
            output_ids = self._to_ids(self.responder(request))
        finally:
            self._in_flight -= 1
        limit = self._max_tokens(prompt_ids, sampling_params)
        if limit is not None and len(output_ids) > limit:
            output_ids = output_ids[:limit]
        self.calls.append(
            GenerateCall(
                request_id, turn, list(prompt_ids), dict(sampling_params), output_ids, started, time.monotonic()
            )
        )
        # verl's vLLM server reports both "stop" and "length" finishes as "completed".
        return TokenOutput(token_ids=output_ids, log_probs=[0.0] * len(output_ids), stop_reason="completed")

    def calls_for(self, request_id: str) -> list[GenerateCall]:
        """The calls of one request, in order."""
        return [c for c in self.calls if c.request_id == request_id]

    @property
    def request_ids(self) -> list[str]:
        """Request ids in order of first appearance."""
        return list(self._turns)


def hermes_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call as a Qwen/Hermes model writes it (what verl's ``hermes`` parser extracts)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": dict(arguments)}) + "\n</tool_call>"
