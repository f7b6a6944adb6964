"""``DaytonaTool``: verl tool calls run in Daytona sandboxes through the real async SDK and its stateful interpreter.

Reads verl-recipe's ``CustomDaytonaSandboxTool`` keys (``rate_limit``, ``enable_global_rate_limit``,
``create_timeout``, ``default_timeout``, ``delete_timeout``, ``auto_stop_interval``, ``auto_delete_interval``,
``name_prefix``, ``language``, ``snapshot``, ``labels``, ``env_vars``, ``api_key``, ``jwt_token``, ``api_url``,
``target``, ``organization_id``), and ``max_timeout`` (the most a call may ask for; none). Two sandbox scopes
(``sandbox_scope``):

* ``call`` (the recipe's behaviour under verl's agent loop): a sandbox per tool call, deleted on ``release``.
* ``trajectory``: one sandbox per trajectory (the agent loop's ``request_id``), reused across its turns so the
  interpreter keeps its variables; deleted when the trajectory's ``AgentData`` is gone (finished, failed or
  cancelled) or on :meth:`DaytonaTool.aclose`.

No sandbox leaks: creation interrupted by a cancellation deletes what it made (found by its ``instance_id``
label), failed deletes are retried, and every sandbox carries ``auto_delete_interval`` as the last backstop.
Infrastructure faults (429, 5xx, connection errors, a run with no answer past twice its timeout plus 10 s) are
retried with jittered backoff honouring Daytona's ``Retry-After-<throttler>`` headers; after the budget the model
sees :data:`INFRA_FAULT_OBSERVATION`. A held sandbox found stopped or gone after a failed attempt is started or
replaced before the retry. A program that ends its own interpreter process is the program's outcome, shown once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from harness.daytona_states import errored, on_its_way_out
from harness.ratelimit import AsyncLimiter, Outcome
from harness.tools.config import (
    VERL_KEYS,
    arguments_problem,
    check_keys,
    flag,
    int_at_least,
    json_kind,
    max_timeout_seconds,
    model_timeout,
    optional_text,
    positive_int,
    text_mapping,
    timeout_seconds,
)
from harness.tools.observations import INFRA_FAULT_OBSERVATION, INVALID_ARGUMENTS_OBSERVATION
from harness.tools.permits import LimiterUnavailable, return_permit, take_permit
from harness.tools.retry import RetryPolicy, retry_after_seconds
from harness.tools.sandbox_fusion import DEFAULT_SCHEMA, limiter_settings, open_tool_limiter
from harness.urls import url_problem

#: What the model sees when its program ran past the timeout (interrupted: the context keeps its state, unless the
#: program ignored the interrupt and was killed).
TIMEOUT_OBSERVATION = "Execution timed out after {timeout:g} seconds."

#: Appended to what the program wrote when its interpreter process ended during the run (``os._exit``, a signal, an
#: out-of-memory kill): the program's outcome, as Sandbox Fusion reports a killed program as a runtime error.
WORKER_ENDED_OBSERVATION = (
    "\nThe interpreter's process ended during the run (the code exited it, or it was killed: out of memory, say); "
    "variables from earlier calls are gone."
)

#: Seconds past twice the applied timeout after which a run with no answer is the service's fault (Sandbox Fusion's
#: HTTP call has the same bound).
RUN_SLACK_S = 10.0

#: Put before a trajectory's observation when its sandbox had to be started again or replaced (the call's first
#: attempt failed on it): the interpreter's state the model counts on in that scope is gone.
REVIVED_NOTES = {
    "restarted": "(The sandbox had stopped and was started again: variables from earlier calls are gone.)\n",
    "replaced": "(The sandbox was gone and a new one was made: variables from earlier calls are gone.)\n",
}

#: How the SDK words the daemon's close when the interpreter's worker process ends (``CloseGoingAway``, reason
#: ``worker process ended``): ``DaytonaConnectionError("<reason> (close code <code>)")``, no status. Other 1001s
#: (``context shutdown``, a proxy going away) and closes without a reason are connection losses.
WORKER_ENDED_CLOSE = "worker process ended (close code 1001)"

#: The keys a :class:`DaytonaTool` config may have (any other is a typo, refused with a suggestion). ``num_workers``
#: is accepted, unused, so one config can serve both tools.
CONFIG_KEYS = VERL_KEYS | {
    "api_key",
    "jwt_token",
    "api_url",
    "target",
    "organization_id",
    "rate_limit",
    "enable_global_rate_limit",
    "rate_limiter",
    "num_workers",
    "create_timeout",
    "default_timeout",
    "max_timeout",
    "delete_timeout",
    "auto_stop_interval",
    "auto_delete_interval",
    "name_prefix",
    "language",
    "snapshot",
    "labels",
    "env_vars",
    "sandbox_scope",
    "normalize_code",
    "retry",
}

_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def normalize_code(code: str) -> str:
    """ReTool's convention: take the ```python block if any, and print the last line's value unless it prints."""
    match = _CODE_BLOCK.search(code)
    if match:
        code = match.group(1)
    lines = code.rstrip().split("\n")
    last = lines[-1] if lines else ""
    if last and not last.startswith((" ", "\t", "print")) and not last.rstrip().endswith(":"):
        lines[-1] = f"print({last})"
    return "\n".join(lines)


class _Infra(Exception):
    def __init__(
        self, reason: str, retry_after: float | None = None, retryable: bool = True, status: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.retryable = retryable
        self.status = status


class _WorkerEnded(Exception):
    """The program's interpreter process ended during the run: the program's outcome, not retried."""


class _Output:
    """What one run printed, gathered as its frames arrive: the SDK drops it when the socket closes abnormally."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.error: Any = None

    def on_stdout(self, message: Any) -> None:
        self.stdout.append(str(getattr(message, "output", "")))

    def on_stderr(self, message: Any) -> None:
        self.stderr.append(str(getattr(message, "output", "")))

    def on_error(self, error: Any) -> None:
        self.error = error


@dataclass
class _Slot:
    """A sandbox held for a tool instance or a trajectory (``sandbox`` is None if it could not be made)."""

    sandbox: Any
    fault: str | None = None
    #: Create attempts spent on a slot that has no sandbox (reported with its fault).
    attempts: int = 0
    #: Held while a dead sandbox is revived, so that concurrent calls of one trajectory revive it once.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DaytonaTool(BaseTool):
    """Runs code in Daytona sandboxes with the stateful interpreter; see the module docstring."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        check_keys(config, CONFIG_KEYS, "the DaytonaTool config")
        # Strings or nothing: the SDK refuses anything else, but only when the client or a sandbox is made, which
        # is every call.
        self.api_key = optional_text(config, "api_key", secret=True) or os.environ.get("DAYTONA_API_KEY")
        self.jwt_token = optional_text(config, "jwt_token", secret=True) or os.environ.get("DAYTONA_JWT_TOKEN")
        if not self.api_key and not self.jwt_token:
            raise ValueError("Daytona credentials missing: set api_key or jwt_token, or DAYTONA_API_KEY")
        self.api_url = optional_text(config, "api_url") or os.environ.get("DAYTONA_API_URL")
        if self.api_url is not None and url_problem(self.api_url) is not None:  # else every call fails, retried
            where = "api_url" if optional_text(config, "api_url") else "DAYTONA_API_URL"
            raise ValueError(f"{where} must be the http(s) URL of the Daytona API, got {self.api_url!r}")
        self.target = optional_text(config, "target")
        self.organization_id = optional_text(config, "organization_id")
        self.rate_limit = positive_int(config, "rate_limit", 32)
        if "num_workers" in config:  # accepted (configs shared with the Sandbox Fusion tool) but not used
            positive_int(config, "num_workers", 1)
        self.enable_global_rate_limit = flag(config, "enable_global_rate_limit", True)
        self.limiter_backend, self.limiter_config, self.limiter_options = limiter_settings(
            config, self.rate_limit, default_prefix="daytona"
        )
        self.create_timeout = timeout_seconds(config, "create_timeout", 60)
        self.default_timeout = timeout_seconds(config, "default_timeout", 30)
        self.max_timeout = max_timeout_seconds(config, self.default_timeout)
        self.delete_timeout = timeout_seconds(config, "delete_timeout", 60)
        # Minutes. auto_stop 0: never stopped for idleness; auto_delete 0: deleted as soon as it stops. Daytona's -1
        # ("never delete") is refused: auto-delete is the last backstop against leaked sandboxes.
        self.auto_stop_interval = int_at_least(config, "auto_stop_interval", 15, 0)
        self.auto_delete_interval = int_at_least(config, "auto_delete_interval", 30, 0)
        self.name_prefix = optional_text({"name_prefix": "verl-daytona", **config}, "name_prefix")
        if self.name_prefix is None:
            raise ValueError("tool config 'name_prefix' must be a non-empty string")
        self.language = str(config.get("language", "python"))
        if self.language != "python":
            raise ValueError(
                f"DaytonaTool runs python only (the interpreter is Python), got language={self.language!r}"
            )
        self.snapshot = optional_text(config, "snapshot")
        self.labels = text_mapping(config, "labels")
        self.env_vars = text_mapping(config, "env_vars")
        self.scope = str(config.get("sandbox_scope", "call"))
        if self.scope not in ("call", "trajectory"):
            raise ValueError(f"sandbox_scope must be 'call' or 'trajectory', got {self.scope!r}")
        self.normalize = flag(config, "normalize_code", False)
        self.retry = RetryPolicy.from_config(config)
        self._rng = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._limiter: AsyncLimiter | None = None
        self._calls: dict[str, _Slot] = {}  # instance id -> sandbox (call scope)
        self._trajectories: dict[str, _Slot] = {}  # request id -> sandbox (trajectory scope)
        self._creating: dict[str, asyncio.Future[_Slot]] = {}
        self._background: set[asyncio.Task[None]] = set()
        #: Sandbox ids whose deletion failed even after retries (auto-delete will remove them).
        self.undeleted: list[str] = []

    # ------------------------------------------------------------------ client

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        from daytona import AsyncDaytona, DaytonaConfig

        kwargs: dict[str, Any] = {"api_key": self.api_key, "jwt_token": self.jwt_token, "api_url": self.api_url}
        kwargs.update({"target": self.target, "organization_id": self.organization_id})
        # The in-flight cap on SDK calls: cluster-wide (ray, redis) or per tool object (local); see the
        # ``rate_limiter`` keys of the Sandbox Fusion tool, which this tool shares. The loop is recorded last: a
        # limiter that cannot open now is tried again by the next call, which would otherwise run uncapped.
        self._limiter = (
            open_tool_limiter(self.limiter_backend, self.limiter_config, self.limiter_options)
            if self.enable_global_rate_limit
            else None
        )
        self._client = AsyncDaytona(DaytonaConfig(**{k: v for k, v in kwargs.items() if v}))
        self._loop = loop

    async def _limited(self, make: Any, program: bool = False) -> Any:
        """Run one SDK call under the in-flight cap, mapping service failures to :class:`_Infra`. ``program``: the
        call runs the model's code, so the interpreter's own timeout (close code 4008) is the program's outcome."""
        from daytona import DaytonaError, DaytonaTimeoutError
        from daytona.common.errors import DaytonaConnectionTimeoutError

        limiter = self._limiter
        try:
            permit = await take_permit(limiter)
        except LimiterUnavailable as exc:
            raise _Infra(exc.reason, None, exc.retryable) from None
        outcome: Outcome = "error"
        try:
            result = await make()
            outcome = "ok"
            return result
        except DaytonaTimeoutError as exc:
            # The SDK raises this class for the program's timeout (no HTTP status) and also for a gateway 504 or 408
            # and for its own client-side request timeouts: only the first is the program's doing.
            status = getattr(exc, "status_code", None)
            if program and status is None and not isinstance(exc, DaytonaConnectionTimeoutError):
                outcome = "ok"
                raise
            raise _Infra(f"HTTP {status}" if status is not None else "timeout", None, True) from None
        except DaytonaError as exc:
            status = getattr(exc, "status_code", None)
            if program and status is None and WORKER_ENDED_CLOSE in str(exc):
                outcome = "ok"  # the service did its part
                raise _WorkerEnded() from None
            raw_headers = getattr(exc, "headers", None)
            cause = exc.__cause__
            if status is None and cause is not None:
                # A refused WebSocket handshake (the interpreter) comes wrapped without its status and headers: the
                # SDK keeps aiohttp's WSServerHandshakeError as the cause, which has both. Its 429 and 5xx are the
                # service's answers; any other refusal is treated like a dropped connection (retried).
                handshake = getattr(cause, "status", None)
                if handshake == 429 or (isinstance(handshake, int) and handshake >= 500):
                    status = handshake
                raw_headers = raw_headers or getattr(cause, "headers", None)
            outcome = "throttled" if status == 429 else "error"
            headers = {str(k): str(v) for k, v in (raw_headers or {}).items()}
            retryable = status is None or status in self.retry.retry_statuses
            reason = f"HTTP {status}" if status is not None else type(exc).__name__
            if "entered error state" in str(exc):  # the SDK's words carry the sandbox's errorReason: keep them
                reason = str(exc)[:300]
            raise _Infra(reason, retry_after_seconds(headers), retryable, status) from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise _Infra(f"{type(exc).__name__}: {exc}"[:200]) from None
        finally:
            await return_permit(limiter, permit, outcome)  # adaptive limiters shrink on 429s

    async def _with_retries(
        self,
        make: Any,
        attempts: list[int] | None = None,
        program: bool = False,
        between: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """``make()`` under the limiter, retried per the retry policy; ``attempts`` (a one-item list) gets the count;
        ``between()`` runs after a failed attempt that will be retried."""
        attempt = 0
        while True:
            attempt += 1
            if attempts is not None:
                attempts[:] = [attempt]
            try:
                return await self._limited(make, program)
            except _Infra as exc:
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    raise
                if exc.retry_after is not None and exc.retry_after > self.retry.max_retry_after:
                    raise
                if between is not None:
                    await between()
                delay = self.retry.delay(attempt, self._rng, exc.retry_after)
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------ sandboxes

    async def _create_sandbox(self, owner: str) -> _Slot:
        from daytona import CreateSandboxFromSnapshotParams, DaytonaError

        labels = {**self.labels, "framework": "verl", "backend": "daytona", "tool": self.name, "instance_id": owner}
        attempts = [0]
        maybe_created = [False]
        # One name for every attempt (a retry is the same request), unless an errored sandbox that could not be
        # deleted still holds it.
        name = [f"{self.name_prefix}-{owner[:8]}-{uuid4().hex[:6]}"]

        async def create_or_adopt() -> Any:
            # A failed attempt may still have created the sandbox (its answer lost to a reset, a timeout, a gateway
            # 502/504). Creating blindly again would leak it: look before re-creating.
            if maybe_created[0]:
                existing = []
                for found in await self._owned(owner):
                    if on_its_way_out(found):
                        continue
                    if errored(found):  # it will never start: deleted now (the sweep retries a failed delete)
                        try:
                            await found.delete(timeout=self.delete_timeout)
                        except DaytonaError:
                            if getattr(found, "name", None) == name[0]:
                                name[0] = f"{self.name_prefix}-{owner[:8]}-{uuid4().hex[:6]}"
                        continue
                    existing.append(found)
                if existing:
                    # The earlier attempt's sandbox may still be creating (its create timed out on our side).
                    if str(getattr(existing[0].state, "value", existing[0].state)) != "started":
                        await existing[0].wait_for_sandbox_start(timeout=self.create_timeout)
                    return existing[0]
            params = CreateSandboxFromSnapshotParams(
                name=name[0],
                language="python",
                snapshot=self.snapshot,
                env_vars=self.env_vars or None,
                labels=labels,
                auto_stop_interval=self.auto_stop_interval,
                auto_delete_interval=self.auto_delete_interval,
            )
            try:
                return await self._client.create(params, timeout=self.create_timeout)
            except DaytonaError as exc:
                status = getattr(exc, "status_code", None)
                maybe_created[0] = maybe_created[0] or status is None or status in (500, 502, 504)
                raise
            except (OSError, asyncio.TimeoutError):
                maybe_created[0] = True
                raise

        try:
            sandbox = await self._with_retries(create_or_adopt, attempts)
        except _Infra as exc:
            await self._sweep(owner)  # an attempt may have created one before failing
            return _Slot(None, exc.reason, attempts[0])
        except asyncio.CancelledError:
            self._spawn(self._sweep(owner))
            raise
        if maybe_created[0]:
            await self._sweep(owner, keep=str(sandbox.id))  # any other sandbox of this owner is an orphan
        return _Slot(sandbox)

    async def _owned(self, owner: str) -> list[Any]:
        """Sandboxes labelled as created for ``owner`` (an instance or trajectory id)."""
        from daytona import ListSandboxesQuery

        return [sandbox async for sandbox in self._client.list(ListSandboxesQuery(labels={"instance_id": owner}))]

    async def _sweep(self, owner: str, keep: str | None = None) -> None:
        """Delete sandboxes labelled with ``owner`` that we hold no handle to (interrupted or failed creates);
        ``keep`` is the id of the one we do hold."""
        try:
            found = await self._limited(lambda: self._owned(owner))
        except Exception:  # best effort; auto-delete is the backstop
            return
        for sandbox in found:
            if on_its_way_out(sandbox):
                continue  # deleted already (a listing shows it until the runner has torn it down)
            if keep is None or str(sandbox.id) != keep:
                await self._delete(sandbox)

    async def _delete(self, sandbox: Any) -> None:
        """Delete ``sandbox``, retried per the policy; a 409 (the API refuses to delete a sandbox between states, one
        still creating after a create that timed out, say) is waited out until ``delete_timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.delete_timeout
        waits = 0
        while True:
            try:
                await self._with_retries(lambda: sandbox.delete(timeout=self.delete_timeout))
                return
            except _Infra as exc:
                if exc.status == 404:  # gone already (auto-delete, say): nothing leaked, as the SDK's wait reads it
                    return
                left = deadline - loop.time()
                if exc.status == 409 and left > 0:
                    waits += 1
                    await asyncio.sleep(min(self.retry.delay(waits, self._rng), left))
                    continue
                self.undeleted.append(str(getattr(sandbox, "id", "?")))
                return
            except Exception:
                self.undeleted.append(str(getattr(sandbox, "id", "?")))
                return

    async def _revive(self, slot: _Slot, owner: str, failed: Any) -> str | None:
        """After a failed run in ``failed`` (``slot``'s sandbox): if it stopped (auto-stop, say) start it; if it is gone
        (404, being destroyed) or errored, put a fresh sandbox for ``owner`` in the slot. Otherwise, or if that fails,
        nothing: the retry decides. Returns what was done (``restarted``, ``replaced``); either way the interpreter's
        state is lost."""
        async with slot.lock:
            if slot.sandbox is not failed:
                return None  # another call of this trajectory has revived it
            try:
                await self._limited(failed.refresh_data)
                gone = on_its_way_out(failed)
            except _Infra as exc:
                if exc.status != 404:
                    return None  # its state is unknown: the next attempt will tell
                gone = True
            if not gone and not errored(failed):
                if str(getattr(failed.state, "value", failed.state)) not in ("stopped", "archived"):
                    return None  # started (the failure was elsewhere) or between states
                try:
                    await self._limited(lambda: failed.start(timeout=self.create_timeout))
                except _Infra:
                    return None
                return "restarted"
            if not gone:
                await self._delete(failed)
            fresh = await self._create_sandbox(owner)
            if fresh.sandbox is None:
                return None
            slot.sandbox = fresh.sandbox
            return "replaced"

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _trajectory_slot(self, request_id: str, agent_data: Any) -> _Slot:
        slot = self._trajectories.get(request_id)
        if slot is not None:
            return slot
        pending = self._creating.get(request_id)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._creating[request_id] = pending
            try:
                slot = await self._create_sandbox(request_id)
            except BaseException as exc:
                self._creating.pop(request_id, None)
                pending.set_exception(exc)
                pending.exception()  # mark retrieved
                raise
            self._creating.pop(request_id, None)
            pending.set_result(slot)  # calls waiting on this create share its outcome, a failure included
            if slot.sandbox is None:
                return slot  # not kept: the trajectory's next call tries again
            self._trajectories[request_id] = slot
            if agent_data is not None:
                loop = asyncio.get_running_loop()
                # verl's AgentData supports weak references; an object that does not leaves the sandbox to
                # aclose() and auto-delete.
                with contextlib.suppress(TypeError):
                    weakref.finalize(agent_data, self._trajectory_ended, loop, request_id)
            return slot
        return await asyncio.shield(pending)

    def _trajectory_ended(self, loop: asyncio.AbstractEventLoop, request_id: str) -> None:
        """Called when the trajectory's AgentData is garbage: schedule its sandbox's deletion on our loop."""
        if loop.is_closed():
            return

        def schedule() -> None:
            slot = self._trajectories.pop(request_id, None)
            if slot is not None and slot.sandbox is not None:
                self._spawn(self._delete(slot.sandbox))

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(schedule)

    # ------------------------------------------------------------------ BaseTool

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        if self.scope == "call":
            self._bind_loop()
            self._calls[instance_id] = await self._create_sandbox(instance_id)
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        from daytona import DaytonaTimeoutError

        problem = arguments_problem(parameters)
        if problem is None:
            envs, problem = model_envs(parameters.get("envs"))
        if problem is not None:  # the model's mistake: said once, nothing retried, no sandbox touched
            text = INVALID_ARGUMENTS_OBSERVATION.format(tool=self.name, problem=problem)
            refused = {"status": "invalid_arguments", "infra_fault": None, "sandbox_id": None, "attempts": 0}
            return ToolResponse(text=text), 0.0, refused
        self._bind_loop()
        code = parameters.get("code", "")
        code = code if isinstance(code, str) else str(code)
        if self.normalize:
            code = normalize_code(code)
        # Not a finite positive number ("inf", "nan", -5, "soon"): the default, never an exception out of execute.
        timeout = model_timeout(parameters.get("timeout", self.default_timeout), self.default_timeout, self.max_timeout)
        applied = max(1, round(timeout))  # the interpreter takes whole seconds
        owner = instance_id
        if self.scope == "trajectory":
            agent_data = kwargs.get("agent_data")
            owner = str(getattr(agent_data, "request_id", None) or instance_id)
            slot = await self._trajectory_slot(owner, agent_data)
        else:
            slot = self._calls.get(instance_id) or _Slot(None, "no sandbox for this instance (create was not called)")
        if slot.sandbox is None:
            return _infra(slot.fault or "sandbox unavailable", slot.attempts)
        sandbox = slot.sandbox
        metrics: dict[str, Any] = {"sandbox_id": sandbox.id, "infra_fault": None}
        attempts = [0]
        output = _Output()

        async def revive() -> None:
            revived = await self._revive(slot, owner, sandbox)
            if revived is not None:
                metrics["sandbox_revived"] = revived

        # The SDK sets no deadline of its own on the interpreter's socket: a service that never answers would hold
        # the call for ever. Past the program's timeout and the daemon's grace, with slack, as Sandbox Fusion's
        # HTTP call is bounded, the silence is the service's fault.
        deadline = 2 * applied + RUN_SLACK_S

        async def run() -> Any:
            nonlocal output, sandbox
            output = _Output()  # this attempt's frames only
            sandbox = slot.sandbox  # a revival may have replaced it
            metrics["sandbox_id"] = sandbox.id
            running = sandbox.code_interpreter.run_code(
                code,
                timeout=applied,
                envs=envs,
                on_stdout=output.on_stdout,
                on_stderr=output.on_stderr,
                on_error=output.on_error,
            )
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                return await asyncio.wait_for(running, deadline)
            except asyncio.TimeoutError as exc:
                if loop.time() - started < deadline:  # raised inside the SDK (its HTTP client's), not our deadline
                    said = f": {exc}" if str(exc) else ""
                    raise _Infra(f"the client timed out talking to the interpreter{said}") from None
                raise _Infra(f"no answer from the interpreter within {deadline:g} s") from None

        try:
            result = await self._with_retries(run, attempts, program=True, between=revive)
        except DaytonaTimeoutError:
            metrics.update(status="timeout", had_error=False, attempts=attempts[0])
            text = TIMEOUT_OBSERVATION.format(timeout=applied)
        except _WorkerEnded:
            metrics.update(attempts=attempts[0], worker_ended=True)
            stdout, stderr = "".join(output.stdout), "".join(output.stderr)
            text = _program_text(stdout, stderr, output.error, metrics) + WORKER_ENDED_OBSERVATION
            metrics.update(status="runtime_error", had_error=True)
        except _Infra as exc:
            return _infra(exc.reason, attempts[0], sandbox.id, metrics.get("sandbox_revived"))
        else:
            metrics["attempts"] = attempts[0]
            text = _program_text(result.stdout or "", result.stderr or "", result.error, metrics)
        revived = metrics.get("sandbox_revived")
        if revived is not None and self.scope == "trajectory":  # the model counts on its variables: say they are gone
            text = REVIVED_NOTES[revived] + text
        return ToolResponse(text=text), 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        slot = self._calls.pop(instance_id, None)
        if slot is not None and slot.sandbox is not None:
            await self._delete(slot.sandbox)

    async def aclose(self) -> None:
        """Delete every sandbox still held (any scope), wait for pending deletions, close the client."""
        if self._client is None:
            return
        slots = list(self._calls.values()) + list(self._trajectories.values())
        self._calls.clear()
        self._trajectories.clear()
        await asyncio.gather(*(self._delete(s.sandbox) for s in slots if s.sandbox is not None))
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self._client.close()
        if self._limiter is not None:
            await self._limiter.aclose()
        self._client = None
        self._loop = None


def _program_text(stdout: str, stderr: str, error: Any, metrics: dict[str, Any]) -> str:
    """What the model sees of a run that ended (as the recipe's tool shows it), and its metrics."""
    text = stdout + stderr
    if error is not None:
        text += f"\n{error.name}: {error.value}\n{error.traceback or ''}"
    metrics.update(
        status="runtime_error" if error is not None else "success",
        stdout_chars=len(stdout),
        stderr_chars=len(stderr),
        had_error=error is not None,
        error_name=error.name if error is not None else None,
    )
    return text


def model_envs(value: object) -> tuple[dict[str, str] | None, str | None]:
    """``(envs, None)`` from a call's ``envs`` (absent or null: none), or ``(None, problem)``: the interpreter takes
    names mapped to strings only, and anything else would fail every attempt as if the service had."""
    if value is None:
        return None, None
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return value, None
    if isinstance(value, dict):
        bad = next(k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str))
        return None, f"envs values must be strings, got {json_kind(value[bad])} for {bad!r}"
    return None, f"envs must be an object mapping names to strings, got {json_kind(value)}"


def _infra(
    reason: str, attempts: int, sandbox_id: str | None = None, revived: str | None = None
) -> tuple[ToolResponse, float, dict[str, Any]]:
    metrics: dict[str, Any] = {"status": "infra_fault", "infra_fault": reason, "sandbox_id": sandbox_id}
    metrics["attempts"] = attempts
    if revived is not None:
        metrics["sandbox_revived"] = revived
    return ToolResponse(text=INFRA_FAULT_OBSERVATION.format(reason=reason)), 0.0, metrics
