"""harness.tools.sandbox_fusion.SandboxFusionTool against the emulator: verl 0.7.1's observations for program
outcomes, retries for infrastructure faults, an honest observation when the budget is spent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.journal import Journal
from emulator.server import EmulatorServer

pytest.importorskip("verl", reason="needs the [verl] extra")

from verl.tools.tool_registry import initialize_tools_from_config

from harness.tools.observations import INFRA_FAULT_OBSERVATION, NO_STDOUT
from harness.tools.sandbox_fusion import SandboxFusionTool

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((ROOT / "fixtures/reference/sandbox_fusion/verl_071_tool_outputs.json").read_text())
RUN_CODE = "sandbox_fusion.run_code"
FAST_RETRY = {"max_attempts": 4, "base_delay": 0.01, "max_delay": 0.05}
JSON = {"Content-Type": "application/json"}


def make_tool(url: str, **config: Any) -> SandboxFusionTool:
    return SandboxFusionTool({"sandbox_fusion_url": url, "type": "native", "retry": FAST_RETRY, **config})


def call(tool: SandboxFusionTool, parameters: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    async def main() -> tuple[str | None, dict[str, Any]]:
        instance_id, _ = await tool.create()
        try:
            response, _, metrics = await tool.execute(instance_id, parameters)
        finally:
            await tool.release(instance_id)
            await tool.aclose()
        return response.text, metrics

    return asyncio.run(main())


def test_loads_from_verl_yaml_config(sandbox_fusion_url: str, tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "fixtures/tools/sandbox_fusion_tool_config.yaml").read_text())
    config["tools"][0]["config"]["sandbox_fusion_url"] = sandbox_fusion_url
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(config))
    [tool] = initialize_tools_from_config(str(path))
    assert isinstance(tool, SandboxFusionTool)
    assert tool.name == "code_interpreter"
    assert (tool.num_workers, tool.rate_limit, tool.memory_limit_mb) == (10, 10, 1024)
    text, metrics = call(tool, {"code": "print(6 * 7)"})
    assert (text, metrics["status"]) == ("42\n", "success")


def _normalise_paths(text: str | None) -> str | None:
    from harness.reference.normalize import normalize_text

    return normalize_text(text)


@pytest.mark.parametrize(
    ("case", "parameters"),
    [
        ("print", {"code": "print(1+1)"}),
        ("exception", {"code": "print('before')\nraise ValueError('boom')"}),
        ("syntax_error", {"code": "def f(:\n  pass"}),
        ("timeout", {"code": "while True: pass", "timeout": 1}),
        ("timeout_with_partial_output", {"code": "print('started', flush=True)\nwhile True: pass", "timeout": 1}),
        ("cpp_compile_error", {"code": "int main(){ return x; }", "language": "cpp"}),
    ],
)
def test_program_outcomes_are_shown_as_verl_071_showed_them(
    sandbox_fusion_url: str, case: str, parameters: dict[str, Any]
) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), parameters)
    assert _normalise_paths(text) == _normalise_paths(RECORDED[case]["tool_text"])
    assert metrics["infra_fault"] is None and metrics["attempts"] == 1


def test_unsupported_language_makes_no_call(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), {"code": "print(1)", "language": "python3"})
    assert text == NO_STDOUT == RECORDED["unsupported_language_client_side"]["tool_text"]
    assert metrics == {
        "status": "invalid_language",
        "attempts": 0,
        "retry_wait_s": 0.0,
        "latency_s": 0.0,
        "infra_fault": None,
    }
    assert emulator_journal.entries() == []


@pytest.mark.faults({"rules": [{"id": "gw", "route": RUN_CODE, "attempts": "1-2", "fault": {"status": 504}}]})
def test_gateway_504s_are_retried(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), {"code": "print('ok')"})
    assert (text, metrics["attempts"]) == ("ok\n", 3)
    assert [e.status for e in emulator_journal.entries()] == [504, 504, 200]


@pytest.mark.faults(
    {"rules": [{"id": "throttle", "route": RUN_CODE, "attempts": "1", "fault": {"status": 429, "retry_after": 1}}]}
)
def test_429_waits_for_retry_after(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), {"code": "print('ok')"})
    assert text == "ok\n"
    first, second = emulator_journal.entries()
    assert first.status == 429 and second.status == 200
    assert first.finished is not None and second.started - first.finished >= 1.0
    assert metrics["retry_wait_s"] >= 1.0


@pytest.mark.parametrize("fault", ["reset", "malformed", "sandbox_error", "null_stdout", {"truncate": {}}])
def test_transport_and_body_faults_are_retried(sandbox_emulator: EmulatorServer, fault: Any) -> None:
    plan = {"rules": [{"id": "once", "route": RUN_CODE, "attempts": "1", "fault": fault}]}
    sandbox_emulator.emulator.set_faults(plan)
    text, metrics = call(make_tool(sandbox_emulator.run_code_url), {"code": "print('ok')"})
    assert (text, metrics["attempts"], metrics["status"]) == ("ok\n", 2, "success")


@pytest.mark.faults({"rules": [{"id": "down", "route": RUN_CODE, "fault": {"status": 503}}]})
def test_spent_budget_gives_the_infra_observation_not_program_output(
    sandbox_fusion_url: str, emulator_journal: Journal
) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), {"code": "print('ok')"})
    assert text == INFRA_FAULT_OBSERVATION.format(reason="HTTP 503")
    assert metrics["status"] == "infra_fault" and metrics["infra_fault"] == "HTTP 503"
    assert metrics["attempts"] == FAST_RETRY["max_attempts"] == len(emulator_journal.entries())


@pytest.mark.faults({"rules": [{"id": "long", "route": RUN_CODE, "fault": {"status": 429, "retry_after": 3600}}]})
def test_retry_after_beyond_the_cap_ends_retries_at_once(sandbox_fusion_url: str, emulator_journal: Journal) -> None:
    text, metrics = call(make_tool(sandbox_fusion_url), {"code": "print('ok')"})
    assert metrics["status"] == "infra_fault" and metrics["attempts"] == 1
    assert text is not None and "HTTP 429" in text


@pytest.mark.parametrize("global_limit", [True, False])
def test_rate_limit_caps_in_flight_calls(
    sandbox_fusion_url: str, emulator_journal: Journal, global_limit: bool
) -> None:
    tool = make_tool(sandbox_fusion_url, rate_limit=2, num_workers=8, enable_global_rate_limit=global_limit)

    async def main() -> list[str | None]:
        async def one(i: int) -> str | None:
            instance_id, _ = await tool.create()
            response, _, _ = await tool.execute(instance_id, {"code": f"import time; time.sleep(0.3); print({i})"})
            await tool.release(instance_id)
            return response.text

        texts = await asyncio.gather(*(one(i) for i in range(6)))
        await tool.aclose()
        return list(texts)

    assert asyncio.run(main()) == [f"{i}\n" for i in range(6)]
    assert emulator_journal.max_in_flight(RUN_CODE) == (2 if global_limit else 6)


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sandbox_fusion_url is not set"):
        SandboxFusionTool({"type": "native"})
    with pytest.raises(ValueError, match="rate_limit"):
        SandboxFusionTool({"type": "native", "sandbox_fusion_url": "http://x/run_code", "rate_limit": 0})
    with pytest.raises(ValueError, match="unknown key"):
        SandboxFusionTool({"type": "native", "sandbox_fusion_url": "http://x/run_code", "retry": {"tries": 3}})


#: Answers no Sandbox Fusion gives, but a proxy, a broken deployment or a corrupted body can: ``(status, headers,
#: body, the fault reason the model is told)``. Invalid UTF-8 is replaced, so the first is judged on its JSON.
BAD_BODIES: dict[str, tuple[int, dict[str, str], bytes, str]] = {
    "not_utf8_200": (200, JSON, b'{"status": "Success", "x": "\xff\xfe"}', "answer without run_result"),
    "not_utf8_429_html": (429, {"Content-Type": "text/html"}, b"\xff\xfe Too Many Requests", "HTTP 429"),
    "unknown_charset": (200, {"Content-Type": "application/json; charset=bogus-enc"}, b"{}", "malformed answer"),
    "nested_100k_deep": (200, JSON, b"[" * 100_000 + b"]" * 100_000, "malformed answer"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_malformed_bodies_are_infra_faults_not_exceptions(case: str) -> None:
    from aiohttp import web

    status, headers, body, reason = BAD_BODIES[case]
    served = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        return web.Response(status=status, headers=headers, body=body)

    async def main() -> tuple[str | None, dict[str, Any]]:
        app = web.Application()
        app.router.add_post("/run_code", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        tool = make_tool(f"http://127.0.0.1:{port}/run_code", rate_limiter={"backend": "local"})
        try:
            response, _, metrics = await tool.execute("i", {"code": "print(1)"})
        finally:
            await tool.aclose()
            await runner.cleanup()
        return response.text, metrics

    text, metrics = asyncio.run(main())
    assert text == INFRA_FAULT_OBSERVATION.format(reason=reason)
    assert metrics["status"] == "infra_fault" and metrics["attempts"] == served == FAST_RETRY["max_attempts"]


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _proxy_call(url: str | None, monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str | None, list[str]]:
    """One call through a tool whose environment is ``env``; a local server stands for both the proxy (``HTTP_PROXY``
    names it) and the service (``url``: None for the server's own /run_code). Returns the text and what it saw."""
    from aiohttp import web

    seen: list[str] = []
    answer = {
        "status": "Success",
        "message": "",
        "compile_result": None,
        "run_result": {"status": "Finished", "return_code": 0, "stdout": "via proxy\n", "stderr": ""},
    }

    async def handler(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response(answer)

    async def main() -> str | None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        local = f"http://127.0.0.1:{runner.addresses[0][1]}"
        _clear_proxy_env(monkeypatch)
        for name, value in env.items():
            monkeypatch.setenv(name, value.replace("LOCAL", local))
        tool = make_tool(url or f"{local}/run_code", rate_limiter={"backend": "local"})
        try:
            response, _, _ = await tool.execute("i", {"code": "print(1)"})
        finally:
            await tool.aclose()
            await runner.cleanup()
        return response.text

    return asyncio.run(main()), seen


def test_http_proxy_from_the_environment_is_used_as_verl_requests_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's ``requests.post`` goes through ``HTTP_PROXY``; so does the tool (a host only the proxy can reach)."""
    url = "http://sandbox-fusion.internal.invalid:8080/run_code"
    text, seen = _proxy_call(url, monkeypatch, HTTP_PROXY="LOCAL")
    assert text == "via proxy\n"
    assert seen == [url]


def test_no_proxy_exempts_its_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The proxy named is a closed port: only a direct call can succeed.
    text, seen = _proxy_call(None, monkeypatch, HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="localhost,127.0.0.1")
    assert text == "via proxy\n" and len(seen) == 1
