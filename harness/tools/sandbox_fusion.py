"""``SandboxFusionTool`` for verl 0.8+ (which removed its own), reading verl 0.7.1's YAML keys.

What the model sees for program outcomes is what verl 0.7.1 showed: ``stdout + stderr`` when the program ran to the
end (whatever its exit code), ``"no stdout here"`` for a timeout, a compile error or an unsupported language.
Unlike 0.7.1, infrastructure faults (HTTP 429/5xx/504, resets, timeouts of the HTTP call, malformed answers,
``SandboxError``, a null ``stdout``) are retried with jittered exponential backoff, honouring ``Retry-After``, within
a budget; when it is spent the model sees :data:`INFRA_FAULT_OBSERVATION` (never a fake program output) and the
fault is reported in the tool metrics.

Config (YAML ``config:`` of the tool entry): ``sandbox_fusion_url`` (full URL incl. ``/run_code``, as verl),
``num_workers`` (concurrent calls per tool, default 10), ``rate_limit`` (in-flight cap, default 10),
``enable_global_rate_limit`` (default true), ``default_timeout`` (30), ``max_timeout`` (the most a call may ask
for; none), ``default_language`` ("python"), ``memory_limit_mb`` (1024), ``retry`` (see
:class:`~harness.tools.retry.RetryPolicy`), and ``rate_limiter`` (which limiter enforces ``rate_limit``; see
:func:`limiter_settings` and ``docs/ratelimit.md``).

With ``enable_global_rate_limit: true`` (the default) the in-flight cap ``rate_limit`` is cluster-wide when Ray is
initialised in the process (a named Ray actor, as verl 0.7.1's ``TokenBucketWorker``, but FIFO, bounded,
cancel-safe and leased), and per tool object otherwise (the ``local`` fallback, logged once).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, replace
from typing import Any
from uuid import uuid4

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.reward_score.sandbox_fusion.utils import SUPPORTED_LANGUAGES
from yarl import URL

from harness.ratelimit import (
    AsyncLimiter,
    ConcurrencyLimiter,
    LimiterConfig,
    LimiterConfigError,
    check_namespace,
    open_limiter,
    ray_ready,
)
from harness.ratelimit import Outcome as CallOutcome
from harness.tools.config import (
    VERL_KEYS,
    arguments_problem,
    check_keys,
    flag,
    max_timeout_seconds,
    model_timeout,
    positive_int,
    timeout_seconds,
)
from harness.tools.observations import INFRA_FAULT_OBSERVATION, INVALID_ARGUMENTS_OBSERVATION, NO_STDOUT
from harness.tools.permits import LimiterUnavailable, return_permit, take_permit
from harness.tools.retry import RetryPolicy, retry_after_seconds
from harness.urls import url_problem

log = logging.getLogger(__name__)

#: The ``rate_limiter`` keys besides :class:`~harness.ratelimit.LimiterConfig`'s fields.
LIMITER_KEYS = ("backend", "namespace", "redis_url")

#: The keys a :class:`SandboxFusionTool` config may have (any other is a typo, refused with a suggestion).
CONFIG_KEYS = VERL_KEYS | {
    "sandbox_fusion_url",
    "num_workers",
    "rate_limit",
    "enable_global_rate_limit",
    "rate_limiter",
    "default_timeout",
    "max_timeout",
    "default_language",
    "memory_limit_mb",
    "retry",
}


DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "A tool for executing code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to execute."}},
            "required": ["code"],
        },
    },
}


class InfraFault(Exception):
    """The service (not the program) failed; ``retry_after`` is the server's hint, if any."""

    def __init__(self, reason: str, retryable: bool = True, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class Outcome:
    """A program outcome as the model should see it, plus the label verl's ``_process_single_case`` would give."""

    text: str
    status: str  # success | runtime_error | timeout | compile_error | invalid_language


def classify(body: Any) -> Outcome:
    """Map a 200 ``/run_code`` answer to what the model sees; raise :class:`InfraFault` for service-side failures."""
    if not isinstance(body, dict) or body.get("status") not in ("Success", "Failed", "SandboxError"):
        raise InfraFault("malformed answer")
    if body["status"] == "SandboxError":
        raise InfraFault(f"SandboxError: {str(body.get('message', ''))[:200]}")
    compile_result = body.get("compile_result")
    run_result = body.get("run_result")
    if isinstance(compile_result, dict) and (
        compile_result.get("status") != "Finished" or compile_result.get("return_code") not in (0, None)
    ):
        return Outcome(NO_STDOUT, "compile_error")
    if not isinstance(run_result, dict):
        raise InfraFault("answer without run_result")
    status = run_result.get("status")
    if status == "TimeLimitExceeded":
        return Outcome(NO_STDOUT, "timeout")
    if status != "Finished":
        raise InfraFault(f"run status {status!r}")
    stdout, stderr = run_result.get("stdout"), run_result.get("stderr")
    if not isinstance(stdout, str) or not isinstance(stderr, str):
        raise InfraFault("answer with null stdout or stderr")
    return Outcome(stdout + stderr, "success" if run_result.get("return_code") == 0 else "runtime_error")


def env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``/``HTTPS_PROXY``, unless ``NO_PROXY`` exempts its
    host), as verl's ``requests.post`` would use, or ``(None, None)``.

    Looked up once per session rather than by ``trust_env=True``: that repeats the lookup (and a ``~/.netrc`` read) in
    a worker thread before every request, a third of a millisecond a call on a path that costs about as much again,
    while the tool only ever posts to this one URL."""
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:  # none named, or NO_PROXY exempts the host
        return None, None


def parse_body(raw: bytes) -> Any:
    """The JSON of a 200 answer; :class:`InfraFault` for anything that is not (invalid UTF-8 is replaced, not an
    error: the JSON around it decides; nesting deep enough to exhaust the parser's recursion is malformed too)."""
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        raise InfraFault("malformed answer") from None


class SandboxFusionTool(BaseTool):
    """Runs code through Sandbox Fusion's ``/run_code`` with retries, limits and honest fault reporting."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        check_keys(config, CONFIG_KEYS, "the SandboxFusionTool config")
        raw_url = config.get("sandbox_fusion_url")
        if not raw_url:
            raise ValueError("sandbox_fusion_url is not set (the full URL of /run_code)")
        if not isinstance(raw_url, str) or url_problem(raw_url) is not None:  # else every call fails, retried
            raise ValueError(f"sandbox_fusion_url must be the http(s) URL of /run_code, got {raw_url!r}")
        self.url = raw_url
        self.num_workers = positive_int(config, "num_workers", 10)
        self.rate_limit = positive_int(config, "rate_limit", 10)
        self.enable_global_rate_limit = flag(config, "enable_global_rate_limit", True)
        self.limiter_backend, self.limiter_config, self.limiter_options = limiter_settings(config, self.rate_limit)
        self.default_timeout = timeout_seconds(config, "default_timeout", 30)
        self.max_timeout = max_timeout_seconds(config, self.default_timeout)
        self.default_language = config.get("default_language", "python")
        if self.default_language not in SUPPORTED_LANGUAGES:  # else every call without a language fails unseen
            raise ValueError(
                "tool config 'default_language' must be one of Sandbox Fusion's languages, "
                f"got {self.default_language!r}"
            )
        self.memory_limit_mb = positive_int(config, "memory_limit_mb", 1024)
        self.retry = RetryPolicy.from_config(config)
        self._rng = random.Random()
        self._instances: dict[str, dict[str, Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._proxy: URL | None = None
        self._proxy_auth: aiohttp.BasicAuth | None = None
        self._workers: ConcurrencyLimiter | None = None
        self._limiter: AsyncLimiter | None = None

    def _bind_loop(self) -> None:
        """aiohttp sessions and asyncio limiters belong to one event loop; rebuild them if the loop changed."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        # The in-flight cap: cluster-wide (ray, redis) or shared by every caller of this tool object (local). Opened
        # first, and the loop recorded last: a limiter that cannot open now (Ray not up yet) is tried again by the
        # next call, rather than that call and every later one running with no cap at all.
        limiter = self._open_limiter() if self.enable_global_rate_limit else None
        self._limiter = limiter
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self._proxy, self._proxy_auth = env_proxy(self.url)
        self._workers = ConcurrencyLimiter(self.num_workers)
        self._loop = loop

    def _open_limiter(self) -> AsyncLimiter:
        return open_tool_limiter(self.limiter_backend, self.limiter_config, self.limiter_options)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        self._instances[instance_id] = {"calls": 0}
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        problem = arguments_problem(parameters)
        if problem is not None:  # verl hands over whatever json.loads made of the model's arguments
            text = INVALID_ARGUMENTS_OBSERVATION.format(tool=self.name, problem=problem)
            return ToolResponse(text=text), 0.0, _no_call_metrics("invalid_arguments")
        code = parameters.get("code", "")
        # Not a finite positive number ("inf", "nan", -5, "soon"): the default, never an exception or a NaN on the wire.
        timeout = model_timeout(parameters.get("timeout", self.default_timeout), self.default_timeout, self.max_timeout)
        language = parameters.get("language", self.default_language)
        if not isinstance(code, str):
            code = json.dumps(code)
        if instance_id in self._instances:
            self._instances[instance_id]["calls"] += 1
        if language not in SUPPORTED_LANGUAGES:
            return ToolResponse(text=NO_STDOUT), 0.0, _no_call_metrics("invalid_language")
        self._bind_loop()
        assert self._workers is not None
        async with self._workers.slot():
            return await self._call_with_retries(code, timeout, str(language))

    async def _call_with_retries(
        self, code: str, timeout: float, language: str
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        waited = 0.0
        fault: InfraFault | None = None
        attempt = 0
        started = time.monotonic()
        while attempt < self.retry.max_attempts:
            attempt += 1
            try:
                outcome = await self._call_once(code, timeout, language)
            except InfraFault as exc:
                fault = exc
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    break
                if exc.retry_after is not None and exc.retry_after > self.retry.max_retry_after:
                    break
                delay = self.retry.delay(attempt, self._rng, exc.retry_after)
                waited += delay
                await asyncio.sleep(delay)
                continue
            metrics = {"status": outcome.status, "attempts": attempt, "retry_wait_s": waited, "infra_fault": None}
            metrics["latency_s"] = time.monotonic() - started
            return ToolResponse(text=outcome.text), 0.0, metrics
        assert fault is not None
        metrics = {
            "status": "infra_fault",
            "attempts": attempt,
            "retry_wait_s": waited,
            "infra_fault": fault.reason,
            "latency_s": time.monotonic() - started,
        }
        return ToolResponse(text=INFRA_FAULT_OBSERVATION.format(reason=fault.reason)), 0.0, metrics

    async def _call_once(self, code: str, timeout: float, language: str) -> Outcome:
        assert self._session is not None
        payload = {
            "compile_timeout": timeout,
            "run_timeout": timeout,
            "code": code,
            "stdin": None,
            "memory_limit_MB": self.memory_limit_mb,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
        client_timeout = aiohttp.ClientTimeout(total=2 * timeout + 10)
        limiter = self._limiter
        try:
            permit = await take_permit(limiter)
        except LimiterUnavailable as exc:
            raise InfraFault(exc.reason, retryable=exc.retryable) from None
        outcome: CallOutcome = "error"
        try:
            post = self._session.post(
                self.url, json=payload, timeout=client_timeout, proxy=self._proxy, proxy_auth=self._proxy_auth
            )
            async with post as response:
                # Bytes, not ``response.text()``: a body that is not UTF-8, or names a charset Python lacks, must be a
                # malformed answer (or just a status), never a decoding exception out of ``execute``.
                raw = await response.read()
                outcome = "ok" if response.status == 200 else "throttled" if response.status == 429 else "error"
                if response.status != 200:
                    raise InfraFault(
                        f"HTTP {response.status}",
                        retryable=response.status in self.retry.retry_statuses,
                        retry_after=retry_after_seconds(response.headers),
                    )
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
            raise InfraFault(f"{type(exc).__name__}: {exc}"[:200]) from None
        finally:
            await return_permit(limiter, permit, outcome)  # adaptive limiters shrink on 429s
        return classify(parse_body(raw))

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)

    async def aclose(self) -> None:
        if self._limiter is not None:
            await self._limiter.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._loop = None


def _no_call_metrics(status: str) -> dict[str, Any]:
    """The metrics of a call answered without calling the service (the model's mistake): every documented key."""
    return {"status": status, "attempts": 0, "retry_wait_s": 0.0, "latency_s": 0.0, "infra_fault": None}


_warned_local_fallback = False


def _note_local_fallback() -> None:
    global _warned_local_fallback
    _warned_local_fallback = True
    log.warning(
        "Ray is not initialised in this process, so a tool's rate_limit caps each tool object "
        "(rate_limiter backend 'local'), not the cluster; set rate_limiter.backend to ray or redis to share it"
    )


def open_tool_limiter(backend: str, config: LimiterConfig, options: dict[str, Any]) -> AsyncLimiter:
    """The tool's in-flight limiter; ``auto`` means Ray when this process is connected to Ray, else local."""
    if backend == "auto":
        backend = "ray" if ray_ready() else "local"
        if backend == "local" and not _warned_local_fallback:
            _note_local_fallback()
    return open_limiter(config, backend, **options)


def limiter_settings(
    config: dict[str, Any], rate_limit: int, default_prefix: str = "sandbox-fusion"
) -> tuple[str, LimiterConfig, dict[str, Any]]:
    """``(backend, limiter config, open_limiter options)`` from the tool config.

    ``rate_limiter`` (optional mapping): ``backend`` (``auto`` (default): ``ray`` when Ray is initialised, else
    ``local``; or ``local`` | ``ray`` | ``redis``), ``name``, ``limit`` (default ``rate_limit``),
    ``rate_per_second``, ``burst``, ``lease_s``, ``adaptive`` (bool or mapping), ``namespace`` (ray),
    ``redis_url`` (redis). The default name is ``<default_prefix>-<limit>``: every tool of a cluster with the same
    old-style ``rate_limit`` shares one limiter; give a ``name`` to share one explicitly (then a disagreeing
    config is a :class:`~harness.ratelimit.LimiterConfigError`).
    """
    spec = config.get("rate_limiter") or {}
    if not isinstance(spec, dict):
        raise ValueError(f"tool config 'rate_limiter' must be a mapping, got {spec!r}")
    spec = dict(spec)
    backend = str(spec.pop("backend", "auto"))
    if backend not in ("auto", "local", "ray", "redis"):
        raise ValueError(f"rate_limiter.backend must be auto, local, ray or redis, got {backend!r}")
    options: dict[str, Any] = {}
    if "namespace" in spec:
        try:
            options["namespace"] = check_namespace(spec.pop("namespace"))
        except LimiterConfigError as exc:  # found when the tool is built, not at every call
            raise ValueError(f"tool config rate_limiter: {exc}") from None
    if "redis_url" in spec:
        options["redis_url"] = spec.pop("redis_url")
    if backend == "redis" and "redis_url" not in options:
        raise ValueError("rate_limiter.backend redis needs rate_limiter.redis_url")
    if "redis_url" in options and backend != "redis":  # a shared cap meant, a per-process one given
        raise ValueError(f"rate_limiter.redis_url is used by backend redis only, and the backend is {backend!r}")
    redis_url = options.get("redis_url")
    if redis_url is not None and not (
        isinstance(redis_url, str)
        and redis_url.split("://", 1)[0] in ("redis", "rediss", "unix")
        and "://" in redis_url
    ):
        raise ValueError(f"rate_limiter.redis_url must be a redis://, rediss:// or unix:// URL, got {redis_url!r}")
    spec.setdefault("limit", rate_limit)
    named = "name" in spec
    spec.setdefault("name", f"{default_prefix}-{spec['limit']}")
    try:
        limiter_config = LimiterConfig.from_mapping(spec)
    except (TypeError, RuntimeError) as exc:  # LimiterConfigError; keep the tool's ValueError contract
        raise ValueError(f"tool config rate_limiter: {exc}") from None
    if not named:
        limiter_config = replace(limiter_config, name=_default_name(limiter_config))
    return backend, limiter_config, options


def _default_name(config: LimiterConfig) -> str:
    """``<prefix>-<limit>`` for a plain cap (what every tool with that ``rate_limit`` shares); with a rate, a lease or
    adaptive mode of its own, a suffix from those settings, so that two tools that set them differently get two
    limiters rather than a config clash on one name."""
    plain = LimiterConfig(name=config.name, limit=config.limit)
    if config == plain:
        return config.name
    settings = json.dumps(config.to_dict(), sort_keys=True).encode()
    return f"{config.name}-{hashlib.blake2b(settings, digest_size=4).hexdigest()}"
