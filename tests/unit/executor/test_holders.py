"""A long-lived dir (a sandbox's home) belongs to the last of the uids running in it, and to root when none is; a big
tree is changed by a ``chown -R`` process, one change after the other, while the event loop goes on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path

import pytest

from emulator.executor.holders import INLINE_ENTRIES, Holders


def _done(pending: Awaitable[None] | None) -> None:
    """Wait for a hand-off that went to a chown process (None: it was done at once)."""
    if pending is not None:

        async def wait() -> None:
            await pending

        asyncio.run(wait())


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")


def _owners(root: Path) -> set[int]:
    return {root.stat().st_uid} | {p.lstat().st_uid for p in root.rglob("*")}


@needs_root
def test_the_tree_goes_to_the_holder_left_then_to_root(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "d").mkdir(parents=True)
    (home / "d" / "f").write_text("x")
    holders = Holders()
    _done(holders.take(str(home), 4001, 65534))
    assert _owners(home) == {4001}
    _done(holders.take(str(home), 4002, 65534))  # a second run of the same sandbox, at the same time
    (home / "made-by-4002").touch()
    os.chown(home / "made-by-4002", 4002, 65534)
    assert holders.holding(str(home)) == [4001, 4002]
    _done(holders.let_go(str(home), 4002))  # its uid goes back to the pool: nothing may stay its
    assert _owners(home) == {4001}
    _done(holders.let_go(str(home), 4001))
    assert _owners(home) == {0} and holders.holding(str(home)) == []


@needs_root
def test_taking_again_moves_a_holder_last_and_letting_go_of_a_gone_dir_is_quiet(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    holders = Holders()
    _done(holders.take(str(home), 4001, 65534))
    _done(holders.take(str(home), 4002, 65534))
    _done(holders.take(str(home), 4001, 65534))  # an interpreter context's next execution
    assert holders.holding(str(home)) == [4002, 4001] and _owners(home) == {4001}
    home.rmdir()  # its sandbox was deleted
    _done(holders.let_go(str(home), 4001))
    _done(holders.let_go(str(home), 4002))
    assert holders.holding(str(home)) == []
    assert holders.let_go(str(tmp_path / "never-held"), 4003) is None


@needs_root
def test_a_small_tree_changes_at_once_and_a_big_one_in_turn_off_the_loop(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    (small / "f").touch()
    for i in range(INLINE_ENTRIES * 2):
        (big / f"d{i % 8}").mkdir(parents=True, exist_ok=True)
        (big / f"d{i % 8}" / f"f{i}").touch()
    holders = Holders()

    async def scenario() -> tuple[list[bool], set[int]]:
        # Small, never seen or known: changed at once, here.
        at_once = [holders.take(str(small), 4001, 65534) is None]
        at_once.append(holders.let_go(str(small), 4001) is None and holders.take(str(small), 4002, 65534) is None)
        # A big tree: three changes asked at once run one after the other, each to the owner of its moment.
        changes = [holders.take(str(big), 4001, 65534), holders.take(str(big), 4002, 65534)]
        changes.append(holders.let_go(str(big), 4002))
        ticks = 0
        pending = [asyncio.ensure_future(_await(c)) for c in changes if c is not None]
        while not all(p.done() for p in pending):
            ticks += 1  # the loop turns while the chown processes work
            await asyncio.sleep(0)
        at_once.append(ticks > 0 and len(pending) == 3)
        return at_once, _owners(big)

    at_once, owners = asyncio.run(scenario())
    assert at_once == [True, True, True]
    assert owners == {4001} and _owners(small) == {4002}


async def _await(pending: Awaitable[None]) -> None:
    await pending


@needs_root
def test_a_tree_that_grew_goes_off_the_loop_and_a_cancelled_waiter_stops_no_change(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    holders = Holders()

    async def scenario() -> bool:
        assert holders.take(str(home), 4001, 65534) is None  # small: at once
        for i in range(INLINE_ENTRIES * 2):  # the run makes many files
            (home / f"f{i}").touch()
        waiting = holders.take(str(home), 4002, 65534)  # big now: a chown process
        assert waiting is not None
        waiter = asyncio.ensure_future(_await(waiting))
        await asyncio.sleep(0)
        waiter.cancel()  # the run was cancelled while its home was being handed over
        handing_back = holders.let_go(str(home), 4002)
        assert handing_back is not None
        await handing_back
        return waiter.cancelled()

    assert asyncio.run(scenario())
    assert _owners(home) == {4001}  # both changes ran, in turn; the last to the holder left
