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
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from harness.chaos.regressions import Regression, Violation, save_regression
from harness.ratelimit import LimiterConfig, LimiterError, LimiterStats, LocalLimiter, Ticket
from harness.ratelimit.core import LimiterCore

__all__ = [
    "SCENARIOS",
    "CoreAdapter",
    "LifoCore",
    "LimiterScenario",
    "LocalLimiterScenario",
    "RedisAdapter",
    "Scenario",
    "ToolScenario",
    "limiter_ops",
    "limiter_setup",
    "local_ops",
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
        from harness.tools.sandbox_fusion import INFRA_FAULT_OBSERVATION

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
