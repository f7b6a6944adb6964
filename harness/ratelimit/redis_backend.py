"""The ``redis`` backend: the limiter's rules (see :mod:`harness.ratelimit.core`) as one Lua script on one Redis,
for trainers without Ray (TRL, several clusters sharing one sandbox service).

Keys (hash-tagged ``ratelimit:{<name>}:*``, so a Redis Cluster keeps them on one slot): ``cfg`` (the config, JSON,
set once and compared by every client), ``queue`` (a sorted set of request ids by ticket number: FIFO), ``qexp``
(each waiter's liveness deadline, refreshed by its polls), ``held`` (request id -> lease deadline), ``owner``
(request id -> holder), ``tombs``/``tomborder`` (how each finished request ended, bounded), ``state`` (ticket
counter, token bucket, adaptive cap, counters). Every operation first reclaims expired leases, drops dead waiters
and grants from the head of the queue, so no background process is needed. Time is the Redis server's clock, read
as a limiter clock that never goes back (``state``'s ``clock``): a step back of the server's clock counts as no time
passing (the limiter clock then goes on from where it was), and a step forward counts for at most ``lease_s / 3``
(one heartbeat period), so it cannot expire the lease of a live holder.

Waiters poll (2 ms doubling to 50 ms); a release by a client wakes that client's own waiters at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from harness.ratelimit.base import (
    LimiterConfig,
    LimiterConfigError,
    LimiterError,
    LimiterStats,
    Outcome,
    RemoteLimiter,
    Ticket,
)

log = logging.getLogger(__name__)

#: Seconds ``aclose`` gives withdraws and releases still retrying (then their leases decide).
CLOSE_GRACE_S = 2.0
#: Seconds to connect to Redis, and to wait for one command's answer (the Lua script runs in microseconds).
CONNECT_TIMEOUT_S = 5.0
COMMAND_TIMEOUT_S = 10.0
#: Connections of one client: waiters' ``enqueue``/``poll`` calls share the first pool, the calls that free capacity
#: (``release``, ``withdraw``, ``heartbeat``) the second, so they never queue behind polls. Both pools block (up to
#: ``COMMAND_TIMEOUT_S``) when all their connections are busy: any number of callers, no "too many connections".
POLL_CONNECTIONS = 32
CONTROL_CONNECTIONS = 8
#: Retries of a release or a withdraw that failed on the way (a dropped connection, a timeout): first pause, last.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0

KEY_NAMES = ("cfg", "queue", "qexp", "held", "owner", "tombs", "tomborder", "state")
TOMBSTONES = 100_000
#: The script's answer when the limiter's keys are missing (never opened, or lost with a Redis restart).
NOT_CONFIGURED = "error: limiter is not configured (open it first)"

LUA = r"""
local cfg_key, queue, qexp, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, tombs, tomborder, state = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local op = ARGV[1]
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[2])
end

if op == 'open' then
  redis.call('SET', cfg_key, ARGV[3], 'NX')
  local stored = redis.call('GET', cfg_key)
  local c = cjson.decode(stored)
  redis.call('HSETNX', state, 'cap', c.limit)
  return stored
end

local raw = redis.call('GET', cfg_key)
if not raw then return 'NOT_CONFIGURED' end
local c = cjson.decode(raw)
local lease = c.lease_s * 1000

-- The limiter's own clock, which never goes back: it advances by the step of the server's clock since the last call,
-- at least 0 (a clock stepped back) and at most one heartbeat period (a clock stepped forward must not expire the
-- leases of live holders, who heartbeat every lease / 3).
local clock = redis.call('HMGET', state, 'clock', 'clock_raw')
local raw_now = now
if clock[1] then
  local step = now - tonumber(clock[2])
  if step < 0 then step = 0 end
  if step > math.floor(lease / 3) then step = math.floor(lease / 3) end
  now = tonumber(clock[1]) + step
end
redis.call('HSET', state, 'clock', now, 'clock_raw', raw_now)
local rate = nil
if c.rate_per_second ~= cjson.null then rate = c.rate_per_second / 1000.0 end
local bucket = 0
if rate then
  if c.burst ~= cjson.null then bucket = c.burst else bucket = math.max(1, math.ceil(c.rate_per_second)) end
end

local function tomb(rid, why)
  redis.call('HSET', tombs, rid, why)
  redis.call('ZADD', tomborder, now, rid)
  local n = redis.call('ZCARD', tomborder)
  if n > TOMBSTONES then
    local old = redis.call('ZRANGE', tomborder, 0, n - TOMBSTONES - 1)
    for _, r in ipairs(old) do redis.call('HDEL', tombs, r) end
    redis.call('ZREMRANGEBYRANK', tomborder, 0, n - TOMBSTONES - 1)
  end
end

local function drop_held(rid, why)
  redis.call('ZREM', held, rid)
  redis.call('HDEL', owner, rid)
  tomb(rid, why)
end

local function drop_queued(rid, why)
  redis.call('ZREM', queue, rid)
  redis.call('ZREM', qexp, rid)
  redis.call('HDEL', owner, rid)
  tomb(rid, why)
end

local function pump()
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', held, '-inf', now)) do
    drop_held(rid, 'reclaimed')
    redis.call('HINCRBY', state, 'reclaimed', 1)
  end
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', qexp, '-inf', now)) do
    drop_queued(rid, 'abandoned')
    redis.call('HINCRBY', state, 'abandoned', 1)
  end
  local tokens = 0
  if rate then
    local t = redis.call('HMGET', state, 'tokens', 'token_time')
    if t[1] then tokens = tonumber(t[1]) else tokens = bucket end
    if t[2] then tokens = math.min(bucket, tokens + math.max(0, now - tonumber(t[2])) * rate) end
  end
  local cap = tonumber(redis.call('HGET', state, 'cap') or c.limit)
  local n = redis.call('ZCARD', held)
  while n < cap and ((not rate) or tokens >= 1) do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then break end
    local rid = head[1]
    -- the lease runs from the holder's last sign of life (the queued deadline), not from the grant
    local deadline = tonumber(redis.call('ZSCORE', qexp, rid) or (now + lease))
    redis.call('ZREM', queue, rid)
    redis.call('ZREM', qexp, rid)
    redis.call('ZADD', held, math.min(deadline, now + lease), rid)
    if rate then tokens = tokens - 1 end
    n = n + 1
    redis.call('HINCRBY', state, 'acquires', 1)
    local m = tonumber(redis.call('HGET', state, 'max_held') or '0')
    if n > m then redis.call('HSET', state, 'max_held', n) end
  end
  if rate then redis.call('HSET', state, 'tokens', tostring(tokens), 'token_time', now) end
end

local function status(rid)
  if redis.call('ZSCORE', held, rid) then return 'held' end
  if redis.call('ZSCORE', queue, rid) then return 'waiting' end
  return redis.call('HGET', tombs, rid) or 'unknown'
end

if op == 'enqueue' then
  local rid, holder = ARGV[3], ARGV[4]
  local t = redis.call('HGET', tombs, rid)
  if t then return t end
  if redis.call('ZSCORE', held, rid) or redis.call('ZSCORE', queue, rid) then
    -- the same enqueue sent again (its answer was lost): answer it again
    if redis.call('HGET', owner, rid) == holder then pump() return status(rid) end
    return 'error: request id already queued or held'
  end
  local seq = redis.call('HINCRBY', state, 'seq', 1)
  redis.call('ZADD', queue, seq, rid)
  redis.call('ZADD', qexp, now + lease, rid)
  redis.call('HSET', owner, rid, holder)
  pump()
  return status(rid)
elseif op == 'poll' then
  local rid = ARGV[3]
  redis.call('ZADD', qexp, 'XX', now + lease, rid)
  pump()
  return status(rid)
elseif op == 'release' then
  -- ARGV[4] 'resend-ok': the client sends each release once, so a 'released' tomb is this very release, sent again
  -- after its answer was lost (by the client's retry or the Redis library's): answer it again
  local rid, resend = ARGV[3], ARGV[4] == 'resend-ok'
  pump()
  if redis.call('ZSCORE', held, rid) then
    drop_held(rid, 'released')
    redis.call('HINCRBY', state, 'releases', 1)
    pump()
    return 'released'
  end
  local t = redis.call('HGET', tombs, rid)
  if resend and t == 'released' then return 'released' end
  if resend and t == 'late' then return 'expired' end
  if t == 'reclaimed' then
    redis.call('HSET', tombs, rid, 'late')
    redis.call('HINCRBY', state, 'late_releases', 1)
    return 'expired'
  end
  if not t then return 'error: release of request ' .. rid .. ', which this limiter never granted' end
  return 'error: request ' .. rid .. ' released twice (it was ' .. t .. ')'
elseif op == 'withdraw' then
  local rid = ARGV[3]
  local result = 'none'
  if redis.call('ZSCORE', queue, rid) then
    drop_queued(rid, 'withdrawn')
    result = 'dequeued'
  elseif redis.call('ZSCORE', held, rid) then
    drop_held(rid, 'withdrawn')
    redis.call('HINCRBY', state, 'withdrawn', 1)
    result = 'returned'
  elseif not redis.call('HGET', tombs, rid) then
    tomb(rid, 'withdrawn')
  end
  pump()
  return result
elseif op == 'heartbeat' then
  local holder = ARGV[3]
  local count = 0
  pump()
  for i = 4, #ARGV do
    local rid = ARGV[i]
    if redis.call('HGET', owner, rid) == holder then
      if redis.call('ZADD', held, 'XX', 'CH', now + lease, rid) == 1 then count = count + 1 end
      redis.call('ZADD', qexp, 'XX', now + lease, rid)
    end
  end
  pump()
  return tostring(count)
elseif op == 'report' then
  local outcome = ARGV[3]
  if outcome == 'throttled' then redis.call('HINCRBY', state, 'throttled', 1) end
  local a = c.adaptive
  if a ~= cjson.null and a ~= nil then
    local cap = tonumber(redis.call('HGET', state, 'cap') or c.limit)
    if outcome == 'throttled' then
      redis.call('HSET', state, 'ok_streak', 0)
      local last = tonumber(redis.call('HGET', state, 'last_decrease') or '-1e300')
      if now - last >= a.cooldown_s * 1000 then
        redis.call('HSET', state, 'last_decrease', now)
        redis.call('HSET', state, 'cap', math.max(a.min_limit, math.floor(cap * a.decrease_factor)))
      end
    elseif outcome == 'ok' then
      local streak = redis.call('HINCRBY', state, 'ok_streak', 1)
      local every = cap
      if a.increase_every ~= cjson.null then every = a.increase_every end
      if streak >= every and cap < c.limit then
        redis.call('HSET', state, 'ok_streak', 0)
        redis.call('HSET', state, 'cap', math.min(c.limit, cap + a.increase_step))
      end
    end
  end
  pump()
  return 'ok'
elseif op == 'stats' then
  pump()
  local s = redis.call('HGETALL', state)
  local out = {}
  for i = 1, #s, 2 do out[s[i]] = s[i + 1] end
  out['held'] = redis.call('ZCARD', held)
  out['waiting'] = redis.call('ZCARD', queue)
  out['now'] = now
  return cjson.encode(out)
elseif op == 'status' then
  pump()
  return status(ARGV[3])
end
return 'error: unknown op ' .. op
""".replace("TOMBSTONES", str(TOMBSTONES)).replace("NOT_CONFIGURED", NOT_CONFIGURED)


def _cancel_requests() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling``; 0 where Python lacks it)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return int(cancelling()) if cancelling is not None else 0


def _raise_if_cancel_swallowed(before: int) -> None:
    """Some client libraries swallow a cancellation that lands inside a command (seen with fakeredis on 3.11);
    the task still counts it (``Task.cancelling``), so honour it here. ``before`` is the count when the call began:
    a cancellation the task absorbed earlier (and never uncancelled) is not this call's to raise."""
    if _cancel_requests() > before:
        raise asyncio.CancelledError


#: Failures worth a retry: the command may not have reached Redis, or its answer was lost.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError, asyncio.TimeoutError)


def _client(url: str, connections: int) -> Any:
    """A client with a blocking pool of ``connections`` (redis-py's default pool raises past 100 callers at once)."""
    import redis.asyncio

    # Bounded waits: a Redis that stops answering fails the call (an infrastructure fault for the tools) instead of
    # hanging it. Timeouts (and max_connections) given in the URL's query win.
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url,
        max_connections=connections,
        timeout=COMMAND_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=COMMAND_TIMEOUT_S,
    )
    return redis.asyncio.Redis.from_pool(pool)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception seen (its caller may have been cancelled; the task behind it logs the failure)."""
    if not future.cancelled():
        future.exception()


def _settle(waker: asyncio.Future[bool]) -> None:
    if not waker.done():
        waker.set_result(False)


def limiter_keys(name: str) -> list[str]:
    return [f"ratelimit:{{{name}}}:{key}" for key in KEY_NAMES]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def config_json(config: LimiterConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


def check_stored(config: LimiterConfig, stored: str) -> None:
    existing = LimiterConfig.from_mapping(json.loads(stored))
    differences = existing.differences(config)
    if differences:
        raise LimiterConfigError(
            f"limiter {config.name!r} already exists with a different config: " + "; ".join(differences)
        )


def parse_stats(config: LimiterConfig, raw: str) -> LimiterStats:
    data = json.loads(raw)

    def num(key: str) -> int:
        return int(float(data.get(key, 0) or 0))

    return LimiterStats(
        name=config.name,
        backend="redis",
        limit=config.limit,
        cap=num("cap") or config.limit,
        held=num("held"),
        waiting=num("waiting"),
        max_held=num("max_held"),
        acquires=num("acquires"),
        releases=num("releases"),
        withdrawn=num("withdrawn"),
        reclaimed=num("reclaimed"),
        late_releases=num("late_releases"),
        throttled=num("throttled"),
        extra={"abandoned": num("abandoned")},
    )


class RedisLimiter(RemoteLimiter):
    """A client of the named limiter stored in Redis; one holder (its heartbeats cover all its tickets)."""

    backend = "redis"

    def __init__(
        self,
        config: LimiterConfig,
        *,
        url: str | None = None,
        client: Any = None,
        clock: Callable[[], float] | None = None,
        poll_min_s: float = 0.002,
        poll_max_s: float = 0.05,
    ) -> None:
        super().__init__(config)
        if client is None:
            if not url:
                raise LimiterConfigError("the redis limiter backend needs redis_url or a client")
            client = _client(url, POLL_CONNECTIONS)
            self._control: Any = _client(url, CONTROL_CONNECTIONS)
            self._owns_client = True
        else:
            self._control = client
            self._owns_client = False
        self.client = client
        self.clock = clock
        self.poll_min_s = poll_min_s
        self.poll_max_s = poll_max_s
        self.keys = limiter_keys(config.name)
        self.holder = uuid4().hex
        self._script = client.register_script(LUA)
        self._checked = False
        self._wakers: set[asyncio.Future[bool]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    async def _call(self, op: str, *args: str, control: bool = True) -> str:
        """One operation; ``control`` ones (all but a waiter's ``enqueue``/``poll``) use the control pool."""
        client = self._control if control else self.client
        result = await self._run(client, op, *args)
        if result == NOT_CONFIGURED and self._checked:
            # The limiter's keys are gone (Redis restarted without persistence, or they were deleted): set the config
            # again, as the first client did, and go on. Tickets granted before are gone with them.
            log.warning("limiter %r: its state is gone from Redis (a restart?); configuring it again", self.name)
            check_stored(self.config, await self._run(client, "open", config_json(self.config)))
            result = await self._run(client, op, *args)
        if result.startswith("error: "):
            raise LimiterError(f"limiter {self.name!r}: {result[7:]}")
        return result

    async def _run(self, client: Any, op: str, *args: str) -> str:
        now = "" if self.clock is None else str(int(self.clock() * 1000))
        return _text(await self._script(keys=self.keys, args=[op, now, *args], client=client))

    async def _call_retrying(
        self, budget_s: float, op: str, *args: str, first: asyncio.Future[str] | None = None
    ) -> str:
        """``op`` (idempotent as sent: ``withdraw``, or ``release`` with ``resend-ok``) retried on transient
        failures for up to ``budget_s``; the last failure is raised. ``first`` gets the first attempt's outcome."""
        deadline = asyncio.get_running_loop().time() + budget_s
        pause = RETRY_FIRST_S
        while True:
            try:
                result = await self._call(op, *args)
            except TRANSIENT as exc:
                if first is not None and not first.done():
                    first.set_exception(exc)
                if asyncio.get_running_loop().time() + pause > deadline:
                    raise
            except BaseException as exc:
                if first is not None and not first.done():
                    first.set_exception(exc)
                raise
            else:
                if first is not None and not first.done():
                    first.set_result(result)
                return result
            await asyncio.sleep(pause)  # a backoff between attempts, not a wait for an event
            pause = min(2 * pause, RETRY_MAX_S)

    async def open(self) -> RedisLimiter:
        if not self._checked:
            check_stored(self.config, await self._call("open", config_json(self.config)))
            self._checked = True
        return self

    async def acquire(self) -> Ticket:
        cancels_before = _cancel_requests()
        await self.open()
        rid = uuid4().hex
        self._waiting.add(rid)
        self._ensure_heartbeat()
        try:
            state = await self._call("enqueue", rid, self.holder, control=False)
            delay = self.poll_min_s
            _raise_if_cancel_swallowed(cancels_before)
            while state == "waiting":
                woken = await self._nap(delay)
                delay = self.poll_min_s if woken else min(2 * delay, self.poll_max_s)
                state = await self._call("poll", rid, control=False)
                _raise_if_cancel_swallowed(cancels_before)
        except BaseException:
            # Cancelled or failed: dequeue the request or hand its grant back, exactly once, even if cancelled again.
            # Retried for a lease: until then the request could still be granted, to nobody; after it, the lease (no
            # heartbeat covers it any more) has dropped it anyway.
            task = asyncio.get_running_loop().create_task(self._call_retrying(self.config.lease_s, "withdraw", rid))
            self._background.add(task)
            task.add_done_callback(self._withdrawn)
            raise
        finally:
            self._waiting.discard(rid)
        if state != "held":
            raise LimiterError(f"acquire of {rid} on {self.name!r} ended as {state!r}")
        ticket = Ticket(self.name, rid, self.holder)
        self._held[rid] = ticket
        self._max_held = max(self._max_held, len(self._held))
        return ticket

    def _withdrawn(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Redis stayed unreachable for a lease: the lease has dropped (or reclaimed) the request by now.
            log.warning("limiter %r: withdraw failed for a lease; left to the lease: %s", self.name, task.exception())

    def _released(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("limiter %r: release failed for a lease; left to the lease: %s", self.name, task.exception())

    async def _nap(self, delay: float) -> bool:
        """Sleep ``delay`` or until this client releases a ticket (``True``). A bare future, not ``wait_for``:
        Python 3.11's ``wait_for`` can swallow a cancellation that races its timeout."""
        loop = asyncio.get_running_loop()
        waker: asyncio.Future[bool] = loop.create_future()
        handle = loop.call_later(delay, _settle, waker)
        self._wakers.add(waker)
        try:
            return await waker
        finally:
            handle.cancel()
            self._wakers.discard(waker)

    async def release(self, ticket: Ticket) -> None:
        if self._held.pop(ticket.request_id, None) is None:
            raise LimiterError(f"release of a ticket this client does not hold (double release?): {ticket}")
        # The ticket is already off this client's books: a release lost here would hold the slot until its lease ran
        # out. So it runs as a task a cancelled caller does not stop, and one that failed on the way (Redis gone,
        # beyond the Redis library's own retries) raises to the caller at once but goes on in the background until
        # the lease would have reclaimed the ticket anyway.
        loop = asyncio.get_running_loop()
        first: asyncio.Future[str] = loop.create_future()
        first.add_done_callback(_retrieve)
        task = loop.create_task(
            self._call_retrying(self.config.lease_s, "release", ticket.request_id, "resend-ok", first=first)
        )
        self._background.add(task)
        task.add_done_callback(self._released)
        result = await asyncio.shield(first)
        for waker in self._wakers:
            if not waker.done():
                waker.set_result(True)
        if result == "expired":
            log.warning("limiter %r: ticket %s was reclaimed before its release (lease expired)", self.name, ticket)

    async def _report(self, outcome: Outcome) -> None:
        await self.open()
        await self._call("report", outcome)

    async def stats(self) -> LimiterStats:
        await self.open()
        return parse_stats(self.config, await self._call("stats"))

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        interval = self.config.lease_s / 3
        while self._held or self._waiting:
            await asyncio.sleep(interval)
            rids = [*self._held, *self._waiting]
            if not rids:
                break
            try:
                await self._call("heartbeat", self.holder, *rids)
            except Exception:  # pragma: no cover - keep beating; the lease decides
                log.warning("limiter %r: heartbeat failed", self.name, exc_info=True)

    async def aclose(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._background:
            _, pending = await asyncio.wait(set(self._background), timeout=CLOSE_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._owns_client:
            await self.client.aclose()
            await self._control.aclose()


class RedisCoreSync:
    """The Lua operations with a synchronous client and an explicit clock (property tests, debugging)."""

    def __init__(self, config: LimiterConfig, client: Any) -> None:
        self.config = config
        self.keys = limiter_keys(config.name)
        self._script = client.register_script(LUA)
        check_stored(config, self.call("open", 0.0, config_json(config)))

    def call(self, op: str, now: float, *args: str) -> str:
        return _text(self._script(keys=self.keys, args=[op, str(int(now * 1000)), *args]))

    def stats(self, now: float) -> LimiterStats:
        return parse_stats(self.config, self.call("stats", now))
