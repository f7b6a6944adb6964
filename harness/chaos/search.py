"""Chaos search over the limiter: scenarios that apply client operations and check invariants after each one.

A scenario is a plain interpreter of operations (``{"op": "acquire", "worker": 1}``), so the same list replays
without hypothesis; :func:`search_machine` wraps one in a hypothesis ``RuleBasedStateMachine`` that generates the
operations, records them, and saves the shrunk list as a regression when an invariant breaks (see
``regressions.py``).

Limiter invariants: never more held than the cap; ``acquires == releases + withdrawn + reclaimed + held``; a
release of a ticket not held raises and adds no capacity; FIFO (no request granted while an earlier one waits); a
cancelled acquire never holds a permit; a live holder never loses a lease; a dead worker's leases come back within
its TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from harness.chaos.regressions import Regression, Violation, save_regression
from harness.ratelimit import LimiterConfig, LimiterError, LimiterStats, LocalLimiter, Ticket
from harness.ratelimit.core import LimiterCore

__all__ = [
    "DAYTONA_FAULTS",
    "SCENARIOS",
    "CoreAdapter",
    "DaytonaEnv",
    "DaytonaScenario",
    "LifoCore",
    "LimiterScenario",
    "LocalLimiterScenario",
    "RayLimiterScenario",
    "RedisAdapter",
    "Scenario",
    "ToolScenario",
    "daytona_ops",
    "daytona_setup",
    "limiter_ops",
    "limiter_setup",
    "local_ops",
    "ray_ops",
    "register_scenario",
    "replay",
    "search_machine",
    "tool_ops",
    "tool_setup",
]

Op = dict[str, Any]

#: Lease of the searched limiters, in the scenario's virtual seconds; time advances in steps of 0.4 lease.
LEASE_S = 1.0
STEP_S = 0.4 * LEASE_S
WORKERS = 3

_names = itertools.count(1)


class Scenario(Protocol):
    """Applies one operation and checks the invariants (raising :class:`Violation`); ``close`` frees resources."""

    def apply(self, op: Op) -> None: ...

    def close(self) -> None: ...


class SyncLimiter(Protocol):
    """The limiter rules with an explicit clock: the shape both the Python core and the Redis script share."""

    def enqueue(self, rid: str, holder: str, now: float) -> str: ...
    def status(self, rid: str, now: float) -> str: ...
    def release(self, rid: str, now: float) -> str: ...
    def withdraw(self, rid: str, now: float) -> str: ...
    def heartbeat(self, holder: str, rids: list[str], now: float) -> None: ...
    def stats(self, now: float) -> LimiterStats: ...


class CoreAdapter:
    """:class:`LimiterCore` (the ``local`` backend's and the Ray actor's rules), pumped after every call."""

    core_class: type[LimiterCore] = LimiterCore

    def __init__(self, config: LimiterConfig) -> None:
        self.core = self.core_class(config, leases=True)

    def enqueue(self, rid: str, holder: str, now: float) -> str:
        state = self.core.enqueue(rid, holder, now)
        self.core.pump(now)
        return state

    def status(self, rid: str, now: float) -> str:
        self.core.pump(now)
        return self.core.status(rid)

    def release(self, rid: str, now: float) -> str:
        result = self.core.release(rid, now)
        self.core.pump(now)
        return result

    def withdraw(self, rid: str, now: float) -> str:
        result = self.core.withdraw(rid, now)
        self.core.pump(now)
        return result

    def heartbeat(self, holder: str, rids: list[str], now: float) -> None:
        self.core.heartbeat(holder, now)
        self.core.pump(now)

    def stats(self, now: float) -> LimiterStats:
        self.core.pump(now)
        return self.core.stats()


class LifoCore(LimiterCore):
    """A deliberately broken toy: grants the newest waiter first. It exists so the search and the regression
    mechanism can be shown to catch a real FIFO bug; never use it."""

    def pump(self, now: float) -> list[str]:
        self._queue = type(self._queue)(reversed(self._queue.items()))
        try:
            return super().pump(now)
        finally:
            self._queue = type(self._queue)(reversed(self._queue.items()))


class LifoAdapter(CoreAdapter):
    core_class = LifoCore


class RedisAdapter:
    """The Redis backend's Lua script on fakeredis, called synchronously with the scenario's clock."""

    def __init__(self, config: LimiterConfig) -> None:
        import fakeredis

        from harness.ratelimit.redis_backend import RedisCoreSync

        self.redis = RedisCoreSync(config, fakeredis.FakeRedis())

    def enqueue(self, rid: str, holder: str, now: float) -> str:
        return self.redis.call("enqueue", now, rid, holder)

    def status(self, rid: str, now: float) -> str:
        return self.redis.call("status", now, rid)

    def release(self, rid: str, now: float) -> str:
        result = self.redis.call("release", now, rid)
        if result.startswith("error"):
            raise LimiterError(result)
        return result

    def withdraw(self, rid: str, now: float) -> str:
        return self.redis.call("withdraw", now, rid)

    def heartbeat(self, holder: str, rids: list[str], now: float) -> None:
        self.redis.call("heartbeat", now, holder, *rids)

    def stats(self, now: float) -> LimiterStats:
        return self.redis.stats(now)


def _pick(items: list[str], pick: int) -> str | None:
    return items[pick % len(items)] if items else None


class LimiterScenario:
    """Workers acquire, release, cancel, release wrongly, die (and come back as new holders) while time passes."""

    def __init__(self, adapter: Callable[[LimiterConfig], SyncLimiter]) -> None:
        self._make = adapter
        self.limiter: SyncLimiter | None = None
        self.limit = 0
        self.now = 0.0
        self.order: list[str] = []
        self.holder_of: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.granted: set[str] = set()
        self.cancelled_waiting: set[str] = set()
        self.released: list[str] = []
        self.generation = [0] * WORKERS
        self.died: dict[str, float] = {}

    # -- operations ----------------------------------------------------------------------------------------------
    def apply(self, op: Op) -> None:
        args = {k: v for k, v in op.items() if k != "op"}
        name = op["op"]
        if name != "setup" and self.limiter is None:
            raise ValueError("the first operation must be setup")
        handler = getattr(self, f"_op_{name}", None)
        if handler is None:
            raise ValueError(f"unknown limiter operation {name!r}")
        handler(**args)
        self._check()

    def close(self) -> None:
        self.limiter = None

    def _lim(self) -> SyncLimiter:
        assert self.limiter is not None
        return self.limiter

    def _op_setup(self, limit: int) -> None:
        self.limit = limit
        config = LimiterConfig(name=f"chaos-search-{next(_names)}", limit=limit, lease_s=LEASE_S)
        self.limiter = self._make(config)

    def _holder(self, worker: int) -> str:
        return f"w{worker % WORKERS}.{self.generation[worker % WORKERS]}"

    def _op_acquire(self, worker: int) -> None:
        rid = f"r{len(self.order) + 1}"
        holder = self._holder(worker)
        self.order.append(rid)
        self.holder_of[rid] = holder
        state = self._lim().enqueue(rid, holder, self.now)
        if state not in ("waiting", "held"):
            raise Violation("acquire", f"a fresh request {rid} came back {state!r}")
        self._refresh()

    def _op_release(self, pick: int) -> None:
        rid = _pick(self._live("held"), pick)
        if rid is None:
            return
        result = self._lim().release(rid, self.now)
        if result != "released":
            raise Violation("release", f"release of held {rid} gave {result!r}")
        self.released.append(rid)
        self._refresh()

    def _op_release_twice(self, pick: int) -> None:
        self._bad_release(_pick(self.released, pick))

    def _op_release_foreign(self) -> None:
        self._bad_release("never-acquired")

    def _bad_release(self, rid: str | None) -> None:
        if rid is None:
            return
        before = self._lim().stats(self.now)
        try:
            result = self._lim().release(rid, self.now)
        except LimiterError:
            result = None
        after = self._lim().stats(self.now)
        if result is not None:
            raise Violation("over-release", f"release of {rid}, not held, was accepted as {result!r}")
        if after.releases != before.releases or after.held != before.held:
            raise Violation("over-release", f"a refused release of {rid} changed the counters")
        self._refresh()

    def _op_cancel(self, pick: int) -> None:
        rid = _pick(self._live("held") + self._live("waiting"), pick)
        if rid is None:
            return
        was = self.state[rid]
        result = self._lim().withdraw(rid, self.now)
        want = "returned" if was == "held" else "dequeued"
        if result != want:
            raise Violation("cancel", f"withdraw of {was} {rid} gave {result!r}, expected {want!r}")
        if was == "waiting":
            self.cancelled_waiting.add(rid)
        if self._lim().withdraw(rid, self.now) != "none":
            raise Violation("cancel", f"a second withdraw of {rid} gave something back")
        self._refresh()

    def _op_kill(self, worker: int) -> None:
        """Worker death: its holder never heartbeats again; the worker comes back as a new holder."""
        w = worker % WORKERS
        self.died.setdefault(self._holder(w), self.now)
        self.generation[w] += 1

    def _op_advance(self, steps: int) -> None:
        for _ in range(steps):
            self.now = round(self.now + STEP_S, 6)
            for w in range(WORKERS):
                holder = self._holder(w)
                mine = [
                    r for r in self.order if self.holder_of[r] == holder and self.state.get(r) in ("held", "waiting")
                ]
                self._lim().heartbeat(holder, mine, self.now)
            self._refresh()
            self._check()

    # -- model ---------------------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        for rid in self.order:
            if self.state.get(rid) in (None, "waiting", "held"):
                self.state[rid] = self._lim().status(rid, self.now)
                if self.state[rid] == "held":
                    self.granted.add(rid)

    def _live(self, want: str) -> list[str]:
        return [r for r in self.order if self.state.get(r) == want and self.holder_of[r] not in self.died]

    def _check(self) -> None:
        if self.limiter is None:
            return
        held = [r for r in self.order if self.state.get(r) == "held"]
        stats = self._lim().stats(self.now)
        if len(held) > self.limit or stats.held > self.limit:
            raise Violation("cap", f"{max(len(held), stats.held)} held with limit {self.limit}: {held}")
        if stats.acquires != stats.releases + stats.withdrawn + stats.reclaimed + stats.held:
            raise Violation(
                "balance", f"acquires {stats.acquires} != releases + withdrawn + reclaimed + held ({stats})"
            )
        waiting_before: str | None = None
        for rid in self.order:
            if self.state.get(rid) == "waiting":
                waiting_before = waiting_before or rid
            elif waiting_before is not None and rid in self.granted:
                raise Violation("fifo", f"{rid} was granted while the earlier {waiting_before} still waits")
        if self.cancelled_waiting & self.granted:
            raise Violation("cancel", f"cancelled waiters got permits: {sorted(self.cancelled_waiting & self.granted)}")
        for rid in self.order:
            holder, state = self.holder_of[rid], self.state.get(rid)
            if holder not in self.died and state == "reclaimed":
                raise Violation("lease", f"{rid} of live holder {holder} was reclaimed")
            if holder in self.died and self.now - self.died[holder] > LEASE_S + STEP_S and state in ("held", "waiting"):
                raise Violation("lease", f"{rid} of {holder}, dead since {self.died[holder]}, is still {state}")


def limiter_ops() -> st.SearchStrategy[Op]:
    """Generated operations for :class:`LimiterScenario` (after a ``setup``)."""
    worker = st.integers(0, WORKERS - 1)
    pick = st.integers(0, 7)
    return st.one_of(
        st.builds(lambda w: {"op": "acquire", "worker": w}, worker),
        st.builds(lambda p: {"op": "release", "pick": p}, pick),
        st.builds(lambda p: {"op": "release_twice", "pick": p}, pick),
        st.just({"op": "release_foreign"}),
        st.builds(lambda p: {"op": "cancel", "pick": p}, pick),
        st.builds(lambda w: {"op": "kill", "worker": w}, worker),
        st.builds(lambda n: {"op": "advance", "steps": n}, st.integers(1, 4)),
    )


def limiter_setup() -> st.SearchStrategy[Op]:
    return st.builds(lambda n: {"op": "setup", "limit": n}, st.integers(1, 3))


# ---------------------------------------------------------------------------------------------------- asyncio level


class _Boom(Exception):
    """Raised inside a guarded call on purpose."""


@dataclass
class _Call:
    number: int
    go: asyncio.Event
    task: asyncio.Task[None] | None = None
    state: str = "waiting"  # waiting | inside | done | cancelled
    fail: bool = False


class LocalLimiterScenario:
    """Real asyncio calls through :class:`LocalLimiter.slot`: start, finish, raise inside, cancel while waiting or
    inside, release a foreign ticket. The cap, FIFO entry, balance and cancelled-waiter rules are checked."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.limiter: LocalLimiter | None = None
        self.limit = 0
        self.calls: list[_Call] = []
        self.entered: list[int] = []
        self.cancelled_waiting: set[int] = set()

    def apply(self, op: Op) -> None:
        args = {k: v for k, v in op.items() if k != "op"}
        handler = getattr(self, f"_op_{op['op']}", None)
        if handler is None:
            raise ValueError(f"unknown local limiter operation {op['op']!r}")
        if op["op"] != "setup" and self.limiter is None:
            raise ValueError("the first operation must be setup")
        handler(**args)
        self.loop.run_until_complete(self._settle())
        self._check()

    def close(self) -> None:
        tasks = [c.task for c in self.calls if c.task is not None and not c.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if self.limiter is not None:
            self.loop.run_until_complete(self.limiter.aclose())
        self.loop.run_until_complete(self._settle())
        self.loop.close()

    @staticmethod
    async def _settle() -> None:
        for _ in range(8):
            await asyncio.sleep(0)

    def _op_setup(self, limit: int) -> None:
        self.limit = limit
        self.limiter = LocalLimiter(LimiterConfig(name=f"chaos-local-{next(_names)}", limit=limit))

    async def _guarded(self, call: _Call) -> None:
        assert self.limiter is not None
        async with self.limiter.slot():
            call.state = "inside"
            self.entered.append(call.number)
            await call.go.wait()
            if call.fail:
                raise _Boom(f"call {call.number} raised inside the guarded block")

    def _op_start(self) -> None:
        call = _Call(len(self.calls) + 1, asyncio.Event())
        call.task = self.loop.create_task(self._guarded(call))
        self.calls.append(call)

    def _in(self, state: str) -> list[_Call]:
        return [c for c in self.calls if c.state == state]

    def _op_finish(self, pick: int, fail: bool) -> None:
        inside = self._in("inside")
        if not inside:
            return
        call = inside[pick % len(inside)]
        call.fail = fail
        call.go.set()
        self.loop.run_until_complete(self._settle())
        assert call.task is not None
        if not call.task.done():
            raise Violation("finish", f"call {call.number} did not finish after its body ended")
        error = call.task.exception()
        if fail != isinstance(error, _Boom):
            raise Violation("finish", f"call {call.number} ended with {error!r}")
        call.state = "done"

    def _op_cancel(self, pick: int) -> None:
        live = self._in("waiting") + self._in("inside")
        if not live:
            return
        call = live[pick % len(live)]
        if call.state == "waiting":
            self.cancelled_waiting.add(call.number)
        assert call.task is not None
        call.task.cancel()
        self.loop.run_until_complete(asyncio.gather(call.task, return_exceptions=True))
        call.state = "cancelled"

    def _op_release_foreign(self) -> None:
        assert self.limiter is not None
        ticket = Ticket(self.limiter.name, "never-acquired", "someone-else")
        held = self.limiter.held
        try:
            self.loop.run_until_complete(self.limiter.release(ticket))
        except LimiterError:
            pass
        else:
            raise Violation("over-release", "a foreign ticket was released")
        if self.limiter.held != held:
            raise Violation("over-release", "a refused release changed what is held")

    def _check(self) -> None:
        if self.limiter is None:
            return
        inside = self._in("inside")
        if len(inside) > self.limit or self.limiter.held > self.limit:
            raise Violation("cap", f"{len(inside)} calls inside, limiter holds {self.limiter.held}, limit {self.limit}")
        if self.limiter.held != len(inside):
            raise Violation("balance", f"limiter holds {self.limiter.held} but {len(inside)} calls are inside")
        stats = self.loop.run_until_complete(self.limiter.stats())
        if stats.acquires != stats.releases + stats.withdrawn + stats.held:
            raise Violation("balance", f"acquires != releases + withdrawn + held ({stats})")
        if self.entered != sorted(self.entered):
            raise Violation("fifo", f"calls entered out of arrival order: {self.entered}")
        if self.cancelled_waiting & set(self.entered):
            raise Violation(
                "cancel", f"cancelled waiters entered: {sorted(self.cancelled_waiting & set(self.entered))}"
            )


def local_ops() -> st.SearchStrategy[Op]:
    pick = st.integers(0, 7)
    return st.one_of(
        st.just({"op": "start"}),
        st.builds(lambda p, f: {"op": "finish", "pick": p, "fail": f}, pick, st.booleans()),
        st.builds(lambda p: {"op": "cancel", "pick": p}, pick),
        st.just({"op": "release_foreign"}),
    )


# ---------------------------------------------------------------------------------------------------- machines

#: Scenario factories by machine name and implementation ("real" is what ships; others are deliberately broken toys).
SCENARIOS: dict[str, dict[str, Callable[[], Scenario]]] = {
    "limiter-core": {
        "real": lambda: LimiterScenario(CoreAdapter),
        "toy-lifo": lambda: LimiterScenario(LifoAdapter),
    },
    "limiter-redis": {"real": lambda: LimiterScenario(RedisAdapter)},
    "limiter-local": {"real": LocalLimiterScenario},
}


def register_scenario(machine: str, implementation: str, factory: Callable[[], Scenario]) -> None:
    """Make a scenario replayable by name (e.g. the tool scenario, which needs a running emulator)."""
    SCENARIOS.setdefault(machine, {})[implementation] = factory


def replay(regression: Regression, implementation: str = "real") -> Violation | None:
    """Apply a saved schedule to one implementation; the violation it hits, or None when every invariant holds."""
    factories: Mapping[str, Callable[[], Scenario]] = SCENARIOS.get(regression.machine, {})
    if implementation not in factories:
        raise ValueError(f"no scenario {regression.machine!r} / {implementation!r}; known: {sorted(SCENARIOS)}")
    scenario = factories[implementation]()
    try:
        for op in regression.ops:
            scenario.apply(op)
    except Violation as violation:
        return violation
    finally:
        scenario.close()
    return None


def search_machine(
    machine: str,
    make: Callable[[], Scenario],
    setup: st.SearchStrategy[Op],
    ops: st.SearchStrategy[Op],
    *,
    found_with: str = "real",
    regression_dir: Path | None = None,
) -> type[RuleBasedStateMachine]:
    """A hypothesis state machine over ``make()``'s scenario; a violation saves the operations so far to
    ``regression_dir`` (the last save is hypothesis' final, shrunk example) and fails the test."""

    class SearchMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.scenario = make()
            self.ops: list[Op] = []

        def _apply(self, op: Op) -> None:
            self.ops.append(op)
            try:
                self.scenario.apply(op)
            except Violation as violation:
                if regression_dir is not None:
                    save_regression(regression_dir, machine, found_with, violation, self.ops)
                raise

        @initialize(op=setup)
        def start(self, op: Op) -> None:
            self._apply(op)

        @rule(op=ops)
        def step(self, op: Op) -> None:
            self._apply(op)

        def teardown(self) -> None:
            self.scenario.close()

    SearchMachine.__name__ = SearchMachine.__qualname__ = f"Search_{machine.replace('-', '_')}_{found_with}"
    return SearchMachine


# ---------------------------------------------------------------------------------------------------- the tool

RUN_CODE = "sandbox_fusion.run_code"

#: Faults the tool scenario injects, by name, with whether the tool should retry them.
TOOL_FAULTS: dict[str, tuple[Any, bool]] = {
    "503": ({"status": 503}, True),
    "504": ({"status": 504}, True),
    "429": ({"status": 429, "retry_after": 0}, True),
    "500": ({"status": 500}, True),
    "400": ({"status": 400}, False),
    "reset": ("reset", True),
    "truncate": ({"truncate": {"keep_fraction": 0.5}}, True),
    "malformed": ("malformed", True),
    "sandbox_error": ("sandbox_error", True),
    "null_stdout": ("null_stdout", True),
}


class ToolScenario:
    """``SandboxFusionTool`` against the in-process emulator under a generated fault schedule.

    Operations: ``setup(max_attempts)``, ``fault(first, last, kind)`` (a rule failing attempts ``first..last`` of
    every call with ``kind``), ``slow(first, last, ms)`` (latency only), ``call(parallel)`` (that many distinct
    programs at once). Checked on every call: no infrastructure fault reaches the model as program output, the
    observation is the program's real output whenever the budget covers the first clean attempt, attempts stay
    within the budget and match the requests the emulator saw.
    """

    def __init__(self, server: Any = None, tool_class: Any = None) -> None:
        from emulator.server import EmulatorServer

        self.tool_class = tool_class
        self._own = server is None
        self.server = EmulatorServer().start() if server is None else server
        self.loop = asyncio.new_event_loop()
        self.tool: Any = None
        self.max_attempts = 0
        self.rules: list[dict[str, Any]] = []
        self.calls = 0
        self.nonce = next(_names)

    def apply(self, op: Op) -> None:
        args = {k: v for k, v in op.items() if k != "op"}
        handler = getattr(self, f"_op_{op['op']}", None)
        if handler is None:
            raise ValueError(f"unknown tool operation {op['op']!r}")
        if op["op"] != "setup" and self.tool is None:
            raise ValueError("the first operation must be setup")
        handler(**args)

    def close(self) -> None:
        if self.tool is not None:
            self.loop.run_until_complete(self.tool.aclose())
        self.loop.close()
        self.server.emulator.set_faults(None)
        self.server.emulator.reset()
        if self._own:
            self.server.stop()

    def _op_setup(self, max_attempts: int) -> None:
        from harness.tools.sandbox_fusion import SandboxFusionTool

        self.max_attempts = max_attempts
        self.server.emulator.set_faults(None)
        self.server.emulator.reset()
        retry = {"max_attempts": max_attempts, "base_delay": 0.0, "max_delay": 0.0}
        config = {"sandbox_fusion_url": self.server.run_code_url, "retry": retry, "rate_limiter": {"backend": "local"}}
        self.tool = (self.tool_class or SandboxFusionTool)(config)

    def _push(self, rule: dict[str, Any]) -> None:
        rule["id"] = f"r{len(self.rules) + 1}"
        self.rules.append(rule)
        self.server.emulator.set_faults({"rules": self.rules})

    def _op_fault(self, first: int, last: int, kind: str) -> None:
        self._push({"route": RUN_CODE, "attempts": f"{first}-{max(first, last)}", "fault": TOOL_FAULTS[kind][0]})

    def _op_slow(self, first: int, last: int, ms: int) -> None:
        self._push({"route": RUN_CODE, "attempts": f"{first}-{max(first, last)}", "latency": {"fixed": ms / 1000}})

    def _fault_at(self, attempt: int) -> str | None:
        for spec in self.rules:
            first, last = (int(x) for x in spec["attempts"].split("-"))
            if "fault" in spec and first <= attempt <= last:
                return next(name for name, (fault, _) in TOOL_FAULTS.items() if fault == spec["fault"])
        return None

    def _expected(self) -> tuple[bool, int]:
        """(the program's output is shown, attempts the tool makes)."""
        for attempt in range(1, self.max_attempts + 1):
            fault = self._fault_at(attempt)
            if fault is None:
                return True, attempt
            if not TOOL_FAULTS[fault][1]:
                return False, attempt
        return False, self.max_attempts

    def _op_call(self, parallel: int) -> None:
        from harness.tools.observations import INFRA_FAULT_OBSERVATION

        unavailable = INFRA_FAULT_OBSERVATION.split("{", 1)[0]
        journal = self.server.emulator.journal
        before = len(journal.entries(RUN_CODE))
        programs = []
        for _ in range(parallel):
            self.calls += 1
            programs.append((f"print({self.nonce} * 1000 + {self.calls})", f"{self.nonce * 1000 + self.calls}\n"))

        async def run_all() -> list[Any]:
            return await asyncio.gather(*(self.tool.execute("chaos", {"code": code}) for code, _ in programs))

        results = self.loop.run_until_complete(run_all())
        shown, attempts = self._expected()
        for (code, output), (response, _, metrics) in zip(programs, results, strict=True):
            text = response.text
            if text != output and not text.startswith(unavailable):
                raise Violation("fault-as-output", f"{code!r} showed {text!r} (faults {self.rules})")
            if shown and text != output:
                raise Violation("observation", f"{code!r} showed {text!r}, budget {self.max_attempts} sufficed")
            if not shown and text == output:
                raise Violation("observation", f"{code!r} showed output although every attempt failed")
            if metrics["attempts"] > self.max_attempts:
                raise Violation("budget", f"{metrics['attempts']} attempts with a budget of {self.max_attempts}")
            if metrics["attempts"] != attempts:
                raise Violation("attempts", f"{metrics['attempts']} attempts, expected {attempts} ({self.rules})")
        seen = len(journal.entries(RUN_CODE)) - before
        if seen != attempts * parallel:
            raise Violation("attempts", f"the emulator saw {seen} requests for {parallel} calls of {attempts} attempts")


def tool_setup() -> st.SearchStrategy[Op]:
    return st.builds(lambda n: {"op": "setup", "max_attempts": n}, st.integers(1, 4))


def tool_ops() -> st.SearchStrategy[Op]:
    attempt = st.integers(1, 4)
    return st.one_of(
        st.builds(
            lambda a, b, k: {"op": "fault", "first": a, "last": b, "kind": k},
            attempt,
            attempt,
            st.sampled_from(sorted(TOOL_FAULTS)),
        ),
        st.builds(
            lambda a, b, ms: {"op": "slow", "first": a, "last": b, "ms": ms}, attempt, attempt, st.integers(1, 5)
        ),
        st.builds(lambda n: {"op": "call", "parallel": n}, st.integers(1, 3)),
    )


register_scenario("tool-sandbox-fusion", "real", ToolScenario)


# ---------------------------------------------------------------------------------------------------- Daytona

#: Routes the Daytona scenario puts faults on: the control plane the tool uses, and the interpreter.
DAYTONA_ROUTES = (
    "daytona.sandbox.create",
    "daytona.sandbox.delete",
    "daytona.sandbox.list",
    "daytona.interpreter.execute",
)
#: The throttler a Daytona 429 names on each route (``Retry-After-<throttler>``).
_THROTTLER = {
    "daytona.sandbox.create": "sandbox-create",
    "daytona.sandbox.delete": "sandbox-lifecycle",
    "daytona.sandbox.list": "authenticated",
    "daytona.interpreter.execute": "authenticated",
}
#: Fault kinds of the Daytona search (a 504 broke the tool until it told a gateway 504 from the program's timeout;
#: the saved ``tool-daytona-real-*`` regressions replay those cases).
DAYTONA_FAULTS = ("429", "500", "502", "503", "504", "reset", "truncate")
DAYTONA_FAULTS_WITH_504 = DAYTONA_FAULTS
DAYTONA_RETRY_AFTER_S = 1


def _daytona_fault(route: str, kind: str) -> Any:
    if kind == "429":
        from emulator.faults.bodies import DAYTONA_429_BODY

        header = f"Retry-After-{_THROTTLER[route]}"
        return {"status": 429, "headers": {header: str(DAYTONA_RETRY_AFTER_S)}, "body": DAYTONA_429_BODY}
    if kind in ("reset", "truncate"):
        return kind
    return {"status": int(kind)}


class DaytonaEnv:
    """A virtual-time loop with the emulator served inside it, shared by many scenarios (start-up costs real time)."""

    def __init__(self) -> None:
        from harness.chaos.inloop import in_loop_emulator
        from harness.chaos.vtime import VirtualTime

        self.time = VirtualTime()
        self._stack = contextlib.AsyncExitStack()
        self.emu = self.time.run(self._stack.enter_async_context(in_loop_emulator()))

    def close(self) -> None:
        try:
            self.time.run(self._stack.aclose())
        finally:
            self.time.close()


def _failed(entry: Any) -> bool:
    return entry.fault is not None or entry.status is None or entry.status >= 400


class DaytonaScenario:
    """``DaytonaTool`` through the real daytona SDK against the in-loop emulator on virtual time.

    Operations: ``setup(scope, max_attempts)``, ``fault(route, first, last, kind)`` (attempts ``first..last`` of a
    logical request on ``route`` fail with ``kind``; the emulator counts attempts per (route, key): a create's key is
    its body, an interpreter's its sandbox, so in ``trajectory`` scope later calls continue the count, and every
    list or delete shares one count), ``slow(route, ms)``, ``call(trajectory)`` (create, run a distinct program,
    release; in ``trajectory`` scope the trajectory's sandbox is reused), ``finish`` (close the tool, open a new one).

    Checked on every call, from the observation and the emulator's journal: no exception escapes the tool; the
    observation is the program's output or the infrastructure-fault observation (anything else is a fault shown as
    output); the tool shows the fault only when it spent its budget (``max_attempts`` failed interpreter requests,
    or as many failed create attempts, a failed list counting as one), or when the trajectory's sandbox could not be
    made earlier (the tool keeps that verdict for the trajectory); no chain exceeds the budget; no blind re-create
    (:mod:`harness.chaos.compliance`), and every ``Retry-After`` within the call was waited out. On ``finish`` (and
    in ``call`` scope after each release): every sandbox not deleted had its delete tried ``max_attempts`` times.
    """

    def __init__(self, env: DaytonaEnv | None = None) -> None:
        self._own = env is None
        self.env = DaytonaEnv() if env is None else env
        self.tool: Any = None
        self.scope = "call"
        self.max_attempts = 0
        self.rules: list[dict[str, Any]] = []
        self.calls = 0
        self.broken: set[str] = set()
        self.nonce = next(_names)

    @property
    def emulator(self) -> Any:
        return self.env.emu.emulator

    def apply(self, op: Op) -> None:
        args = {k: v for k, v in op.items() if k != "op"}
        handler = getattr(self, f"_op_{op['op']}", None)
        if handler is None:
            raise ValueError(f"unknown Daytona operation {op['op']!r}")
        if op["op"] != "setup" and self.tool is None:
            raise ValueError("the first operation must be setup")
        handler(**args)

    def close(self) -> None:
        try:
            if self.tool is not None:
                self.env.time.run(self.tool.aclose())
                self.tool = None
            self.emulator.set_faults(None)
            self.emulator.reset()
        finally:
            if self._own:
                self.env.close()

    def _new_tool(self) -> Any:
        from harness.tools.daytona import DaytonaTool

        retry = {"max_attempts": self.max_attempts, "base_delay": 0.5, "max_delay": 2.0}
        config = {
            "api_url": self.env.emu.daytona_api_url,
            "api_key": self.env.emu.daytona_api_key,
            "sandbox_scope": self.scope,
            "retry": retry,
            "rate_limiter": {"backend": "local"},
        }
        with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints its schema
            return DaytonaTool(config)

    def _op_setup(self, scope: str, max_attempts: int) -> None:
        if scope not in ("call", "trajectory"):
            raise ValueError(f"scope must be 'call' or 'trajectory', got {scope!r}")
        self.scope, self.max_attempts = scope, max_attempts
        self.emulator.set_faults(None)
        self.emulator.reset()
        self.tool = self._new_tool()

    def _push(self, rule: dict[str, Any]) -> None:
        rule["id"] = f"r{len(self.rules) + 1}"
        self.rules.append(rule)
        self.emulator.set_faults({"rules": self.rules})

    def _op_fault(self, route: str, first: int, last: int, kind: str) -> None:
        if route not in DAYTONA_ROUTES or kind not in DAYTONA_FAULTS_WITH_504:
            raise ValueError(f"unknown Daytona route or fault: {route!r}, {kind!r}")
        attempts = f"{first}-{max(first, last)}"
        self._push({"route": route, "attempts": attempts, "fault": _daytona_fault(route, kind)})

    def _op_slow(self, route: str, ms: int) -> None:
        self._push({"route": route, "latency": {"fixed": ms / 1000}})

    def _op_call(self, trajectory: int) -> None:
        from harness.tools.observations import INFRA_FAULT_OBSERVATION

        unavailable = INFRA_FAULT_OBSERVATION.split("{", 1)[0]
        journal = self.emulator.journal
        before = {e.seq for e in journal.entries("daytona")}
        self.calls += 1
        number = self.nonce * 10_000 + self.calls
        code, output = f"print({number})", f"{number}\n"
        owner = f"traj-{self.nonce}-{trajectory}"

        async def one_call() -> Any:
            agent = _AgentData(owner) if self.scope == "trajectory" else None
            instance_id, _ = await self.tool.create()
            try:
                return await self.tool.execute(instance_id, {"code": code}, agent_data=agent)
            finally:
                await self.tool.release(instance_id)

        try:
            response, _, _ = self.env.time.run(one_call())
        except Exception as exc:
            raise Violation("crash", f"the tool raised {type(exc).__name__}: {exc} (faults {self.rules})") from None
        text = response.text
        entries = [e for e in journal.entries("daytona") if e.seq not in before]
        where = f"{self.scope} scope, budget {self.max_attempts}, faults {self.rules}"
        if text != output and not text.startswith(unavailable):
            raise Violation("fault-as-output", f"{code!r} showed {text!r} ({where})")
        runs = [e for e in entries if e.route == "daytona.interpreter.execute"]
        creates = [e for e in entries if e.route == "daytona.sandbox.create"]
        lists = [e for e in entries if e.route == "daytona.sandbox.list"]
        budget = self.max_attempts
        if len(runs) > budget or any(n > budget for n in Counter(e.key for e in creates).values()):
            raise Violation("budget", f"more than {budget} tries of one request ({where})")
        if text == output:
            if not runs or _failed(runs[-1]):
                raise Violation("observation", f"{code!r} showed its output without a clean interpreter run")
        else:
            sticky = self.scope == "trajectory" and owner in self.broken and not creates
            spent_run = len(runs) == budget and all(_failed(e) for e in runs)
            spent_create = len(creates) + sum(1 for e in lists if _failed(e)) >= budget and not runs
            if not (sticky or spent_run or spent_create):
                raise Violation("gave-up-early", f"{code!r} showed {text!r} before its budget was spent ({where})")
            if not runs:
                self.broken.add(owner)
        self._check_compliance(entries, where)
        if self.scope == "call":
            self._check_deleted(where)

    def _check_compliance(self, entries: list[Any], where: str) -> None:
        from harness.chaos.compliance import ComplianceRules, check_compliance

        # Each interpreter run is a chain of its own now (the judge tells programs apart), so the retry budget is the
        # judge's to check too; the SDK's own re-sends of a reset DELETE are not the tool's tries.
        resent = _resent_deletes(self.emulator.journal.entries("daytona.sandbox.delete"))
        rules = ComplianceRules(max_attempts=self.max_attempts, skip=("jitter",))
        tries = [e for e in entries if e.seq not in resent]
        report = check_compliance(tries, rules, decisions=self.emulator.engine.log.records)
        if report.findings:
            finding = report.findings[0]
            raise Violation(finding.rule, f"{finding.message} ({where})")

    def _check_deleted(self, where: str) -> None:
        entries = self.emulator.journal.entries("daytona.sandbox.delete")
        resent = _resent_deletes(entries)
        deletes = Counter(e.path.rsplit("/", 1)[-1] for e in entries if e.seq not in resent)
        failed = Counter(
            e.path.rsplit("/", 1)[-1] for e in self.emulator.journal.entries("daytona.sandbox.delete") if _failed(e)
        )
        for sandbox_id, tries in deletes.items():
            if tries > self.max_attempts:
                raise Violation("budget", f"sandbox {sandbox_id} deleted {tries} times ({where})")
        for record in self.emulator.daytona_report().leaked:
            if failed[record.id] < self.max_attempts:
                raise Violation(
                    "leak",
                    f"sandbox {record.id} ({record.labels.get('instance_id')}) left behind after "
                    f"{deletes[record.id]} delete tries, budget {self.max_attempts} ({where})",
                )

    def _op_finish(self) -> None:
        try:
            self.env.time.run(self.tool.aclose())
        except Exception as exc:
            raise Violation("crash", f"aclose raised {type(exc).__name__}: {exc}") from None
        self._check_deleted(f"{self.scope} scope, after close, faults {self.rules}")
        self.broken.clear()
        self.tool = self._new_tool()


@dataclass(eq=False)
class _AgentData:
    """The part of verl's ``AgentData`` the tool reads (``request_id``); weak-referenceable like the real one."""

    request_id: str


def daytona_setup() -> st.SearchStrategy[Op]:
    return st.builds(
        lambda s, n: {"op": "setup", "scope": s, "max_attempts": n},
        st.sampled_from(["call", "trajectory"]),
        st.integers(1, 4),
    )


def daytona_ops(kinds: tuple[str, ...] = DAYTONA_FAULTS) -> st.SearchStrategy[Op]:
    attempt = st.integers(1, 4)
    route = st.sampled_from(DAYTONA_ROUTES)
    fault = st.builds(
        lambda r, a, b, k: {"op": "fault", "route": r, "first": a, "last": b, "kind": k},
        route,
        attempt,
        attempt,
        st.sampled_from(kinds),
    )
    return st.one_of(
        fault,
        st.builds(lambda r, ms: {"op": "slow", "route": r, "ms": ms}, route, st.integers(1, 3000)),
        st.builds(lambda t: {"op": "call", "trajectory": t}, st.integers(0, 1)),
        st.just({"op": "finish"}),
    )


register_scenario("tool-daytona", "real", DaytonaScenario)


# ---------------------------------------------------------------------------------------------------- Ray actor

#: Real seconds the Ray scenario waits for an answer that must come (a grant, an error after a kill).
RAY_WAIT_S = 20.0


@dataclass
class _RayWait:
    number: int
    generation: int
    task: asyncio.Task[Ticket]


class RayLimiterScenario:
    """Clients of the ``ray`` backend's named actor acquire, release, release twice, cancel waits, and the actor is
    killed and restarted (the next client to use the name creates a fresh one; a killed actor is never revived).

    What the backend promises, and what is checked after every operation, on the live actor's own stats: it never
    holds more than ``limit``; ``held`` and ``waiting`` are exactly the grants and waits the clients know of;
    ``acquires == releases + withdrawn + reclaimed + held``; waiters are granted in arrival order; a release of a
    ticket not held is refused and changes nothing; a cancelled wait never holds a permit. Across a kill: every wait
    on the dead actor ends in an error (never a grant), a ticket the dead actor granted cannot be released into the
    new one (a quiet no-op through the client that held it, refused through any other; the new actor's counters
    unchanged), so the new actor's capacity is exactly ``limit`` of its own grants. Not promised: holders of the dead
    actor's permits keep running, so until they finish up to twice ``limit`` calls may be in flight cluster-wide.
    """

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace
        self.loop = asyncio.new_event_loop()
        self.name = ""
        self.limit = 0
        self.generation = 0
        self.clients: list[Any] = []
        self.old_clients: list[Any] = []
        self.held: list[tuple[int, int, Ticket]] = []  # (generation, worker, ticket)
        self.stale: list[tuple[int, Ticket]] = []  # (worker of the old generation's client index, ticket)
        self.released: list[tuple[int, Ticket]] = []
        self.waiting: list[_RayWait] = []
        self.count = 0

    def apply(self, op: Op) -> None:
        args = {k: v for k, v in op.items() if k != "op"}
        handler = getattr(self, f"_op_{op['op']}", None)
        if handler is None:
            raise ValueError(f"unknown Ray limiter operation {op['op']!r}")
        if op["op"] != "setup" and not self.clients:
            raise ValueError("the first operation must be setup")
        handler(**args)
        self._check()

    def close(self) -> None:
        from harness.ratelimit.ray_backend import kill

        for wait in self.waiting:
            wait.task.cancel()
        with contextlib.suppress(Exception):
            self._run(asyncio.gather(*(w.task for w in self.waiting), return_exceptions=True))
        for client in self.clients + self.old_clients:
            with contextlib.suppress(Exception):
                self._run(client.aclose())
        if self.name:
            with contextlib.suppress(Exception):  # a kill that times out must not keep the loop open
                kill(self.name, namespace=self.namespace)
        self.loop.close()

    def _run(self, awaitable: Any, timeout: float = RAY_WAIT_S) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(awaitable, timeout))

    def _new_clients(self) -> None:
        from harness.ratelimit import LimiterConfig
        from harness.ratelimit.ray_backend import RayLimiter

        config = LimiterConfig(name=self.name, limit=self.limit, lease_s=600.0)
        self.old_clients += self.clients
        self.clients = [RayLimiter(config, namespace=self.namespace) for _ in range(WORKERS)]

    def _stats(self) -> LimiterStats:
        stats: LimiterStats = self._run(self.clients[0].stats())
        return stats

    def _op_setup(self, limit: int) -> None:
        self.name = f"chaos-ray-{next(_names)}-{id(self):x}"
        self.limit = limit
        self._new_clients()

    def _op_acquire(self, worker: int) -> None:
        w = worker % WORKERS
        task = self.loop.create_task(self.clients[w].acquire())
        self.count += 1
        wait = _RayWait(self.count, self.generation, task)
        if len(self.held) < self.limit and not self.waiting:
            try:
                ticket = self._run(asyncio.shield(task))
            except Exception as exc:
                raise Violation("acquire", f"acquire with a free permit failed: {type(exc).__name__}: {exc}") from None
            self.held.append((self.generation, w, ticket))
            return
        self.waiting.append(wait)
        self._until(lambda s: s.waiting == len(self.waiting), "the actor never queued the acquire")
        if task.done():
            raise Violation("cap", f"acquire {wait.number} was granted with {len(self.held)} of {self.limit} held")

    def _until(self, done: Callable[[LimiterStats], bool], why: str) -> None:
        """Poll the actor's stats until ``done`` (a Ray call gives no event to wait on)."""
        deadline = self.loop.time() + RAY_WAIT_S
        while not done(self._stats()):
            if self.loop.time() > deadline:
                raise Violation("stuck", why)
            self._run(asyncio.sleep(0.01))

    def _op_release(self, pick: int) -> None:
        if not self.held:
            return
        _, w, ticket = self.held.pop(pick % len(self.held))
        self._run(self.clients[w].release(ticket))
        self.released.append((w, ticket))
        if self.waiting:
            first = self.waiting.pop(0)
            try:
                granted = self._run(asyncio.shield(first.task))
            except Exception as exc:
                raise Violation("fifo", f"the oldest waiter {first.number} was not granted: {exc!r}") from None
            owner = next(i for i, c in enumerate(self.clients) if c.holder == granted.holder)
            self.held.append((self.generation, owner, granted))
            early = [w.number for w in self.waiting if w.task.done()]
            if early:
                raise Violation("fifo", f"waiters {early} were granted with one permit freed")

    def _op_release_twice(self, pick: int) -> None:
        if not self.released:
            return
        w, ticket = self.released[pick % len(self.released)]
        self._refused_release(self.clients[w], ticket, "a second release")

    def _refused_release(self, client: Any, ticket: Ticket, what: str, *, no_op_ok: bool = False) -> None:
        """The release raises (``LimiterError``), or with ``no_op_ok`` (the client that held a dead actor's ticket)
        returns quietly; either way the live actor's counters do not move."""
        before = self._stats()
        try:
            self._run(client.release(ticket))
        except Exception:  # LimiterError: not this client's ticket, or not this actor's
            pass
        else:
            if not no_op_ok:
                raise Violation("over-release", f"{what} of {ticket.request_id} was accepted")
        after = self._stats()
        if (after.releases, after.held, after.late_releases) != (before.releases, before.held, before.late_releases):
            raise Violation("over-release", f"{what} of {ticket.request_id} changed the counters: {before} -> {after}")

    def _op_cancel(self, pick: int) -> None:
        if not self.waiting:
            return
        wait = self.waiting.pop(pick % len(self.waiting))
        wait.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            self._run(asyncio.gather(wait.task, return_exceptions=True))
        self._until(lambda s: s.waiting == len(self.waiting), f"cancelled acquire {wait.number} still queued")

    def _op_kill_restart(self) -> None:
        from harness.ratelimit.ray_backend import kill

        if not kill(self.name, namespace=self.namespace):
            raise Violation("kill", f"no actor named {self.name!r} to kill")
        for wait in self.waiting:
            try:
                ticket = self._run(asyncio.shield(wait.task))
            except asyncio.TimeoutError:
                raise Violation("stuck", f"acquire {wait.number} still waits on the killed actor") from None
            except Exception:
                continue
            raise Violation("double-grant", f"acquire {wait.number} was granted {ticket} by a killed actor")
        self.waiting = []
        self.stale += [(w, t) for _, w, t in self.held]
        self.held = []
        self.released = []
        self.generation += 1
        stale_clients = self.clients
        self._new_clients()
        for w, ticket in self.stale:
            # Through the client that held it: a quiet no-op (the dead actor's count died with it).
            self._refused_release(stale_clients[w], ticket, "a release of a dead actor's ticket", no_op_ok=True)
            # Through a client of the new actor (a restarted worker that kept the ticket) it is refused too.
            self._refused_release(self.clients[w], ticket, "a release of a dead actor's ticket via a new client")

    def _check(self) -> None:
        if not self.clients:
            return
        stats = self._stats()
        if stats.held > self.limit:
            raise Violation("cap", f"the actor holds {stats.held} with limit {self.limit}")
        if (stats.held, stats.waiting) != (len(self.held), len(self.waiting)):
            raise Violation(
                "balance",
                f"actor: {stats.held} held, {stats.waiting} waiting; clients: {len(self.held)}, {len(self.waiting)}",
            )
        if stats.acquires != stats.releases + stats.withdrawn + stats.reclaimed + stats.held:
            raise Violation("balance", f"acquires != releases + withdrawn + reclaimed + held ({stats})")


def ray_ops() -> st.SearchStrategy[Op]:
    """Generated operations for :class:`RayLimiterScenario` (after a ``setup``)."""
    worker = st.integers(0, WORKERS - 1)
    pick = st.integers(0, 7)
    return st.one_of(
        st.builds(lambda w: {"op": "acquire", "worker": w}, worker),
        st.builds(lambda p: {"op": "release", "pick": p}, pick),
        st.builds(lambda p: {"op": "release_twice", "pick": p}, pick),
        st.builds(lambda p: {"op": "cancel", "pick": p}, pick),
        st.just({"op": "kill_restart"}),
    )


register_scenario("limiter-ray", "real", RayLimiterScenario)


def _resent_deletes(entries: Sequence[Any]) -> set[int]:
    """Seqs of DELETEs the SDK's HTTP layer sent again at once after a reset (an idempotent method): not tool
    attempts, so they count against no budget."""
    return {b.seq for a, b in itertools.pairwise(entries) if a.fault == "reset" and a.path == b.path}
