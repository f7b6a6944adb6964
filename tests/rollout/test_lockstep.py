"""The batch-synchronous barrier: turn t+1 starts only when every live trajectory has finished turn t."""

from __future__ import annotations

import asyncio

import pytest

from harness.rollout.lockstep import TRAJECTORY_INDEX, LockstepServerManager, TurnBarrier


class RecordingManager:
    """Records the order of generate calls as (request id, turn)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, int]] = []
        self.turns: dict[str, int] = {}

    async def generate(self, request_id: str, **kwargs: object) -> str:
        turn = self.turns.get(request_id, 0)
        self.turns[request_id] = turn + 1
        self.order.append((request_id, turn))
        return f"{request_id}:{turn}"


async def _trajectory(
    manager: LockstepServerManager, barrier: TurnBarrier, index: int, tool_delays: list[asyncio.Event]
) -> None:
    """A trajectory: generate, then a 'tool call' that ends when its event is set, for each turn; then finish."""
    TRAJECTORY_INDEX.set(index)
    try:
        for event in tool_delays:
            await manager.generate(f"r{index}", prompt_ids=[])
            await event.wait()
        await manager.generate(f"r{index}", prompt_ids=[])
    finally:
        await barrier.finish(index)


def test_next_turn_waits_for_the_slowest_tool_call() -> None:
    async def main() -> tuple[list[tuple[str, int]], int]:
        inner = RecordingManager()
        barrier = TurnBarrier(2)
        manager = LockstepServerManager(inner, barrier)
        fast, slow = asyncio.Event(), asyncio.Event()
        tasks = [
            asyncio.create_task(_trajectory(manager, barrier, 0, [fast])),
            asyncio.create_task(_trajectory(manager, barrier, 1, [slow])),
        ]
        fast.set()
        for _ in range(20):  # let everything that can run, run
            await asyncio.sleep(0)
        # Trajectory 0's tool call is done, but its turn 1 must wait for trajectory 1's slow call.
        assert sorted(inner.order) == [("r0", 0), ("r1", 0)]
        slow.set()
        await asyncio.gather(*tasks)
        assert manager.request_of == {0: "r0", 1: "r1"}
        return inner.order, barrier.waits

    order, waits = asyncio.run(main())
    assert sorted(order[2:]) == [("r0", 1), ("r1", 1)]
    assert waits >= 1


def test_finished_trajectories_do_not_hold_the_others() -> None:
    """A trajectory that ends after one turn must not block later turns of the rest."""

    async def main() -> list[tuple[str, int]]:
        inner = RecordingManager()
        barrier = TurnBarrier(2)
        manager = LockstepServerManager(inner, barrier)
        done = asyncio.Event()
        done.set()
        await asyncio.gather(
            _trajectory(manager, barrier, 0, []),  # one generation, then finished
            _trajectory(manager, barrier, 1, [done, done, done]),
        )
        return inner.order

    order = asyncio.run(main())
    assert [t for r, t in order if r == "r1"] == [0, 1, 2, 3]


def test_without_a_barrier_the_manager_only_learns_request_ids() -> None:
    async def main() -> LockstepServerManager:
        manager = LockstepServerManager(RecordingManager())

        async def one(i: int) -> None:
            TRAJECTORY_INDEX.set(i)
            await manager.generate(f"id-{i}", prompt_ids=[])

        await asyncio.gather(*(one(i) for i in range(3)))
        return manager

    assert asyncio.run(main()).request_of == {0: "id-0", 1: "id-1", 2: "id-2"}


def test_a_barrier_needs_trajectories() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TurnBarrier(0)
