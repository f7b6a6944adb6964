"""Use any OpenAI-compatible completions server as the policy (``sandbox-emulator rollout --llm-url``).

verl's agent loop works in token ids; this server manager decodes the prompt ids to text with the local tokenizer
(special tokens kept, so the server sees the ChatML prompt a Qwen-style model expects), asks ``POST
{url}/v1/completions`` for a continuation that stops at ``<|im_end|>``, and encodes the answer back. aiohttp, not
httpx: a rollout sends many requests at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl.workers.rollout.replica import TokenOutput

from harness.rollout.tokenizer import EOS_TOKEN, encode


class PolicyServerError(RuntimeError):
    """The policy server did not answer with a completion."""


class OpenAICompletionsServerManager:
    """Duck-types verl's server manager ``generate`` over an OpenAI-compatible ``/v1/completions`` endpoint."""

    def __init__(
        self,
        tokenizer: Any,
        url: str,
        *,
        model: str = "default",
        api_key: str | None = None,
        max_tokens: int = 1024,
        timeout: float = 300.0,
    ) -> None:
        self.tokenizer = tokenizer
        self.url = url.rstrip("/")
        if not self.url.endswith("/v1"):
            self.url += "/v1"
        self.model = model
        self.api_key = api_key
        self.max_tokens = max_tokens
        self.timeout = timeout
        self._session: Any = None
        self.calls = 0

    async def _post(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        import aiohttp

        if self._session is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.post(self.url + "/completions", json=dict(payload)) as response:
                text = await response.text()
                if response.status != 200:
                    raise PolicyServerError(f"policy server answered HTTP {response.status}: {text[:200]}")
        except aiohttp.ClientError as exc:
            raise PolicyServerError(f"policy server at {self.url} unreachable: {exc}") from None
        import json

        try:
            body = json.loads(text)
            return dict(body)
        except (ValueError, TypeError):
            raise PolicyServerError(f"policy server answered non-JSON: {text[:200]!r}") from None

    async def generate(
        self, request_id: str, *, prompt_ids: Sequence[int], sampling_params: Mapping[str, Any], **kwargs: Any
    ) -> TokenOutput:
        prompt = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        payload = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": int(sampling_params.get("max_tokens") or self.max_tokens),
            "temperature": float(sampling_params.get("temperature", 1.0)),
            "top_p": float(sampling_params.get("top_p", 1.0)),
            "stop": [EOS_TOKEN],
            "user": request_id,
        }
        body = await self._post(payload)
        try:
            text = str(body["choices"][0]["text"])
        except (KeyError, IndexError, TypeError):
            raise PolicyServerError(f"no choices[0].text in the policy server's answer: {str(body)[:200]}") from None
        self.calls += 1
        ids = encode(self.tokenizer, text + EOS_TOKEN)
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
