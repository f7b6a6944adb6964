"""Hypothesis state machines over the limiter rules, on the local/Ray engine (``LimiterCore``) and on the Redis Lua
script (fakeredis), with a simulated clock: acquire, release, double release, cancel (withdraw), crash a holder,
let time pass. Invariants: never over the cap, strict FIFO (no later request is granted while an earlier one
waits), balance (acquires = releases + withdrawn + reclaimed + held), live holders never lose a lease, dead
holders' leases come back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.chaos.search import CoreAdapter, RedisAdapter  # the adapters the schedule search drives, too
from harness.ratelimit import LimiterConfig, LimiterError

LEASE = 1.0
HOLDERS = 3


GRANTED = {"held", "released", "withdrawn", "reclaimed", "late"}


class LimiterMachine(RuleBasedStateMachine):
    adapter_class: Any = CoreAdapter

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.counter = 0
        self.order: list[str] = []  # request ids in arrival order
        self.holder_of: dict[str, str] = {}
        self.ever_granted: set[str] = set()
        self.state: dict[str, str] = {}
        self.released: list[str] = []
        self.dead: dict[str, float] = {}  # holder -> time of death
        self.last_beat: dict[str, float] = {}

    @initialize(cap=st.integers(1, 3))
    def setup(self, cap: int) -> None:
        self.cap = cap
        name = f"prop-{id(self)}-{self.now}"
        self.adapter = self.adapter_class(LimiterConfig(name=name, limit=cap, lease_s=LEASE))

    def _refresh(self) -> None:
        for rid in self.order:
            if self.state.get(rid) in (None, "waiting", "held"):
                self.state[rid] = self.adapter.status(rid, self.now)
                if self.state[rid] == "held":
                    self.ever_granted.add(rid)

    def _live(self, want: str) -> list[str]:
        return [r for r in self.order if self.state.get(r) == want and self.holder_of[r] not in self.dead]

    @rule(holder=st.integers(0, HOLDERS - 1))
    def acquire(self, holder: int) -> None:
        if str(holder) in self.dead:
            return
        self.counter += 1
        rid = f"r{self.counter}"
        self.order.append(rid)
        self.holder_of[rid] = str(holder)
        assert self.adapter.enqueue(rid, str(holder), self.now) in ("waiting", "held")
        self._refresh()

    @precondition(lambda self: bool(self._live("held")))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(self._live("held")))
        assert self.adapter.release(rid, self.now) == "released"
        self.released.append(rid)
        self._refresh()

    @precondition(lambda self: bool(self.released))
    @rule(data=st.data())
    def double_release(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(self.released))
        before = self.adapter.stats(self.now)
        with pytest.raises(LimiterError):
            self.adapter.release(rid, self.now)
        after = self.adapter.stats(self.now)
        assert after.releases == before.releases

    @rule()
    def release_never_granted(self) -> None:
        with pytest.raises(LimiterError):
            self.adapter.release("never-granted", self.now)

    @precondition(lambda self: bool(self._live("held") or self._live("waiting")))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(self._live("held") + self._live("waiting")))
        was = self.state[rid]
        assert self.adapter.withdraw(rid, self.now) == ("returned" if was == "held" else "dequeued")
        assert self.adapter.withdraw(rid, self.now) == "none"  # a second withdraw gives nothing back
        self._refresh()

    @rule(holder=st.integers(0, HOLDERS - 1))
    def crash(self, holder: int) -> None:
        self.dead.setdefault(str(holder), self.now)

    @rule(steps=st.integers(1, 4))
    def time_passes(self, steps: int) -> None:
        """Advance in steps of 0.4 lease; live holders heartbeat after each step."""
        for _ in range(steps):
            self.now = round(self.now + 0.4 * LEASE, 3)
            for holder in map(str, range(HOLDERS)):
                if holder in self.dead:
                    continue
                mine = [
                    r for r in self.order if self.holder_of[r] == holder and self.state.get(r) in ("held", "waiting")
                ]
                self.adapter.heartbeat(holder, mine, self.now)
            self._refresh()

    @invariant()
    def never_over_cap(self) -> None:
        if hasattr(self, "adapter"):
            assert sum(1 for s in self.state.values() if s == "held") <= self.cap
            assert self.adapter.stats(self.now).held <= self.cap

    @invariant()
    def fifo(self) -> None:
        waiting_seen = False
        for rid in self.order:
            if self.state.get(rid) == "waiting":
                waiting_seen = True
            elif waiting_seen:
                assert rid not in self.ever_granted, f"{rid} granted while an earlier request waits"

    @invariant()
    def balance(self) -> None:
        if hasattr(self, "adapter"):
            s = self.adapter.stats(self.now)
            assert s.acquires == s.releases + s.withdrawn + s.reclaimed + s.held

    @invariant()
    def leases(self) -> None:
        for rid in self.order:
            holder, state = self.holder_of[rid], self.state.get(rid)
            if holder not in self.dead:
                assert state != "reclaimed", f"{rid} of a live holder was reclaimed"
            elif self.now - self.dead[holder] > LEASE + 0.5:
                assert state not in ("held", "waiting"), f"{rid} of a dead holder is still {state}"


class RedisLimiterMachine(LimiterMachine):
    adapter_class = RedisAdapter


TestCoreMachine = LimiterMachine.TestCase
TestCoreMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_redis_machine() -> None:
    pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        RedisLimiterMachine, settings=settings(max_examples=30, stateful_step_count=25, deadline=None)
    )


def _sync_core(config: LimiterConfig) -> Any:
    fakeredis = pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    from harness.ratelimit.redis_backend import RedisCoreSync

    return RedisCoreSync(config, fakeredis.FakeRedis())


T0 = 1_800_000_000.0  # a Redis server's clock (TIME), in seconds


def test_redis_clock_stepped_back_does_not_starve() -> None:
    """The Redis server's clock stepped back an hour (NTP, a resumed VM): grants go on at once and the token bucket
    is not driven negative (before, nothing was granted for an hour)."""
    core = _sync_core(LimiterConfig(name="clock-back", limit=100, rate_per_second=10.0))
    assert (core.call("enqueue", T0, "a", "h"), core.call("enqueue", T0 + 0.1, "b", "h")) == ("held", "held")
    back = T0 - 3600
    assert core.call("enqueue", back, "c", "h") == "held"  # 8 tokens were left: a step back takes none away
    # 0.1 s later: 8 + 1 tokens, so the bucket runs dry as usual at the tenth ...
    burst = [core.call("enqueue", back + 0.1, f"d{i}", "h") for i in range(10)]
    assert burst == ["held"] * 9 + ["waiting"]
    assert core.call("poll", back + 0.3, "d9") == "held"  # ... and refills at 10/s, not an hour later


def test_redis_clock_stepped_forward_keeps_live_leases() -> None:
    """The server's clock jumps two leases ahead: a live holder keeps its ticket; a holder that then goes silent loses
    it a lease of limiter time after its last heartbeat, which the jump shortened by at most lease / 3."""
    lease = 60.0
    core = _sync_core(LimiterConfig(name="clock-forward", limit=1, lease_s=lease))
    assert (core.call("enqueue", T0, "x", "h1"), core.call("enqueue", T0 + 1, "y", "h2")) == ("held", "waiting")
    assert core.call("heartbeat", T0 + 10, "h1", "x") == "1"
    jumped = T0 + 10 + 2 * lease
    assert (core.call("status", jumped, "x"), core.call("poll", jumped, "y")) == ("held", "waiting")
    t = jumped
    while core.call("poll", t, "y") == "waiting":  # y polls each second; h1 is silent from now on
        t += 1.0
        assert t < jumped + lease, "x was never reclaimed"
    assert core.call("status", t, "x") == "reclaimed"
    assert jumped + lease - lease / 3 - 1.0 <= t
