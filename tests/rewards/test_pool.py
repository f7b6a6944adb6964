"""The Daytona pool: created up front and concurrently, each completion run once, nothing left behind, whatever happens.

Decision under test: a run that fails outside the program (HTTP status, dropped connection) replaces its sandbox and
is retried once on another; a sandbox creation that fails is retried; a program timeout scores -1 and replaces the
sandbox without a retry.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

from emulator.journal import Journal
from emulator.server import EmulatorServer
from harness.chaos.judges import ChaosJudge
from harness.rewards import DaytonaPool, FusionBackend, PoolExhaustedError, SandboxReward

EXECUTE = "daytona.interpreter.execute"
CREATE = "daytona.sandbox.create"
GOOD = (
    "def sort_numbers(nums):\n"
    "    out = []\n"
    "    for x in nums:\n"
    "        out = [y for y in out if y < x] + [x] + [y for y in out if y >= x]\n"
    "    return out\n"
)
LOOP = "def sort_numbers(nums):\n    while True:\n        pass\n"


def _pool_reward(config: Any, size: int = 4, timeout: float = 1.0) -> SandboxReward:
    return SandboxReward(DaytonaPool(size, config), "sort_numbers", timeout=timeout)


def _pool_of(reward: SandboxReward) -> DaytonaPool:
    """The reward's backend, which these tests made a DaytonaPool."""
    pool = reward.backend
    assert isinstance(pool, DaytonaPool)
    return pool


#: Creation takes 0.3 s here, so creating the pool one sandbox after another would show at most one in flight.
@pytest.mark.faults({"rules": [{"id": "slow-create", "route": "daytona.sandbox.create", "latency": 0.3}]})
def test_every_completion_runs_once_in_a_pool_created_up_front(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    completions = [GOOD] * 10 + ["def sort_numbers(nums):\n    return sorted(nums)\n"]  # the last is banned: not run
    with _pool_reward(daytona_config, size=4) as reward:
        assert reward(["p"] * len(completions), completions) == [1.0] * 10 + [-1.0]
        pool = _pool_of(reward)
        assert pool.stats.executions == 10
    creates = emulator_journal.entries(CREATE)
    runs = emulator_journal.entries(EXECUTE)
    assert len(creates) == 4 and len(runs) == 10
    assert all(e.outcome == "ok" for e in runs)
    assert max(c.started for c in creates) < min(r.started for r in runs)  # all created before the first run
    assert emulator_journal.max_in_flight(CREATE) > 1  # concurrently (one after another would show 1)
    assert emulator_journal.max_in_flight(EXECUTE) <= 4  # one completion per sandbox at a time
    assert sandbox_emulator.emulator.daytona_report().leaked == []


def test_sandboxes_are_deleted_when_the_reward_raises_midway(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    with pytest.raises(ValueError, match="unknown task 'nope'"), _pool_reward(daytona_config) as reward:
        assert reward(["p"], [GOOD]) == [1.0]
        reward(["p"] * 3, [GOOD, GOOD, GOOD], task=["sort_numbers", "nope", "sort_numbers"])
    report = sandbox_emulator.emulator.daytona_report()
    assert len(report.sandboxes) == 4 and report.leaked == []


def test_sandboxes_are_deleted_on_ctrl_c(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    def interrupt_once_running() -> None:
        """Ctrl-C as soon as a completion is running in a sandbox."""
        emulator_journal.wait_for(lambda j: j.in_flight(EXECUTE) >= 1, timeout=10)
        os.kill(os.getpid(), signal.SIGINT)

    reward = SandboxReward(DaytonaPool(3, daytona_config), "sort_numbers", timeout=5.0)
    with pytest.raises(KeyboardInterrupt), reward:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        reward(["p"] * 3, [LOOP] * 3)  # 5 s each: interrupted long before
    assert len(emulator_journal.entries(EXECUTE)) >= 1
    report = sandbox_emulator.emulator.daytona_report()
    assert len(report.sandboxes) == 3 and report.leaked == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # close() gave Ctrl-C back


def test_timed_out_sandbox_is_replaced(daytona_config: Any, sandbox_emulator: EmulatorServer) -> None:
    with _pool_reward(daytona_config, size=2) as reward:
        assert reward(["p"] * 2, [LOOP, GOOD]) == [-1.0, 1.0]
        pool = _pool_of(reward)
        assert (pool.stats.timeouts, pool.stats.replaced, pool.stats.created) == (1, 1, 3)
        assert reward(["p"] * 2, [GOOD, GOOD]) == [1.0, 1.0]
    assert sandbox_emulator.emulator.daytona_report().leaked == []


FAULTS = {
    "rules": [
        {"route": CREATE, "requests": "2-3", "fault": 503},
        {"route": EXECUTE, "requests": "3-4", "fault": 503},
    ]
}


@pytest.mark.faults(FAULTS)
def test_failed_creations_and_runs_are_retried_and_nothing_leaks(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    with _pool_reward(daytona_config, size=4) as reward:
        scores = reward(["p"] * 8, [GOOD] * 8)
        pool = _pool_of(reward)
        stats = pool.stats
    assert scores == [1.0] * 8  # each failed run was retried on a replacement sandbox
    runs = emulator_journal.entries(EXECUTE)
    failed = [r for r in runs if r.fault is not None]
    assert len(failed) == 2 and len(runs) == 8 + 2
    assert stats.create_failures == 2 and stats.infra_failures == 2 and stats.replaced == 2
    creates = emulator_journal.entries(CREATE)
    assert len(creates) == 4 + 2 + 2  # up front (with 2 retries), then 2 replacements
    assert sandbox_emulator.emulator.daytona_report().leaked == []


@pytest.mark.faults({"rules": [{"route": EXECUTE, "fault": 503}]})
def test_runs_that_keep_failing_score_minus_one(daytona_config: Any, sandbox_emulator: EmulatorServer) -> None:
    with _pool_reward(daytona_config, size=2) as reward:
        assert reward(["p"] * 3, [GOOD] * 3) == [-1.0] * 3
    assert sandbox_emulator.emulator.daytona_report().leaked == []


@pytest.mark.faults({"rules": [{"route": CREATE, "fault": 503}]})
def test_a_pool_that_cannot_be_created_is_a_clear_error(daytona_config: Any, sandbox_emulator: EmulatorServer) -> None:
    pool = _pool_reward(daytona_config, 2)
    with pytest.raises(RuntimeError, match="none of the 2 sandboxes could be created") as raised, pool:
        pass
    assert "(last error: Daytona" in str(raised.value)  # the SDK's error for the 503, said with it


#: At most two creations a minute, refused with no wait named: the third sandbox of the pool is refused every try.
@pytest.mark.faults(
    {"limits": [{"name": "sandbox-create", "route": CREATE, "max_requests": 2, "per": 60, "headers_style": "none"}]}
)
def test_a_pool_that_falls_short_counts_the_sandboxes_it_could_not_create(
    daytona_config: Any, sandbox_emulator: EmulatorServer
) -> None:
    with _pool_reward(daytona_config, size=3) as reward:
        pool = _pool_of(reward)
        assert (pool.stats.created, pool.stats.not_created, pool.stats.create_failures) == (2, 1, 3)
        assert "Too Many Requests" in pool.last_create_error
        assert reward(["p"] * 2, [GOOD] * 2) == [1.0] * 2  # it runs with the two it has
    assert sandbox_emulator.emulator.daytona_report().leaked == []


#: The first creation is refused by a throttler that names a one-second wait, as Daytona's does
#: (``Retry-After-sandbox-create``).
@pytest.mark.faults({"rules": [{"route": CREATE, "requests": "1", "fault": {"status": 429, "retry_after": 1}}]})
def test_a_refused_creation_waits_the_retry_after_before_its_next_try(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    with _pool_reward(daytona_config, size=1) as reward:
        pool = _pool_of(reward)
        assert (pool.stats.created, pool.stats.create_failures, pool.stats.create_waits) == (1, 1, 1)
    refused, made = emulator_journal.entries(CREATE)
    assert (refused.status, made.status) == (429, 200)
    assert refused.finished is not None
    assert made.started - refused.finished >= 1.0  # it waited as asked (it used to try again at once)
    assert sandbox_emulator.emulator.daytona_report().leaked == []


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), True, "1"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a finite, positive number of seconds"):
        SandboxReward(DaytonaPool(1), "sort_numbers", timeout=timeout)


#: Creations 2 and 3 make their sandbox, then the answer is cut short: the SDK sees an error, the sandbox exists.
@pytest.mark.faults({"rules": [{"route": CREATE, "requests": "2-3", "fault": "truncate"}]})
def test_sandboxes_made_by_creations_whose_answer_was_lost_are_deleted(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    with _pool_reward(daytona_config, size=3) as reward:
        pool = _pool_of(reward)
        assert pool.stats.create_failures == 2 and pool.stats.orphans_deleted == 2  # swept once the pool was up
        assert reward(["p"] * 3, [GOOD] * 3) == [1.0] * 3
    report = sandbox_emulator.emulator.daytona_report()
    assert len(report.sandboxes) == 5 and report.leaked == []
    assert all(s.labels["pool"] == pool.pool_id for s in report.sandboxes)


@pytest.mark.parametrize(("fresh_context", "second"), [(True, -1.0), (False, 1.0)])
def test_a_completion_cannot_borrow_the_function_an_earlier_one_defined(
    daytona_config: Any, sandbox_emulator: EmulatorServer, fresh_context: bool, second: float
) -> None:
    """One sandbox, completions in turn. Each runs in a namespace of its own, so a later one cannot see an earlier
    one's globals; but the default context keeps the interpreter's state (here the builtins), so without a fresh
    context a later one can still borrow what an earlier one left there (Daytona's TRL example runs there)."""
    keep = "_b = __builtins__\n(_b if isinstance(_b, dict) else vars(_b))['sort_numbers'] = sort_numbers\n"
    first = GOOD + keep
    borrower = "sort_numbers = sort_numbers\n"  # found among the builtins, if an earlier completion put it there
    reward = SandboxReward(DaytonaPool(1, daytona_config, fresh_context=fresh_context), "sort_numbers", timeout=2.0)
    with reward:
        assert reward(["p"], [first]) == [1.0]
        assert reward(["p"], ["x = 1\n"]) == [-1.0]  # defines nothing: the first one's globals are not its own
        assert reward(["p"], [borrower]) == [second]
    assert sandbox_emulator.emulator.daytona_report().leaked == []


def test_a_sandbox_still_creating_after_its_create_timed_out_is_deleted_once_it_can_be() -> None:
    """The pool's create gives up (its timeout) while the sandbox is still creating; the sweep finds it by the pool's
    label, and the API refuses to delete it (409) until the creation is done: the pool waits that out."""
    from daytona import DaytonaConfig

    from emulator.app import Emulator, EmulatorConfig
    from emulator.daytona.config import DaytonaConfig as EmulatedDaytona

    emulator = Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key="k", create_latency=2.0)))
    with EmulatorServer(emulator) as server:
        pool = DaytonaPool(1, DaytonaConfig(api_url=server.url, api_key="k"), create_attempts=1, create_timeout=1.5)
        with (
            pytest.raises(RuntimeError, match="none of the 1 sandboxes could be created"),
            SandboxReward(pool, "sort_numbers", timeout=1.0),
        ):
            pass
        deletes = [e.status for e in server.emulator.journal.entries("daytona.sandbox.delete")]
        assert deletes[-1] == 200 and set(deletes[:-1]) == {409} and len(deletes) >= 2
        assert pool.stats.orphans_deleted == 1
        assert server.emulator.daytona_report().leaked == []


def _creation_tries(plan: dict[str, Any], pool_id: str | None) -> list[tuple[str, int, str | None]]:
    """(key, attempt, fault) of each sandbox creation a one-sandbox pool tried, on an emulator of its own."""
    from daytona import DaytonaConfig

    from emulator.app import Emulator, EmulatorConfig
    from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
    from emulator.faults import load_plan

    emulator = Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key="k")), faults=load_plan(plan))
    with EmulatorServer(emulator) as server:
        pool = DaytonaPool(1, DaytonaConfig(api_url=server.url, api_key="k"), pool_id=pool_id, create_attempts=4)
        with SandboxReward(pool, "sort_numbers", timeout=1.0):
            assert pool.labels["pool"] == pool.pool_id
        assert server.emulator.daytona_report().leaked == []
        return [(e.key, e.attempt, e.fault) for e in server.emulator.journal.entries(CREATE)]


def test_a_fixed_pool_id_makes_a_seeded_plan_fail_the_same_creations() -> None:
    """A fault plan decides by the request's body, and a creation's body holds the pool's label: with the same
    ``pool_id`` two pools send the same creations and a seeded plan fails the same tries (a random id is a fresh
    draw each time, so a job under faults could not be replayed)."""
    plan = {"seed": 5, "rules": [{"route": CREATE, "probability": 0.5, "fault": 503}]}
    first = _creation_tries(plan, "replay-me")
    assert first == _creation_tries(plan, "replay-me")
    assert first[0][2] is not None and first[-1][2] is None  # this seed fails a try, then lets one through
    # Without pool_id each pool makes another request, so another draw (asked with no faults: under the plan every try
    # might fail).
    random_ids = {_creation_tries({"rules": []}, None)[0][0] for _ in range(2)}
    assert len(random_ids) == 2 and first[0][0] not in random_ids


@pytest.mark.parametrize("pool_id", ["", "has space", "-lead", "x" * 64, "pool=x", 7])
def test_a_pool_id_that_is_not_a_plain_label_value_is_refused(pool_id: Any) -> None:
    with pytest.raises(ValueError, match="pool_id must be 1 to 63 letters"):
        DaytonaPool(1, pool_id=pool_id)


#: Every run fails outside the program, the three deletes of the failed sandbox fail, and no replacement can be made.
@pytest.mark.faults(
    {
        "rules": [
            {"route": EXECUTE, "fault": {"status": 503}},
            {"route": "daytona.sandbox.delete", "requests": "1-3", "fault": {"status": 503}},
            {"route": CREATE, "requests": "2-", "fault": {"status": 503}},
        ]
    }
)
def test_a_sandbox_that_could_not_be_deleted_is_not_waited_for(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    """A sandbox taken out of service whose delete failed is no longer one the pool can hand out: the pool is
    exhausted (a clear error), not waiting forever for it to come back; close deletes it."""
    outcome: list[BaseException | list[float]] = []

    def score() -> None:
        try:
            with _pool_reward(daytona_config, size=1) as reward:
                outcome.append(reward(["p"], [GOOD]))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=score, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the pool waited for a sandbox it had given up"
    [raised] = outcome
    assert isinstance(raised, RuntimeError) and "every sandbox failed and none could be replaced" in str(raised)
    assert [e.status for e in emulator_journal.entries("daytona.sandbox.delete")] == [503, 503, 503, 200]
    assert sandbox_emulator.emulator.daytona_report().leaked == []


def test_cleanup_skips_a_sandbox_whose_delete_is_under_way() -> None:
    """The real API lists a deleted sandbox, with the state it had and ``desiredState`` destroyed, until its runner
    has torn it down, and refuses a second delete then (409). The pool's sweep on close leaves it alone."""
    import httpx
    from daytona import DaytonaConfig

    from emulator.app import Emulator, EmulatorConfig
    from emulator.daytona.config import DaytonaConfig as EmulatedDaytona

    emulator = Emulator(EmulatorConfig(daytona=EmulatedDaytona(api_key="k", destroy_latency=600)))
    with EmulatorServer(emulator) as server:
        pool = DaytonaPool(1, DaytonaConfig(api_url=server.url, api_key="k"), create_timeout=2.0)
        with SandboxReward(pool, "sort_numbers", timeout=1.0):
            headers = {"Authorization": "Bearer k"}
            made = httpx.post(f"{server.url}/sandbox", json={"labels": {"pool": pool.pool_id}}, headers=headers)
            sandbox_id = made.json()["id"]
            assert httpx.delete(f"{server.url}/sandbox/{sandbox_id}", headers=headers).status_code == 200
            listed = httpx.get(
                f"{server.url}/sandbox", params={"labels": f'{{"pool": "{pool.pool_id}"}}'}, headers=headers
            )
            assert sandbox_id in [item["id"] for item in listed.json()["items"]]  # still listed, being torn down
        deletes = [e.status for e in server.emulator.journal.entries("daytona.sandbox.delete") if sandbox_id in e.path]
        assert deletes == [200]  # ours; the pool's sweep did not try it again
        assert pool.stats.deleted == 1  # the pool's own sandbox


#: The first creation makes the pool's one sandbox; every later one (the replacement after the timeout) is refused.
@pytest.mark.faults({"rules": [{"route": CREATE, "requests": "2-", "fault": {"status": 503}}]})
def test_a_completion_waiting_for_a_sandbox_is_woken_when_the_last_one_cannot_be_replaced(
    daytona_config: Any, sandbox_emulator: EmulatorServer
) -> None:
    """The second completion waits in the queue while the first times out; its sandbox is deleted and no replacement
    can be made, so the waiter must get the pool's clear error, not wait for a sandbox that will never come."""
    outcome: list[BaseException | list[float]] = []

    def score() -> None:
        try:
            with _pool_reward(daytona_config, size=1) as reward:
                outcome.append(reward(["p"] * 2, [LOOP, GOOD]))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=score, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "a completion waited for a sandbox that no one could make"
    [raised] = outcome
    assert isinstance(raised, PoolExhaustedError) and "none could be replaced" in str(raised)
    assert sandbox_emulator.emulator.daytona_report().leaked == []


DELETE = "daytona.sandbox.delete"
#: Every delete hangs for 5 s before failing: ten times the pool's bound below, and long enough to interrupt.
HANGING_DELETES = {"rules": [{"route": DELETE, "fault": {"hang": {"seconds": 5, "then": 504}}}]}


@pytest.mark.faults(HANGING_DELETES)
def test_close_is_bounded_and_reports_the_sandboxes_it_could_not_delete(
    daytona_config: Any, sandbox_emulator: EmulatorServer
) -> None:
    """The SDK's delete does not bound its own retries; the pool's close does, and says what it left behind."""
    pool = DaytonaPool(1, daytona_config, delete_attempts=2, delete_timeout=0.5, close_timeout=10.0)
    reward = SandboxReward(pool, "sort_numbers", timeout=1.0)
    with reward:
        assert reward(["p"], [GOOD]) == [1.0]
        [made] = pool._live
    assert pool.leaked == reward.leaked == [made]
    assert [s.id for s in sandbox_emulator.emulator.daytona_report().leaked] == [made]  # the report is true


@pytest.mark.faults(HANGING_DELETES)
def test_ctrl_c_stops_the_cleanup_and_the_sandboxes_left_are_reported(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    """Deleting the sandboxes is worth a wait, not an endless one: a Ctrl-C during close stops it."""

    def interrupt_once_deleting() -> None:
        deleting = lambda j: any(made in e.path and e.finished is None for e in j.entries(DELETE))  # noqa: E731
        emulator_journal.wait_for(deleting, timeout=10)
        os.kill(os.getpid(), signal.SIGINT)

    pool = DaytonaPool(1, daytona_config)
    reward = SandboxReward(pool, "sort_numbers", timeout=1.0)
    reward.open()
    assert reward(["p"], [GOOD]) == [1.0]
    [made] = pool._live
    threading.Thread(target=interrupt_once_deleting, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        reward.close()
    assert reward.leaked == [made]
    assert [s.id for s in sandbox_emulator.emulator.daytona_report().leaked] == [made]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("timeout", [0.5, 1.5])
def test_a_fraction_of_a_second_is_refused_for_daytona(timeout: float) -> None:
    """Daytona's run_code takes whole seconds and would round the limit (0.5 s let a 0.75 s program pass, while
    Sandbox Fusion stops it): refused rather than changed."""
    with pytest.raises(ValueError, match="whole seconds"):
        SandboxReward(DaytonaPool(1, None), "sort_numbers", timeout=timeout)
    SandboxReward(FusionBackend("http://127.0.0.1:9/run_code"), "sort_numbers", timeout=timeout)  # Fusion takes it
    SandboxReward(DaytonaPool(1, None), "sort_numbers", timeout=2.0)


#: The first two context creations are throttled, each asking for a 1 s wait.
THROTTLED = {
    "rules": [
        {
            "id": "busy",
            "route": "daytona.interpreter.context.create",
            "requests": "1-2",
            "fault": {"status": 429, "retry_after": 1},
        },
    ]
}


@pytest.mark.faults(THROTTLED)
def test_a_throttled_run_waits_as_asked_and_keeps_its_sandbox(
    daytona_config: Any, sandbox_emulator: EmulatorServer, emulator_journal: Journal
) -> None:
    """A 429 is the service asking for a pause, not a broken sandbox: the retry waits the Retry-After and runs on
    the same sandbox (replacing it would spend create quota against a throttled service)."""
    with _pool_reward(daytona_config, size=1) as reward:
        assert reward(["p"], [GOOD]) == [1.0]
        pool = _pool_of(reward)
        assert (pool.stats.throttled, pool.stats.replaced, pool.stats.created) == (2, 0, 1)
    assert len(emulator_journal.entries(CREATE)) == 1
    judge = ChaosJudge.of(sandbox_emulator.emulator)
    report = judge.compliance(routes=("daytona.interpreter.context.create",), skip=("jitter",))
    assert report.ok, report.render()
    assert len(report.waits) == 2 and all(waited >= required for _, _, required, waited in report.waits)


def test_a_replacement_made_after_the_exhausted_marker_is_handed_out() -> None:
    """Two sandboxes are replaced at once: one replacement fails while the other is still being made, so for a moment
    the pool has no live sandbox and wakes its waiters. The other then arrives; the pool must hand it out, not
    refuse every other completion with PoolExhaustedError."""
    from daytona import DaytonaError

    class Box:
        def __init__(self, name: str) -> None:
            self.id = name

        async def delete(self) -> None:
            return None

    async def main() -> list[str]:
        pool = DaytonaPool(2, create_attempts=1)
        pool._free = asyncio.Queue()
        first, second = Box("a"), Box("b")
        pool._live = {first.id: first, second.id: second}
        slow = asyncio.Event()
        started = asyncio.Event()
        creates: list[int] = []

        class Client:
            async def create(self, params: Any, timeout: Any = None) -> Box:
                creates.append(1)
                if len(creates) == 1:  # the second sandbox's replacement: slow, and it succeeds
                    started.set()
                    await slow.wait()
                    return Box("c")
                raise DaytonaError("HTTP 503")  # the first one's: fails

        pool._daytona = Client()
        later = asyncio.create_task(pool._replace(second))
        await started.wait()
        await pool._replace(first)  # no live sandbox now: the waiters are told
        slow.set()
        await later
        got: list[str] = []
        for _ in range(4):
            box = await pool._acquire()
            got.append(box.id)
            pool._free.put_nowait(box)
        return got

    assert asyncio.run(main()) == ["c"] * 4
