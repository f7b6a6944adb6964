"""The ``ray`` backend: one named async actor per limiter name, shared by every process of a Ray cluster.

The actor (``ratelimit:<name>`` in the Ray namespace ``namespace``, by default the job's when its driver named one,
else :data:`DEFAULT_NAMESPACE`: see :func:`default_namespace`; detached by default so it does not die with the
worker that happened to create it) runs
:class:`~harness.ratelimit.core.LimiterCore`. Each :class:`RayLimiter` is one holder: ``acquire`` sends a fresh request
id and waits on the actor; if the caller is cancelled (or the call fails) it fires ``withdraw(request id)``, which
dequeues the request or returns its grant, whichever happened, exactly once. While it holds or waits for tickets the
client heartbeats every ``lease_s / 3``; the actor reclaims the tickets of a holder whose lease ran out (a killed
worker) and drops its queued requests. ``acquire`` runs in a concurrency group of its own, every other method in
another, so releases and heartbeats never wait behind acquires. ``configure`` compares the caller's config with the
actor's, so a second user with a different ``limit`` gets :class:`LimiterConfigError`, not a silent first-creator-wins
as verl 0.7.1's ``TokenBucketWorker``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from uuid import UUID, uuid4

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

from harness.ratelimit.base import (
    LimiterConfig,
    LimiterConfigError,
    LimiterError,
    LimiterStats,
    Outcome,
    RemoteLimiter,
    Ticket,
)
from harness.ratelimit.core import CoreDriver, LimiterCore, stats_dict
from harness.ratelimit.factory import check_namespace

log = logging.getLogger(__name__)

ACTOR_PREFIX = "ratelimit:"
#: The Ray namespace of limiter actors made without one by a job whose own namespace is anonymous (a driver's plain
#: ``ray.init()``): a detached actor in that namespace would outlive the job where nobody could name it to kill it.
DEFAULT_NAMESPACE = "sandbox-ratelimit"
#: Concurrent acquires one actor accepts (every waiting acquire occupies one).
MAX_CONCURRENCY = 10_000
#: Concurrent calls of the other methods (release, withdraw, heartbeat, configure, report, stats): a concurrency group
#: of their own, so they run however many acquires wait (in one group they queued behind acquires that only they
#: could finish, and a live holder's permit was reclaimed for want of its heartbeat).
CONTROL_CONCURRENCY = 64

T = TypeVar("T")


class LimiterActor:
    """The actor body (wrapped with ``ray.remote`` below); errors come back as values, raised by the client.

    Ray runs each concurrency group on an event loop (and thread) of its own, so the state lives on one more loop,
    a thread the actor starts, and every method hands its work to that loop."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = LimiterConfig.from_mapping(config)
        self.core = LimiterCore(self.config, leases=True, backend="ray")
        self.driver = CoreDriver(self.core)
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="limiter-state", daemon=True).start()

    async def _on_state_loop(self, work: Coroutine[Any, Any, T]) -> T:
        # A cancelled caller cancels the work too (run_coroutine_threadsafe chains the cancellation).
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def _sync(self, fn: Callable[..., T], *args: Any) -> T:
        async def run() -> T:
            return fn(*args)

        return await self._on_state_loop(run())

    @ray.method(concurrency_group="control")
    async def configure(self, config: dict[str, Any]) -> list[str]:
        return self.config.differences(LimiterConfig.from_mapping(config))

    @ray.method(concurrency_group="acquire")
    async def acquire(self, rid: str, holder: str) -> str:
        return await self._on_state_loop(self.driver.acquire(rid, holder))

    @ray.method(concurrency_group="control")
    async def release(self, rid: str) -> str:
        try:
            return await self._sync(self.driver.release, rid)
        except LimiterError as exc:
            return f"error: {exc}"

    @ray.method(concurrency_group="control")
    async def withdraw(self, rid: str) -> str:
        return await self._sync(self.driver.withdraw, rid)

    @ray.method(concurrency_group="control")
    async def heartbeat(self, holder: str) -> int:
        return await self._sync(self.driver.heartbeat, holder)

    @ray.method(concurrency_group="control")
    async def report(self, outcome: str) -> None:
        await self._sync(self.driver.report, outcome)

    @ray.method(concurrency_group="control")
    async def stats(self) -> dict[str, Any]:
        return await self._sync(stats_dict, self.core)

    @ray.method(concurrency_group="control")
    async def journal(self) -> list[tuple[float, str, str, int]]:
        return await self._sync(self.driver.journal)

    @ray.method(concurrency_group="control")
    async def ping(self) -> str:
        return self.config.name


def remote_actor_class(acquire_concurrency: int = MAX_CONCURRENCY) -> Any:
    """The Ray actor class: ``acquire`` in a concurrency group of ``acquire_concurrency``, every other method in a
    group of ``CONTROL_CONCURRENCY``."""
    groups = {"acquire": acquire_concurrency, "control": CONTROL_CONCURRENCY}
    _remote: Any = ray.remote  # its stubs lack concurrency_groups
    return _remote(num_cpus=0, max_restarts=0, concurrency_groups=groups)(LimiterActor)


RemoteLimiterActor: Any = remote_actor_class()


def actor_name(name: str) -> str:
    return ACTOR_PREFIX + name


def default_namespace() -> str:
    """Where a limiter made without a namespace lives: the job's own namespace when its driver named one
    (``ray.init(namespace=...)``), else :data:`DEFAULT_NAMESPACE`.

    Ray gives a driver that names none an anonymous namespace, a random UUID that no later job can name: the
    limiter's detached actor there could never be found again (to share, or to kill). A namespace that reads as a
    UUID is taken for such a one."""
    current = ray.get_runtime_context().namespace if ray.is_initialized() else None
    if not current:
        return DEFAULT_NAMESPACE
    try:
        UUID(current)
    except ValueError:
        return str(current)
    return DEFAULT_NAMESPACE


def get_actor(config: LimiterConfig, *, namespace: str | None = None, detached: bool = True) -> Any:
    """The named actor for ``config.name``, created on first use (no config check: see :meth:`RayLimiter.open`)."""
    if not ray.is_initialized():
        raise LimiterConfigError("the ray limiter backend needs ray.init() first (or use backend: local | redis)")
    options: dict[str, Any] = {
        "name": actor_name(config.name),
        "namespace": namespace or default_namespace(),
        "get_if_exists": True,
    }
    if detached:
        options["lifetime"] = "detached"
    return RemoteLimiterActor.options(**options).remote(config.to_dict())


class RayLimiter(RemoteLimiter):
    """A client of the named limiter actor; one holder (heartbeats cover all its tickets)."""

    backend = "ray"

    def __init__(self, config: LimiterConfig, *, namespace: str | None = None, detached: bool = True) -> None:
        super().__init__(config)
        self.namespace = check_namespace(namespace)
        self.detached = detached
        self.holder = uuid4().hex
        self._actor: Any = None
        self._checked = False
        self._heartbeat: asyncio.Task[None] | None = None
        # The actor each request (waiting or held) went to: its release and heartbeats go there, never to a
        # successor that has not heard of it. And the ids of actors known dead.
        self._asked: dict[str, Any] = {}
        self._dead: set[str] = set()

    @property
    def actor(self) -> Any:
        """The actor's handle, made (or looked up) here if need be: a blocking call, for code outside a loop."""
        if self._actor is None:
            self._actor = get_actor(self.config, namespace=self.namespace, detached=self.detached)
        return self._actor

    async def _attach(self) -> Any:
        """:attr:`actor` for coroutines: making or looking up the named actor asks Ray's control store and waits
        for the answer, so it runs in a thread, not on the caller's event loop."""
        if self._actor is None:
            actor = await asyncio.to_thread(get_actor, self.config, namespace=self.namespace, detached=self.detached)
            if self._actor is None:  # another task of this client may have attached meanwhile
                self._actor = actor
        return self._actor

    async def open(self) -> RayLimiter:
        """Attach to (or create) the named actor and check that its config is ours."""
        if not self._checked:
            differences = await (await self._attach()).configure.remote(self.config.to_dict())
            if differences:
                raise LimiterConfigError(
                    f"limiter {self.name!r} already exists with a different config: " + "; ".join(differences)
                )
            self._checked = True
        return self

    def _lost(self, actor: Any, exc: BaseException | None = None) -> None:
        """The actor died (killed, or its node went): the next call makes a new one, as the first call did."""
        if isinstance(exc, ActorDiedError):
            self._dead.add(_actor_id(actor))
        if self._actor is actor and actor is not None:
            log.warning("limiter %r: its actor is gone; the next call starts a new one", self.name)
            self._actor = None
            self._checked = False

    async def acquire(self) -> Ticket:
        actor = await self._attach()
        try:
            await self.open()
        except RayActorError as exc:
            self._lost(actor, exc)
            raise
        rid = uuid4().hex
        ref = actor.acquire.remote(rid, self.holder)
        self._waiting.add(rid)
        self._asked[rid] = actor
        self._ensure_heartbeat()
        try:
            result = await ref
        except BaseException as exc:
            self._asked.pop(rid, None)
            if isinstance(exc, RayActorError):
                self._lost(actor, exc)
            # Cancelled or failed: the actor dequeues the request or takes its grant back, exactly once.
            try:
                actor.withdraw.remote(rid)
            except Exception:  # pragma: no cover - the actor is gone: nothing to give back
                log.debug("withdraw of %s failed", rid, exc_info=True)
            raise
        finally:
            self._waiting.discard(rid)
        if result != "granted":
            self._asked.pop(rid, None)
            raise LimiterError(f"acquire of {rid} on {self.name!r} ended as {result!r}")
        ticket = Ticket(self.name, rid, self.holder)
        self._held[rid] = ticket
        self._max_held = max(self._max_held, len(self._held))
        return ticket

    async def release(self, ticket: Ticket) -> None:
        if self._held.pop(ticket.request_id, None) is None:
            raise LimiterError(f"release of a ticket this client does not hold (double release?): {ticket}")
        actor = self._asked.pop(ticket.request_id, None)
        if actor is None:
            actor = await self._attach()
        if _actor_id(actor) in self._dead:
            self._granted_by_the_dead(ticket)
            return
        try:
            result = await actor.release.remote(ticket.request_id)
        except ActorDiedError as exc:
            self._lost(actor, exc)
            self._granted_by_the_dead(ticket)
            return
        except RayActorError as exc:
            self._lost(actor, exc)
            raise
        if result == "expired":
            log.warning("limiter %r: ticket %s was reclaimed before its release (lease expired)", self.name, ticket)
        elif result != "released":
            raise LimiterError(result)

    def _granted_by_the_dead(self, ticket: Ticket) -> None:
        """A permit of an actor that died: its count died with it, so there is nothing to give back (and its
        successor never granted it)."""
        log.info("limiter %r: ticket %s was granted by an actor that is gone; nothing to release", self.name, ticket)

    async def _report(self, outcome: Outcome) -> None:
        actor = await self._attach()
        try:
            await actor.report.remote(outcome)
        except RayActorError as exc:
            self._lost(actor, exc)
            raise

    async def stats(self) -> LimiterStats:
        return LimiterStats.from_dict(await (await self._attach()).stats.remote())

    async def journal(self) -> list[tuple[float, str, str, int]]:
        return list(await (await self._attach()).journal.remote())

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        interval = self.config.lease_s / 3
        while self._held or self._waiting:
            await asyncio.sleep(interval)
            if not (self._held or self._waiting):
                break
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> int:
        """Heartbeat every live actor this client waits on or holds permits of; returns how many answered. Never
        makes an actor: one that died took its permits along, and a successor has none of this client's."""
        actors = {_actor_id(actor): actor for actor in self._asked.values()}
        answered = 0
        for key, actor in actors.items():
            if key in self._dead:
                continue
            try:
                await actor.heartbeat.remote(self.holder)
                answered += 1
            except ActorDiedError as exc:
                self._lost(actor, exc)
            except Exception:  # keep beating; the lease decides
                log.warning("limiter %r: heartbeat failed", self.name, exc_info=True)
        return answered

    async def aclose(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None


def _actor_id(actor: Any) -> str:
    return str(actor._actor_id.hex())


def kill(name: str, namespace: str | None = None, timeout: float = 30.0) -> bool:
    """Kill the named limiter actor (tests, or a config change between jobs) in ``namespace`` (by default this job's
    :func:`default_namespace`, then :data:`DEFAULT_NAMESPACE`, where anonymous jobs' limiters live); ``False`` if
    there was none.

    Returns once the actor is dead and its name free (``ray.kill`` only asks for it): a call made after this meets a
    dead actor, never the old one still serving, and a limiter made after it is a new one. ``TimeoutError`` if that
    has not happened within ``timeout`` seconds."""
    places = [namespace] if namespace else list(dict.fromkeys([default_namespace(), DEFAULT_NAMESPACE]))
    for place in places:  # without a namespace: this job's, then where anonymous jobs' limiters live
        try:
            handle = ray.get_actor(actor_name(name), namespace=place)
        except ValueError:
            continue
        namespace = place
        break
    else:
        return False
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + timeout
    dead = False
    while (left := deadline - time.monotonic()) > 0:
        if not dead:
            try:
                ray.get(handle.ping.remote(), timeout=left)  # answered: the kill is still on its way
            except ActorDiedError:
                dead = True
            except GetTimeoutError:
                break
            except RayActorError:  # unavailable for a moment (its node is busy): not known dead yet
                pass
        else:
            try:
                found = ray.get_actor(actor_name(name), namespace=namespace)
            except ValueError:
                return True
            if found._actor_id != handle._actor_id:  # already someone's new limiter of that name
                return True
        time.sleep(_KILL_POLL_S)  # neither the death nor the name's release is an event a driver can await
    raise TimeoutError(f"the limiter actor {name!r} is not gone {timeout:g} s after it was killed")


#: How often :func:`kill` looks again whether the killed actor is dead and its name free.
_KILL_POLL_S = 0.01
