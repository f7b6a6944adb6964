"""Config validation of the verl tools (a bad value is a ValueError naming its key when the tool is built) and
model-given call arguments that must never raise out of ``execute`` (a bad timeout falls back to the default)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra")

from emulator.server import EmulatorServer
from harness.ratelimit import LimiterConfig, LimiterConfigError
from harness.tools.retry import RetryPolicy
from harness.tools.sandbox_fusion import SandboxFusionTool

FAST_RETRY = {"max_attempts": 2, "base_delay": 0.01, "max_delay": 0.05}
NAN, INF = float("nan"), float("inf")

# ---------------------------------------------------------------------------------------------------- shared cases

#: ``(extra config, the key the error must name)``, for both tools.
COMMON_BAD: list[tuple[dict[str, Any], str]] = [
    ({"default_timeout": INF}, "default_timeout"),
    ({"default_timeout": NAN}, "default_timeout"),
    ({"default_timeout": 0}, "default_timeout"),
    ({"default_timeout": -1}, "default_timeout"),
    ({"default_timeout": "30"}, "default_timeout"),
    ({"default_timeout": True}, "default_timeout"),
    ({"max_timeout": INF}, "max_timeout"),
    ({"max_timeout": 0}, "max_timeout"),
    ({"max_timeout": "60"}, "max_timeout"),
    ({"max_timeout": 10, "default_timeout": 30}, "must be at least 'default_timeout' (30)"),
    ({"enable_global_rate_limit": "false"}, "enable_global_rate_limit"),
    ({"enable_global_rate_limit": 0}, "enable_global_rate_limit"),
    ({"retry": {"max_attempts": INF}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 10**9}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 101}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 2.5}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": True}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": "3"}}, "retry.max_attempts"),
    ({"retry": {"base_delay": NAN}}, "retry.base_delay"),
    ({"retry": {"base_delay": -0.1}}, "retry.base_delay"),
    ({"retry": {"base_delay": "0.5"}}, "retry.base_delay"),
    ({"retry": {"max_delay": NAN}}, "retry.max_delay"),
    ({"retry": {"max_delay": INF}}, "retry.max_delay"),
    ({"retry": {"max_delay": True}}, "retry.max_delay"),
    ({"retry": {"max_retry_after": NAN}}, "retry.max_retry_after"),
    ({"retry": {"max_retry_after": INF}}, "retry.max_retry_after"),
    ({"retry": {"retry_statuses": "429"}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": 429}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": [429, True]}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": [429.0]}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": [42]}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": [600]}}, "retry.retry_statuses"),
    ({"retry": {"retry_statuses": ["503"]}}, "retry.retry_statuses"),
    ({"retry": {"max_atempts": 3}}, "max_atempts"),
    ({"rate_limt": 2}, "rate_limt"),
    ({"default_timout": 5}, "default_timout"),
    ({"retries": {"max_attempts": 3}}, "retries"),
    ({"rate_limiter": {"backend": "local", "adaptive": {"decrease_factor": "0.5"}}}, "decrease_factor"),
    ({"rate_limiter": {"backend": "local", "adaptive": {"cooldown_s": "1"}}}, "cooldown_s"),
    ({"rate_limiter": {"backend": "local", "adaptive": {"decrease_factor": True}}}, "decrease_factor"),
    ({"rate_limiter": {"backend": "local", "adaptive": {"cooldown_s": NAN}}}, "cooldown_s"),
    # each passed the build and made every call fail
    ({"rate_limiter": {"backend": "ray", "namespace": ""}}, "namespace"),
    ({"rate_limiter": {"backend": "ray", "namespace": 123}}, "namespace"),
    ({"rate_limiter": {"backend": "local", "limt": 2}}, "did you mean 'limit'?"),  # as at the top level and in retry
]

SANDBOX_FUSION_BAD: list[tuple[dict[str, Any], str]] = [
    ({"memory_limit_mb": 0}, "memory_limit_mb"),
    ({"memory_limit_mb": -1}, "memory_limit_mb"),
    ({"memory_limit_mb": 1.5}, "memory_limit_mb"),
    ({"memory_limit_mb": "4096"}, "memory_limit_mb"),
    ({"memory_limit_MB": 4096}, "memory_limit_MB"),
    ({"sandbox_scope": "call"}, "sandbox_scope"),  # a Daytona key
    ({"sandbox_fusion_url": "127.0.0.1:8080/run_code"}, "sandbox_fusion_url"),  # no scheme: every call would fail
    ({"sandbox_fusion_url": "not a url"}, "sandbox_fusion_url"),
    ({"sandbox_fusion_url": 8080}, "sandbox_fusion_url"),
    ({"default_language": "pyhton"}, "default_language"),
    ({"default_language": None}, "default_language"),
    ({"rate_limiter": {"backend": "redis", "redis_url": "localhost:6379"}}, "redis_url"),
    ({"rate_limiter": {"backend": "redis", "redis_url": ""}}, "redis_url"),
    ({"rate_limiter": {"backend": "local", "redis_url": "redis://h/0"}}, "redis_url"),  # a shared cap meant
]

DAYTONA_BAD: list[tuple[dict[str, Any], str]] = [
    ({"normalize_code": "false"}, "normalize_code"),
    ({"normalize_code": 1}, "normalize_code"),
    ({"create_timeout": NAN}, "create_timeout"),
    ({"create_timeout": INF}, "create_timeout"),
    ({"create_timeout": 0}, "create_timeout"),
    ({"delete_timeout": -1}, "delete_timeout"),
    ({"delete_timeout": NAN}, "delete_timeout"),
    ({"auto_stop_interval": -1}, "auto_stop_interval"),
    ({"auto_stop_interval": 1.5}, "auto_stop_interval"),
    ({"auto_delete_interval": -1}, "auto_delete_interval"),
    ({"auto_delete_interval": "30"}, "auto_delete_interval"),
    ({"auto_delete_interval": True}, "auto_delete_interval"),
    ({"sandbox_scop": "call"}, "sandbox_scop"),
    ({"memory_limit_mb": 1024}, "memory_limit_mb"),  # a Sandbox Fusion key
    # Each raised AttributeError when the tool was built, or passed the build and failed every create.
    ({"labels": ["a"]}, "labels"),
    ({"labels": "a=b"}, "labels"),
    ({"labels": {"a": None}}, "labels"),
    ({"labels": {"a": {"b": "c"}}}, "labels"),
    ({"env_vars": ["A=1"]}, "env_vars"),
    ({"env_vars": {"A": None}}, "env_vars"),
    ({"env_vars": {"A": True}}, "env_vars"),
    ({"api_key": 123}, "api_key"),
    ({"jwt_token": ["t"]}, "jwt_token"),
    ({"target": 5}, "target"),
    ({"snapshot": 5}, "snapshot"),
    ({"organization_id": 5}, "organization_id"),
    ({"name_prefix": None}, "name_prefix"),
    ({"name_prefix": ""}, "name_prefix"),
    ({"api_url": "not a url"}, "api_url"),
    ({"api_url": "127.0.0.1:3000/api"}, "api_url"),
    ({"api_url": 5}, "api_url"),
]


def make_sandbox_fusion(url: str = "http://127.0.0.1:9/run_code", **config: Any) -> SandboxFusionTool:
    base = {"type": "native", "sandbox_fusion_url": url, "retry": FAST_RETRY, "rate_limiter": {"backend": "local"}}
    return SandboxFusionTool({**base, **config})


def make_daytona(api_url: str = "http://127.0.0.1:9/api", api_key: str = "key", **config: Any) -> Any:
    pytest.importorskip("daytona", reason="needs the [daytona] extra")
    from harness.tools.daytona import DaytonaTool

    base = {"type": "native", "api_url": api_url, "api_key": api_key, "retry": FAST_RETRY}
    return DaytonaTool({**base, "rate_limiter": {"backend": "local"}, **config})


def _ids(cases: list[tuple[dict[str, Any], str]]) -> list[str]:
    return [repr(config)[:60] for config, _ in cases]


@pytest.mark.parametrize(("config", "key"), COMMON_BAD + SANDBOX_FUSION_BAD, ids=_ids(COMMON_BAD + SANDBOX_FUSION_BAD))
def test_sandbox_fusion_refuses_bad_config(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=re.escape(key)):
        make_sandbox_fusion(**config)


@pytest.mark.parametrize(("config", "key"), COMMON_BAD + DAYTONA_BAD, ids=_ids(COMMON_BAD + DAYTONA_BAD))
def test_daytona_refuses_bad_config(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=re.escape(key)):
        make_daytona(**config)


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("rate_limt", "rate_limit"), ("default_timout", "default_timeout"), ("memory_limit_MB", "memory_limit_mb")],
)
def test_unknown_key_suggests_the_closest_known_key(typo: str, suggestion: str) -> None:
    with pytest.raises(ValueError, match=f"did you mean {suggestion!r}"):
        make_sandbox_fusion(**{typo: 1})


def test_unknown_daytona_key_suggests_the_closest_known_key() -> None:
    with pytest.raises(ValueError, match="did you mean 'sandbox_scope'"):
        make_daytona(sandbox_scop="call")


def test_good_configs_are_accepted() -> None:
    tool = make_sandbox_fusion(
        num_workers=3,
        rate_limit=2,
        enable_global_rate_limit=False,
        default_timeout=5,
        default_language="python",
        memory_limit_mb=4096,
        retry={"max_attempts": 100, "base_delay": 0, "max_delay": 1, "max_retry_after": 0, "retry_statuses": [429]},
    )
    assert (tool.default_timeout, tool.memory_limit_mb, tool.enable_global_rate_limit) == (5.0, 4096, False)
    assert tool.retry.max_attempts == 100 and tool.retry.retry_statuses == frozenset({429})
    daytona = make_daytona(
        num_workers=4,  # shared with the Sandbox Fusion tool's config; accepted, unused
        normalize_code=True,
        create_timeout=0.5,
        delete_timeout=10,
        auto_stop_interval=0,
        auto_delete_interval=0,
        rate_limiter={"backend": "local", "adaptive": {"decrease_factor": 0.5, "cooldown_s": 0}},
    )
    assert (daytona.normalize, daytona.auto_stop_interval, daytona.auto_delete_interval) == (True, 0, 0)
    daytona = make_daytona(labels={"team": "rl", "run": 7}, env_vars={"PORT": 8080, "MODE": "x"}, snapshot="snap")
    assert daytona.labels == {"team": "rl", "run": "7"} and daytona.env_vars == {"PORT": "8080", "MODE": "x"}
    assert (daytona.snapshot, make_daytona(target="eu", labels=None).target) == ("snap", "eu")


def test_a_secret_of_the_wrong_type_is_not_repeated_in_the_error() -> None:
    with pytest.raises(ValueError, match="'api_key' must be a string, got int") as raised:
        make_daytona(api_key=123456789)
    assert "123456789" not in str(raised.value)


def test_retry_policy_and_adaptive_limiter_directly() -> None:
    with pytest.raises(ValueError, match=r"retry\.max_delay"):
        RetryPolicy.from_config({"retry": {"max_delay": NAN}})
    with pytest.raises(LimiterConfigError, match="cooldown_s"):
        LimiterConfig.from_mapping({"adaptive": {"cooldown_s": "1"}})
    with pytest.raises(LimiterConfigError, match="lease_s"):
        LimiterConfig.from_mapping({"lease_s": True})


# ---------------------------------------------------------------------------------------------------- model values

BAD_MODEL_TIMEOUTS = ["inf", "nan", "-inf", float("inf"), float("nan"), -5, 0, True, "soon", None, [1], 1e308]


def _sandbox_fusion_calls(tool: SandboxFusionTool, calls: list[dict[str, Any]]) -> list[tuple[str | None, Any]]:
    async def main() -> list[tuple[str | None, Any]]:
        out = []
        try:
            for parameters in calls:
                instance_id, _ = await tool.create()
                response, _, metrics = await tool.execute(instance_id, parameters)
                await tool.release(instance_id)
                out.append((response.text, metrics))
        finally:
            await tool.aclose()
        return out

    return asyncio.run(main())


def test_sandbox_fusion_bad_model_timeout_falls_back_to_the_default(sandbox_emulator: EmulatorServer) -> None:
    tool = make_sandbox_fusion(sandbox_emulator.run_code_url, default_timeout=7)
    calls = [{"code": "print(1)", "timeout": timeout} for timeout in BAD_MODEL_TIMEOUTS]
    results = _sandbox_fusion_calls(tool, calls)
    assert [(text, metrics["status"]) for text, metrics in results] == [("1\n", "success")] * len(calls)
    runs = [e for e in sandbox_emulator.emulator.journal.entries() if e.route == "sandbox_fusion.run_code"]
    assert len(runs) == len(calls)


def _timeouts_sent(tool: SandboxFusionTool, monkeypatch: Any) -> list[float]:
    """The timeout of each request ``tool`` sends from now on (filled as it sends them)."""
    sent: list[float] = []
    original = tool._call_once

    async def spy(code: str, timeout: float, language: str) -> Any:
        sent.append(timeout)
        return await original(code, timeout, language)

    monkeypatch.setattr(tool, "_call_once", spy)
    return sent


def test_sandbox_fusion_sends_the_default_not_nan(sandbox_emulator: EmulatorServer, monkeypatch: Any) -> None:
    tool = make_sandbox_fusion(sandbox_emulator.run_code_url, default_timeout=7)
    sent = _timeouts_sent(tool, monkeypatch)
    _sandbox_fusion_calls(tool, [{"code": "print(1)", "timeout": "nan"}, {"code": "print(1)", "timeout": "2.5"}])
    assert sent == [7.0, 2.5]


def test_sandbox_fusion_caps_the_models_timeout_at_max_timeout(
    sandbox_emulator: EmulatorServer, monkeypatch: Any
) -> None:
    """A model asking for an hour gets ``max_timeout``: one endless program must not hold its rollout that long."""
    tool = make_sandbox_fusion(sandbox_emulator.run_code_url, default_timeout=7, max_timeout=20)
    sent = _timeouts_sent(tool, monkeypatch)
    calls = [{"code": "print(1)", "timeout": t} for t in (3600, "12", None)] + [{"code": "print(1)"}]
    _sandbox_fusion_calls(tool, calls)
    assert sent == [20.0, 12.0, 7.0, 7.0]
    assert make_sandbox_fusion(sandbox_emulator.run_code_url, max_timeout=None).max_timeout is None  # no bound


def test_daytona_caps_the_models_timeout_at_max_timeout(sandbox_emulator: EmulatorServer) -> None:
    tool = make_daytona(
        sandbox_emulator.url + "/api",
        sandbox_emulator.emulator.config.daytona.api_key,
        default_timeout=1,
        max_timeout=1,
    )

    async def main() -> tuple[str | None, Any]:
        try:
            instance_id, _ = await tool.create()
            response, _, metrics = await tool.execute(instance_id, {"code": "while True: pass", "timeout": 3600})
            await tool.release(instance_id)
        finally:
            await tool.aclose()
        return response.text, metrics["status"]

    assert asyncio.run(main()) == ("Execution timed out after 1 seconds.", "timeout")


def test_daytona_bad_model_timeout_falls_back_and_reports_the_applied_timeout(
    sandbox_emulator: EmulatorServer,
) -> None:
    tool = make_daytona(
        sandbox_emulator.url + "/api",
        sandbox_emulator.emulator.config.daytona.api_key,
        default_timeout=1,
        sandbox_scope="trajectory",  # one sandbox for all the calls (faster)
    )
    calls = [{"code": "print(1)", "timeout": timeout} for timeout in ["inf", "nan", float("nan"), -5, "soon", 1e308]]
    calls.append({"code": "while True: pass", "timeout": -5})

    async def main() -> list[tuple[str | None, Any]]:
        out = []
        try:
            instance_id, _ = await tool.create()
            for parameters in calls:
                response, _, metrics = await tool.execute(instance_id, parameters)
                out.append((response.text, metrics["status"]))
            await tool.release(instance_id)
        finally:
            await tool.aclose()
        return out

    results = asyncio.run(main())
    assert results[:-1] == [("1\n", "success")] * (len(calls) - 1)
    # -5 is not a timeout: the default (1 s) applies, and the model is told the timeout actually applied.
    assert results[-1] == ("Execution timed out after 1 seconds.", "timeout")
    assert [record.id for record in sandbox_emulator.emulator.daytona_report().leaked] == []


#: Arguments verl hands a tool when the model's JSON is not an object: ``json.loads`` made them, and verl passes them
#: on as they are.
NOT_AN_OBJECT = [("print(1)", "a string"), (["print(1)"], "an array"), (None, "null"), (5, "a number")]


def _one_call(tool: Any, parameters: Any) -> tuple[str | None, dict[str, Any]]:
    async def main() -> tuple[str | None, dict[str, Any]]:
        try:
            instance_id, _ = await tool.create()
            response, _, metrics = await tool.execute(instance_id, parameters)
            await tool.release(instance_id)
        finally:
            await tool.aclose()
        return response.text, metrics

    return asyncio.run(main())


@pytest.mark.parametrize(("arguments", "kind"), NOT_AN_OBJECT, ids=[kind for _, kind in NOT_AN_OBJECT])
@pytest.mark.parametrize("backend", ["sandbox_fusion", "daytona"])
def test_arguments_that_are_not_an_object_get_an_observation(backend: str, arguments: Any, kind: str) -> None:
    from harness.tools.observations import INVALID_ARGUMENTS_OBSERVATION

    # Nothing listens at the tools' URLs: an answer that is not the observation would be an infrastructure fault.
    tool = make_sandbox_fusion() if backend == "sandbox_fusion" else make_daytona(sandbox_scope="trajectory")
    text, metrics = _one_call(tool, arguments)
    problem = f'expected a JSON object such as {{"code": "print(1)"}}, got {kind}'
    assert text == INVALID_ARGUMENTS_OBSERVATION.format(tool="code_interpreter", problem=problem)
    assert metrics["status"] == "invalid_arguments" and metrics["attempts"] == 0 and metrics["infra_fault"] is None


@pytest.mark.parametrize(
    ("envs", "problem"),
    [
        ({"A": 1}, "envs values must be strings, got a number for 'A'"),
        ({"A": "1", "B": None}, "envs values must be strings, got null for 'B'"),
        (["A=1"], "envs must be an object mapping names to strings, got an array"),
        ("A=1", "envs must be an object mapping names to strings, got a string"),
    ],
)
def test_daytona_envs_that_are_not_strings_are_the_models_error(envs: Any, problem: str) -> None:
    """Forwarded, ``{"A": 1}`` fails every attempt and reads as a service fault after the retry budget."""
    from harness.tools.observations import INVALID_ARGUMENTS_OBSERVATION

    text, metrics = _one_call(make_daytona(sandbox_scope="trajectory"), {"code": "print(1)", "envs": envs})
    assert text == INVALID_ARGUMENTS_OBSERVATION.format(tool="code_interpreter", problem=problem)
    assert metrics["status"] == "invalid_arguments" and metrics["attempts"] == 0


def test_daytona_string_envs_reach_the_program(sandbox_emulator: EmulatorServer) -> None:
    tool = make_daytona(sandbox_emulator.url + "/api", sandbox_emulator.emulator.config.daytona.api_key)
    code = "import os; print(os.environ.get('A'))"
    text, metrics = _one_call(tool, {"code": code, "envs": {"A": "1"}})
    assert (text, metrics["status"]) == ("1\n", "success")
    text, metrics = _one_call(tool, {"code": code, "envs": None})
    assert (text, metrics["status"]) == ("None\n", "success")
