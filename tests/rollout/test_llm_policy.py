"""``--llm-url``: any OpenAI-compatible completions server as the policy, here a small one playing the scripted
policy over HTTP, so the whole path (prompt text out, completion text in, tokens, tools, dump) is real."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")
from aiohttp import web

from harness.gsm8k.data import BUNDLED_PROBLEMS, load_problems
from harness.gsm8k.policy import ScriptedGSM8KPolicy
from harness.rollout.job import RolloutOptions, run_rollout
from harness.rollout.server import GenerateRequest
from harness.rollout.tokenizer import encode, tiny_tokenizer
from harness.validate import validate_file


class CompletionsServer:
    """``POST /v1/completions`` answered by the scripted policy, on a loopback port in its own thread."""

    def __init__(self) -> None:
        self.tokenizer = tiny_tokenizer()
        self.policy = ScriptedGSM8KPolicy(load_problems(BUNDLED_PROBLEMS))
        self.turns: dict[str, int] = {}
        self.payloads: list[dict[str, Any]] = []
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _complete(self, request: web.Request) -> web.Response:
        payload = await request.json()
        self.payloads.append(payload)
        if payload.get("model") == "broken":
            return web.json_response({"error": "no such model"}, status=404)
        request_id = payload["user"]
        turn = self.turns.get(request_id, 0)
        self.turns[request_id] = turn + 1
        prompt_ids = encode(self.tokenizer, payload["prompt"])
        text = self.policy(GenerateRequest(request_id, turn, prompt_ids, {}, self.tokenizer))
        return web.json_response({"choices": [{"text": text, "index": 0, "finish_reason": "stop"}]})

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> CompletionsServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def completions_server() -> Iterator[CompletionsServer]:
    with CompletionsServer() as server:
        yield server


def test_llm_url_policy_runs_the_job(completions_server: CompletionsServer, tmp_path: Path) -> None:
    result = run_rollout(RolloutOptions(trajectories=8, out=tmp_path, llm_url=completions_server.url))
    assert result.errors == 0
    assert result.mean_reward == 1.0  # the server played the scripted policy faithfully over HTTP
    assert result.offline_mean_reward is None  # no offline ceiling for an outside policy
    assert result.tool_calls >= 8
    first = completions_server.payloads[0]
    assert first["stop"] == ["<|im_end|>"] and first["prompt"].endswith("<|im_start|>assistant\n")
    assert "<tools>" in first["prompt"]  # the tool schema went to the model


def test_llm_url_errors_are_reported_per_trajectory(completions_server: CompletionsServer, tmp_path: Path) -> None:
    options = RolloutOptions(trajectories=2, out=tmp_path, llm_url=completions_server.url, llm_model="broken")
    progress: list[tuple[int, int]] = []
    result = run_rollout(options, progress=lambda done, total, calls: progress.append((done, total)))
    assert result.errors == 2
    assert all("HTTP 404" in (t.error or "") for t in result.trajectories)
    assert progress == [(1, 2), (2, 2)]  # a failed trajectory is over too: the bar reaches its end
    rows = [json.loads(line) for line in result.dump_path.read_text().splitlines()]
    assert [("HTTP 404" in row["error"], row["score"], row["acc"]) for row in rows] == [(True, 0.0, 0.0)] * 2
    report = validate_file(result.dump_path)
    # one violation per failed row, saying why (not the empty row's schema and turn-count complaints)
    assert [(f.line, f.check) for f in report.violations] == [(1, "error"), (2, "error")]
    assert "the trajectory failed: " in report.violations[0].message and "HTTP 404" in report.violations[0].message
