"""A TRL reward function that runs each completion against its task's tests in a code sandbox.

Reward of one completion (as in Daytona's TRL example): -1 for a banned pattern, an empty body, a timeout, an error
raised by the program or the service, empty stdout or output that is not the harness's JSON; 0 when the task has no
tests; else the fraction of tests whose answer equals the reference's.

Backends: :class:`DaytonaPool` (sandboxes created up front through the real async Daytona SDK, one completion per
sandbox at a time) and :class:`FusionBackend` (Sandbox Fusion's ``POST /run_code``). :class:`SandboxReward` wraps
either as the synchronous ``reward(prompts, completions, **kwargs) -> list[float]`` that TRL's trainers call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import aiohttp

from harness.daytona_states import on_its_way_out
from harness.rewards.tasks import Task, get_task

logger = logging.getLogger(__name__)

#: Reward for anything that is not a clean run of the harness.
FAILED = -1.0

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass
class ExecOutcome:
    """What a backend saw when it ran one program: its stdout, or why it did not finish cleanly."""

    stdout: str = ""
    error: str | None = None  # the program raised, the service failed, or it timed out
    timed_out: bool = False


class Backend(Protocol):
    """Something that runs a Python program with a time limit."""

    async def start(self) -> None: ...

    async def run(self, program: str, timeout: float) -> ExecOutcome: ...

    async def close(self) -> None: ...


def extract_code(completion: Any) -> str:
    """The code of a completion: a string or TRL's conversational list of messages; a fenced block if there is one."""
    if isinstance(completion, list):
        completion = "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    text = str(completion)
    blocks = _FENCE.findall(text)
    return (blocks[-1] if blocks else text).strip()


#: The checker the sandbox program runs: a function, so every name it uses is a local bound before the completion
#: runs. The completion runs in a namespace of its own (``exec`` with separate globals) and cannot rebind the
#: reference, the expected answers, ``bool``, ``json`` or the stream the result line goes to; answers are compared
#: only as exact built-in values, so an object whose ``__eq__`` always says yes does not pass.
_CHECKER = """\
def _sandbox_check(_function, _reference_source, _tests, _source):
    import sys
    _type, _len, _zip, _exec, _compile, _eval = type, len, zip, exec, compile, eval
    _int, _float, _bool, _list, _tuple, _dict, _str, _bytes = int, float, bool, list, tuple, dict, str, bytes
    _out = sys.stdout
    _reference_space = {"__name__": "_reference"}
    _exec(_compile(_reference_source, "<reference>", "exec"), _reference_space)
    _reference = _reference_space[_function]
    _expected = [_reference(*_eval(_args)) for _args in _tests]
    _calls = [_eval(_args) for _args in _tests]  # fresh arguments: the reference may have changed its own

    def _number(t):
        return t is _int or t is _float or t is _bool

    def _same(a, b):
        ta, tb = _type(a), _type(b)
        if _number(ta) and _number(tb):
            return True if a == b else False
        if ta is not tb:
            return False
        if ta is _list or ta is _tuple:
            if _len(a) != _len(b):
                return False
            for x, y in _zip(a, b):
                if not _same(x, y):
                    return False
            return True
        if ta is _dict:
            if _len(a) != _len(b):
                return False
            for k in b:
                if k not in a or not _same(a[k], b[k]):
                    return False
            return True
        if ta is _str or ta is _bytes or a is None:
            return True if a == b else False
        return False

    _space = {"__name__": "__main__"}
    try:
        _exec(_compile(_source, "<completion>", "exec"), _space)
        _fn = _space[_function]
        _results = [_same(_fn(*_args), _want) for _args, _want in _zip(_calls, _expected)]
    except SystemExit:
        raise RuntimeError("the completion exited before its answers were checked") from None
    _out.write('{"results": [' + ", ".join("true" if r else "false" for r in _results) + "]}\\n")
    _out.flush()
"""


def build_program(task: Task, code: str) -> str:
    """The sandbox program: the checker, then one call of it with the task and the completion as literals.

    The reference's answers are worked out before the completion runs, and the completion runs in its own namespace,
    so redefining the reference's name, ``bool`` or anything else the checker uses changes nothing. The text depends
    only on the task and the code (the journal's digests are compared with it)."""
    tests = [repr(t) for t in task.tests]  # literals, evaluated afresh for each call
    return f"{_CHECKER}\n_sandbox_check({task.function!r}, {task.reference!r}, {tests!r}, {code!r})\n"


def score_output(outcome: ExecOutcome) -> float:
    """Reward from what the harness printed (its last line), or -1 when the run failed."""
    if outcome.error is not None or outcome.timed_out or not outcome.stdout.strip():
        return FAILED
    try:
        results = json.loads(outcome.stdout.strip().splitlines()[-1])["results"]
    except (ValueError, KeyError, TypeError):
        return FAILED
    if not isinstance(results, list):
        return FAILED
    if not results:
        return 0.0
    return sum(1 for r in results if r is True) / len(results)


#: The longest wait a ``Retry-After`` may ask of a retry (seconds): a larger one is waited this long, not longer.
MAX_RETRY_AFTER = 30.0


def retry_after(headers: Any) -> float | None:
    """The wait an answer asked for, in seconds: ``Retry-After`` or Daytona's ``Retry-After-{throttler}`` (the
    largest), capped at :data:`MAX_RETRY_AFTER`; None when it named none (an HTTP date is not read)."""
    waits: list[float] = []
    for name, value in (headers or {}).items():
        if str(name).lower() == "retry-after" or str(name).lower().startswith("retry-after-"):
            with contextlib.suppress(ValueError):
                seconds = float(str(value).strip())
                if math.isfinite(seconds):
                    waits.append(max(0.0, seconds))
    return min(max(waits), MAX_RETRY_AFTER) if waits else None


#: How a completion's scoring ended: passed the pre-check and ran cleanly (``ran``), was refused by the pre-check,
#: hit its time limit, raised (or printed no result), or failed outside the program after every try.
OUTCOME_KINDS = ("ran", "not_run", "timeout", "program_error", "infra_error")


def outcome_kind(outcome: ExecOutcome) -> str:
    """The kind of ``outcome`` (one of :data:`OUTCOME_KINDS` but ``not_run``)."""
    if outcome.timed_out:
        return "timeout"
    if outcome.error is not None:
        return "infra_error" if outcome.error.startswith(("infra:", "not run")) else "program_error"
    return "ran"


def precheck(task: Task, code: str) -> bool:
    """Whether the completion may run at all: a body, and none of the task's banned patterns."""
    return bool(code.strip()) and not any(p in code for p in task.banned)


# --------------------------------------------------------------------------------------------------- Daytona


@dataclass
class PoolStats:
    """What the pool did, for tests and logs."""

    created: int = 0
    create_failures: int = 0
    not_created: int = 0  # sandboxes of the up-front pool that every try failed to create: the pool fell short
    replaced: int = 0
    deleted: int = 0
    executions: int = 0
    infra_failures: int = 0
    timeouts: int = 0
    orphans_deleted: int = 0  # made by a creation whose answer was lost, found by label and deleted
    throttled: int = 0  # runs refused with a 429: retried after the wait asked for, on a sandbox kept in service
    gave_up: int = 0  # completions scored -1 because every run failed outside the program
    create_waits: int = 0  # refused creations whose next try waited the Retry-After the refusal named


def whole_seconds(timeout: float) -> int:
    """``timeout`` as Daytona's ``run_code`` takes it, whole seconds; a ValueError for a fraction, which Daytona
    would round (0.5 s lets a 0.75 s program pass there, while Sandbox Fusion stops it)."""
    if timeout != int(timeout) or timeout < 1:
        raise ValueError(f"Daytona's run_code takes whole seconds: the timeout must be 1, 2, 3 ..., got {timeout!r}")
    return int(timeout)


#: What a pool id may be: a label value Daytona keeps as given.
POOL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class PoolExhaustedError(RuntimeError):
    """No sandbox is left (every creation failed)."""


#: Put in the free queue when the last sandbox in service went and none could replace it: it wakes every completion
#: waiting for a sandbox (each puts it back for the next and raises :class:`PoolExhaustedError`).
_EXHAUSTED = object()


class DaytonaPool:
    """``size`` Daytona sandboxes created concurrently up front; each runs one completion at a time.

    A sandbox whose run timed out, or whose run failed for a reason outside the program (connection, HTTP status),
    is deleted and replaced by a new one. A completion whose run failed outside the program is retried on another
    sandbox, up to ``exec_attempts`` runs in all; a program timeout is not retried (it scores -1). A 429 is the
    service throttling, not a broken sandbox: the sandbox is kept and the retry waits the ``Retry-After`` first.
    A refused creation that names a wait (Daytona's ``Retry-After-sandbox-create``) is tried again after it.

    Each completion runs in a fresh interpreter context, deleted afterwards: the default context keeps the
    interpreter's state between runs (builtins, ``sys.modules``), so a completion could otherwise borrow what an
    earlier one left in that sandbox. ``fresh_context=False`` runs in the default context, as Daytona's TRL example
    does, saving two requests per completion.

    Every sandbox carries the label ``pool=<id>`` unique to this pool. A creation whose answer was lost (a dropped
    connection, a cut body) may still have made a sandbox; after the up-front creation and on close, the pool lists
    its label and deletes every sandbox it holds no handle to, so none is left behind.

    ``pool_id`` names that id instead of a random one: a fault plan decides by the request's body, which holds the
    label, so a fixed id makes a seeded plan hit the same creations each run. It must be unique among the pools on
    the service (the sweep deletes whatever carries it).
    """

    def __init__(
        self,
        size: int,
        config: Any = None,
        *,
        labels: dict[str, str] | None = None,
        create_attempts: int = 3,
        exec_attempts: int = 3,
        delete_attempts: int = 3,
        create_timeout: float = 60.0,
        grace: float = 10.0,
        fresh_context: bool = True,
        delete_timeout: float = 30.0,
        close_timeout: float = 120.0,
        pool_id: str | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        if pool_id is not None and not (isinstance(pool_id, str) and POOL_ID.fullmatch(pool_id)):
            raise ValueError(
                f"pool_id must be 1 to 63 letters, digits, '-', '_' or '.', starting with a letter or digit,"
                f" got {pool_id!r}"
            )
        self.size = size
        self.config = config
        self.pool_id = uuid.uuid4().hex[:12] if pool_id is None else pool_id
        self.labels = {**(labels or {"purpose": "trl-reward"}), "pool": self.pool_id}
        self.create_attempts = create_attempts
        self.exec_attempts = exec_attempts
        self.delete_attempts = delete_attempts
        self.create_timeout = create_timeout
        self.grace = grace  # client-side margin over the program's timeout: the SDK has no receive timeout
        self.fresh_context = fresh_context
        #: Bound on one delete call: the SDK's own ``timeout`` does not bound its retries (6 tries of 10 s each).
        self.delete_timeout = delete_timeout
        #: Bound on the whole of :meth:`close`: what is not deleted by then is reported in :attr:`leaked`.
        self.close_timeout = close_timeout
        #: Ids of the sandboxes :meth:`close` could not delete (in time, or before it was cancelled).
        self.leaked: list[str] = []
        self.stats = PoolStats()
        self._daytona: Any = None
        self._free: asyncio.Queue[Any] | None = None
        #: The sandboxes in service: free in the queue or running a completion.
        self._live: dict[str, Any] = {}
        #: Sandboxes taken out of service whose delete failed: no longer handed out, tried again on close.
        self._undeleted: dict[str, Any] = {}
        #: Why the last sandbox creation failed, for the error when none could be created.
        self._create_error = ""
        #: Sandboxes known to be gone (deleted, or a 404 at delete), and those close() set out to delete.
        self._gone: set[str] = set()
        self._to_close: set[str] = set()

    async def start(self) -> None:
        from daytona import AsyncDaytona

        self._daytona = AsyncDaytona(self.config) if self.config is not None else AsyncDaytona()
        self._free = asyncio.Queue()
        boxes = await asyncio.gather(*(self._create() for _ in range(self.size)))
        for box in boxes:
            if box is not None:
                self._free.put_nowait(box)
        self.stats.not_created = sum(box is None for box in boxes)
        if self.stats.create_failures:
            await self._sweep()
        if not self._live:
            raise PoolExhaustedError(
                f"none of the {self.size} sandboxes could be created (last error: {self._create_error})"
            )

    @property
    def last_create_error(self) -> str:
        """Why the last sandbox creation that failed did ("" when none did)."""
        return self._create_error

    async def _create(self) -> Any:
        """A new sandbox, trying ``create_attempts`` times; None when every try failed."""
        from daytona import CreateSandboxFromSnapshotParams, DaytonaError

        for attempt in range(self.create_attempts):
            try:
                box = await self._daytona.create(
                    CreateSandboxFromSnapshotParams(labels=dict(self.labels)), timeout=self.create_timeout
                )
            except (DaytonaError, OSError, asyncio.TimeoutError) as exc:
                self.stats.create_failures += 1
                self._create_error = f"{type(exc).__name__}: {exc}"[:300]
                # A 429 from the create throttler (or a 503) names its wait: the next try waits it out (at most
                # MAX_RETRY_AFTER) rather than spend itself on a window that is still closed.
                wait = retry_after(getattr(exc, "headers", None)) if isinstance(exc, DaytonaError) else None
                if wait and attempt + 1 < self.create_attempts:
                    self.stats.create_waits += 1
                    await asyncio.sleep(wait)
                continue
            self._live[box.id] = box
            self.stats.created += 1
            return box
        return None

    async def _sweep(self, *, closing: bool = False) -> None:
        """Delete the sandboxes labelled as this pool's that it holds no handle to (best effort); when ``closing``,
        every one still listed, so a delete whose answer was lost or that failed gets one more try."""
        from daytona import ListSandboxesQuery

        try:
            found = [b async for b in self._daytona.list(ListSandboxesQuery(labels={"pool": self.pool_id}))]
        except Exception:  # listing failed: nothing more to do here
            return
        for box in found:
            if on_its_way_out(box):
                continue  # deleted already (a listing shows it until the runner has torn it down)
            held = box.id in self._live or box.id in self._undeleted
            if held and not closing:
                continue
            if closing:
                self._to_close.add(box.id)
            before = self.stats.deleted
            await self._delete(box)
            if not held:
                self.stats.orphans_deleted += self.stats.deleted - before

    async def _delete(self, box: Any) -> None:
        """Delete ``box``, ``delete_attempts`` tries; a 404 means it is gone already (an earlier answer was lost).

        A 409 is the API refusing to delete a sandbox between states (one still creating after its create timed out
        on our side): it is waited out, up to ``create_timeout``, without spending a try."""
        from daytona import DaytonaError, DaytonaNotFoundError

        self._live.pop(box.id, None)
        self._undeleted.pop(box.id, None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.create_timeout
        pause = 0.05
        tries = 0
        while tries < self.delete_attempts:
            try:
                await asyncio.wait_for(box.delete(), self.delete_timeout)
            except DaytonaNotFoundError:
                pass
            except DaytonaError as exc:
                if getattr(exc, "status_code", None) == 409 and loop.time() < deadline:
                    await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
                    pause = min(pause * 2, 1.0)
                    continue
                tries += 1
                continue
            except Exception:  # a connection error, or no answer within delete_timeout
                tries += 1
                continue
            self.stats.deleted += 1
            self._gone.add(box.id)
            return
        self._undeleted[box.id] = box  # out of service (never handed out again); close() tries again

    async def _replace(self, box: Any) -> None:
        assert self._free is not None
        await self._delete(box)
        new = await self._create()
        self.stats.replaced += 1
        if new is not None:
            self._free.put_nowait(new)
        elif not self._live:  # no sandbox will ever come back to the queue: wake whoever waits for one
            self._free.put_nowait(_EXHAUSTED)

    async def _acquire(self) -> Any:
        assert self._free is not None
        while True:
            if not self._live and self._free.empty():
                raise PoolExhaustedError("every sandbox failed and none could be replaced")
            box = await self._free.get()
            if box is not _EXHAUSTED:
                return box
            if self._live:  # a replacement made after the marker went in (two were under way): it is stale
                continue
            self._free.put_nowait(box)  # for the next waiter
            raise PoolExhaustedError("every sandbox failed and none could be replaced")

    async def run(self, program: str, timeout: float) -> ExecOutcome:
        from daytona import DaytonaConnectionTimeoutError, DaytonaError, DaytonaTimeoutError

        assert self._free is not None
        last = ExecOutcome(error="not run")
        for attempt in range(self.exec_attempts):
            box = await self._acquire()
            self.stats.executions += 1
            dirty: list[bool] = []  # set when the run's context could not be deleted
            try:
                result = await asyncio.wait_for(self._run_in(box, program, timeout, dirty), timeout + self.grace)
            except DaytonaTimeoutError as exc:
                if isinstance(exc, DaytonaConnectionTimeoutError):
                    last = ExecOutcome(error=f"infra: {exc}")
                    self.stats.infra_failures += 1
                    await self._replace(box)
                    continue
                self.stats.timeouts += 1
                await self._replace(box)
                return ExecOutcome(error="timeout", timed_out=True)
            except DaytonaError as exc:
                last = ExecOutcome(error=f"infra: {type(exc).__name__}: {exc}")
                self.stats.infra_failures += 1
                if getattr(exc, "status_code", None) != 429:
                    await self._replace(box)
                    continue
                # Throttled: the service is busy, not the sandbox. Keep it (a new one would spend create quota on
                # a throttled service) and wait as asked before the next try.
                self.stats.throttled += 1
                if dirty:
                    await self._replace(box)
                else:
                    self._free.put_nowait(box)
                if attempt + 1 < self.exec_attempts:
                    await asyncio.sleep(retry_after(getattr(exc, "headers", None)) or 0.0)
                continue
            except (OSError, asyncio.TimeoutError) as exc:
                last = ExecOutcome(error=f"infra: {type(exc).__name__}: {exc}")
                self.stats.infra_failures += 1
                await self._replace(box)
                continue
            except BaseException:
                self._free.put_nowait(box)  # cancelled or interrupted: the sandbox is still ours to delete
                raise
            if dirty:  # the result stands (the program ran); the sandbox with a stray context does not
                await self._replace(box)
            else:
                self._free.put_nowait(box)
            error = None if result.error is None else f"{result.error.name}: {result.error.value}"
            return ExecOutcome(stdout=result.stdout or "", error=error)
        self.stats.gave_up += 1
        return last

    async def _run_in(self, box: Any, program: str, timeout: float, dirty: list[bool]) -> Any:
        """Run ``program`` in ``box``: in a context of its own (created, then deleted) unless ``fresh_context`` is
        off. A failure to delete that context marks ``dirty`` rather than raising, so the completion is not run
        again."""
        from daytona import DaytonaError

        interpreter = box.code_interpreter
        seconds = whole_seconds(timeout)
        if not self.fresh_context:
            return await interpreter.run_code(program, timeout=seconds)
        context = await interpreter.create_context()
        try:
            result = await interpreter.run_code(program, context=context, timeout=seconds)
        except DaytonaError as exc:
            if getattr(exc, "status_code", None) == 429:  # the sandbox stays in service: its context must go
                await self._delete_context(interpreter, context, dirty)
            raise
        await self._delete_context(interpreter, context, dirty)
        return result

    @staticmethod
    async def _delete_context(interpreter: Any, context: Any, dirty: list[bool]) -> None:
        try:
            await interpreter.delete_context(context)
        except Exception:
            dirty.append(True)

    async def close(self) -> None:
        """Delete every sandbox this pool created and still holds, then close the client.

        The whole takes at most ``close_timeout`` (each delete at most ``delete_timeout`` a try) and may be cancelled;
        the sandboxes it could not delete either way are listed in :attr:`leaked` rather than waited for."""
        boxes = [*self._live.values(), *self._undeleted.values()]
        self._to_close.update(b.id for b in boxes)
        try:
            await asyncio.wait_for(self._delete_all(boxes), self.close_timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self.leaked = sorted(self._to_close - self._gone)
        if self._daytona is not None:
            daytona, self._daytona = self._daytona, None
            with contextlib.suppress(Exception):  # the client's own cleanup: no sandbox depends on it
                await asyncio.wait_for(daytona.close(), self.delete_timeout)

    async def _delete_all(self, boxes: list[Any]) -> None:
        await asyncio.gather(*(self._delete(b) for b in boxes), return_exceptions=True)
        if self._daytona is not None:
            await self._sweep(closing=True)  # one list request: anything left with our label goes now


# --------------------------------------------------------------------------------------------------- Fusion


@dataclass
class FusionBackend:
    """Sandbox Fusion: one ``POST /run_code`` per completion, at most ``concurrency`` at once.

    A request that fails outside the program (connection error, HTTP 5xx or 429, an answer without a run result such
    as a SandboxError body) is retried, ``attempts`` in all; after the wait a ``Retry-After`` asks for, if any.
    """

    url: str  # the full /run_code URL
    concurrency: int = 8
    attempts: int = 3
    grace: float = 10.0
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _limit: asyncio.Semaphore | None = field(default=None, init=False)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        self._limit = asyncio.Semaphore(self.concurrency)

    async def run(self, program: str, timeout: float) -> ExecOutcome:
        assert self._session is not None and self._limit is not None
        body = {"code": program, "language": "python", "run_timeout": timeout}
        last = ExecOutcome(error="not run")
        async with self._limit:
            for attempt in range(self.attempts):
                refused, wait = False, None
                try:
                    async with self._session.post(
                        self.url, json=body, timeout=aiohttp.ClientTimeout(total=timeout + self.grace)
                    ) as resp:
                        refused = resp.status == 429 or resp.status >= 500
                        if refused:
                            last = ExecOutcome(error=f"infra: HTTP {resp.status}")
                            wait = retry_after(resp.headers)
                        else:
                            data = await resp.json(content_type=None)
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                    last = ExecOutcome(error=f"infra: {type(exc).__name__}")
                    continue
                if refused:
                    if wait and attempt + 1 < self.attempts:
                        await asyncio.sleep(wait)  # as the service asked (bounded), with the answer closed
                    continue
                outcome = _fusion_outcome(data)
                if outcome.error is not None and outcome.error.startswith("infra:"):
                    last = outcome  # e.g. a SandboxError body: the service failed, not the program
                    continue
                return outcome
        return last

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _fusion_outcome(data: Any) -> ExecOutcome:
    if isinstance(data, dict) and data.get("status") == "SandboxError":  # the service failed, not the program
        return ExecOutcome(error=f"infra: SandboxError: {str(data.get('message'))[:200]}")
    run = data.get("run_result") if isinstance(data, dict) else None
    if not isinstance(run, dict):
        return ExecOutcome(error=f"infra: no run result: {str(data)[:200]}")
    if run.get("status") == "TimeLimitExceeded":
        return ExecOutcome(error="timeout", timed_out=True)
    stdout = str(run.get("stdout") or "")
    if data.get("status") != "Success" or run.get("return_code") not in (0, None):
        return ExecOutcome(stdout=stdout, error=str(run.get("stderr") or data.get("message") or "failed")[-500:])
    return ExecOutcome(stdout=stdout)


# --------------------------------------------------------------------------------------------------- reward


def _put_back_sigint(loop: asyncio.AbstractEventLoop, previous: Any) -> None:
    """Drop whatever SIGINT handler ``loop`` holds (ours, or one a library added on it: the Daytona SDK's engineio
    adds its own at its first connection) and give the caller's disposition back, ``SIG_IGN`` included."""
    loop.remove_signal_handler(signal.SIGINT)  # when it held one, this installs Python's default handler
    if previous is not None:  # None: installed outside Python, nothing we can put back
        signal.signal(signal.SIGINT, previous)


class SandboxReward:
    """TRL reward function over a backend; use as a context manager so the sandboxes go away whatever happens.

    ``task`` is the default task; a dataset column named ``task`` (passed by TRL as a keyword list) overrides it per
    completion. The backend runs on this object's own event loop, so the function can be called from sync code.
    """

    def __init__(self, backend: Backend, task: str | None = None, timeout: float = 1.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a finite, positive number of seconds, got {timeout!r}")
        if isinstance(backend, DaytonaPool):
            whole_seconds(timeout)
        self.backend = backend
        self.task = get_task(task) if task is not None else None
        self.timeout = timeout
        self.__name__ = "sandbox_reward"  # TRL names the logged metric after the function
        self._loop: asyncio.AbstractEventLoop | None = None
        #: How every completion scored so far ended, by kind (see :func:`outcome_kind`).
        self.outcomes: Counter[str] = Counter()
        #: Ids of the sandboxes :meth:`close` could not delete (a Daytona pool's; none for Sandbox Fusion).
        self.leaked: list[str] = []

    def __enter__(self) -> SandboxReward:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on this object's loop; a Ctrl-C meanwhile cancels it and then raises KeyboardInterrupt.

        Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread happens to be, e.g. halfway
        through an HTTP client's bookkeeping, which can leave that client unable to delete the sandboxes afterwards.
        Here Ctrl-C cancels the running task instead, so every coroutine stops at an await and the pool stays usable
        for :meth:`close`. The Daytona SDK's Socket.IO client (engineio) installs, once per process, a SIGINT handler
        that cancels every task and stops the loop; ours takes its place while this loop runs. The caller's handler
        is put back afterwards; a SIGINT the caller ignores (``SIG_IGN``, e.g. inherited) stays ignored throughout.
        """
        loop = self._loop
        assert loop is not None
        task = loop.create_task(coro)
        if threading.current_thread() is not threading.main_thread():
            return loop.run_until_complete(task)  # signals go to the main thread only
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN:
            try:
                return loop.run_until_complete(task)
            finally:  # a library's handler added meanwhile (engineio's) must not un-ignore it
                _put_back_sigint(loop, previous)
        interrupted = False

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            task.cancel()

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            _put_back_sigint(loop, previous)
        if interrupted:  # the task finished anyway: the Ctrl-C still stops the caller
            raise KeyboardInterrupt
        return result

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._run(self.backend.start())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Cancel what is still running and release the backend.

        A Ctrl-C meanwhile stops the cleanup (the first one may be what ended the training: deleting the sandboxes
        is worth waiting for, but not forever) and raises KeyboardInterrupt. Either way, the ids of the sandboxes
        that could not be deleted are in :attr:`leaked` and logged as a warning."""
        loop = self._loop
        if loop is None:
            return
        self._loop = None

        async def shut_down() -> None:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done() and t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            await self.backend.close()

        closing = loop.create_task(shut_down())
        main = threading.current_thread() is threading.main_thread()
        previous = signal.getsignal(signal.SIGINT) if main else signal.SIG_IGN
        interrupted = False

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            closing.cancel()

        if previous is not signal.SIG_IGN:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            loop.run_until_complete(closing)
        except asyncio.CancelledError:
            if not interrupted:
                raise
        finally:
            if main:
                _put_back_sigint(loop, previous)
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]
            if left:  # what the interrupted cleanup cancelled: let it unwind before the loop goes
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()
            self.leaked = list(getattr(self.backend, "leaked", []))
            if self.leaked:
                logger.warning(
                    "%d sandbox(es) could not be deleted and are left behind: %s", len(self.leaked), self.leaked
                )
        if interrupted:
            raise KeyboardInterrupt

    def _task_for(self, i: int, kwargs: dict[str, Any]) -> Task:
        names = kwargs.get("task")
        if isinstance(names, Sequence) and not isinstance(names, str) and i < len(names):
            return get_task(str(names[i]))
        if self.task is None:
            raise ValueError("no task: pass task=... to SandboxReward or give the dataset a 'task' column")
        return self.task

    async def score_all(self, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Rewards for ``completions``, all run concurrently (the backend bounds how many at once)."""
        rewards, _ = await self._score(completions, kwargs)
        return rewards

    async def _score(self, completions: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[float], Counter[str]]:
        """Rewards for ``completions`` and how each one's scoring ended (counted into :attr:`outcomes` too)."""
        kinds: Counter[str] = Counter()

        async def one(i: int, completion: Any) -> float:
            task = self._task_for(i, kwargs)
            code = extract_code(completion)
            if not precheck(task, code):
                kinds["not_run"] += 1
                return FAILED
            outcome = await self.backend.run(build_program(task, code), self.timeout)
            kinds[outcome_kind(outcome)] += 1
            return score_output(outcome)

        rewards = list(await asyncio.gather(*(one(i, c) for i, c in enumerate(completions))))
        self.outcomes.update(kinds)
        return rewards, kinds

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Score ``completions``. Under TRL (which passes ``log_metric``) also log, per step, the fraction of
        completions that were not run, timed out, raised, or failed outside the program, and for a Daytona pool
        the tries that failed outside the program and the sandboxes replaced: infrastructure trouble shows in the
        training logs."""
        if self._loop is None:
            raise RuntimeError("SandboxReward is not open: use it as a context manager or call open()")
        stats = getattr(self.backend, "stats", None)
        before = (stats.infra_failures, stats.replaced) if isinstance(stats, PoolStats) else None
        scored: tuple[list[float], Counter[str]] = self._run(self._score(completions, kwargs))
        rewards, kinds = scored
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and completions:
            for kind in OUTCOME_KINDS:
                log_metric(f"sandbox/{kind}", kinds[kind] / len(completions))
            if before is not None and isinstance(stats, PoolStats):
                log_metric("sandbox/failed_tries", float(stats.infra_failures - before[0]))
                log_metric("sandbox/replaced", float(stats.replaced - before[1]))
        return rewards
