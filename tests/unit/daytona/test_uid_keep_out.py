"""A uid whose processes or home could not be dealt with is given to no other sandbox until they are.

Handing a home back, or sweeping a uid's processes, fails when descriptors or processes run out. Before, the uid went
back to the pool anyway (a hand-back in its own process freed it in a ``finally``), or the error escaped and stopped
the deletion of the sandbox's other contexts; the next context to get the uid, of any sandbox, owned the old
sandbox's files, and the contexts left behind ran on. Now the uid stays out, is tried again at each later give-back
and at the close, and returns once its processes are gone and its home handed back.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from emulator.daytona import interpreter as interpreter_module
from emulator.daytona.interpreter import Interpreters, InterpreterSettings, UidsExhausted
from emulator.executor import holders as holders_module
from emulator.executor.holders import HOLDERS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uids of their own only as root")


def _out_of_descriptors(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.EMFILE, "Too many open files")


def _pool_of_one(tmp_path: Path) -> tuple[Interpreters, int, str]:
    interpreters = Interpreters(InterpreterSettings(sys.executable, 370_000, 1))
    uid = interpreters._uids.take()
    assert uid is not None
    home = str(tmp_path / "home")
    os.mkdir(home)
    return interpreters, uid, home


def test_a_uid_whose_home_cannot_be_handed_back_stays_out_until_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        interpreters, uid, home = _pool_of_one(tmp_path)
        await interpreter_module.hand_over(home, uid)
        assert os.stat(home).st_uid == uid
        with monkeypatch.context() as patched:
            patched.setattr(HOLDERS, "let_go", _out_of_descriptors)
            interpreters.release(home, uid, ran=False)  # no exception: the deletion goes on
            assert interpreters.kept_out == [uid]
            with pytest.raises(UidsExhausted):
                interpreters._uids.take()  # not given to anyone while the home may be its
            interpreters.release(home, None)  # a later give-back tries again, and fails again
            assert interpreters.kept_out == [uid]
        interpreters.close()  # descriptors are back: the retry hands the home back and frees the uid
        assert interpreters.kept_out == []
        assert os.stat(home).st_uid == 0
        assert interpreters._uids.take() == uid

    asyncio.run(main())


def test_a_hand_back_that_fails_in_its_own_process_keeps_the_uid_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        interpreters, uid, home = _pool_of_one(tmp_path)

        def big_tree_failing(path: str, uid: int, **_kwargs: Any) -> Awaitable[None]:
            async def chown_r_failed() -> None:
                raise OSError("chown -R exited 1")

            return asyncio.ensure_future(chown_r_failed())

        with monkeypatch.context() as patched:
            patched.setattr(HOLDERS, "let_go", big_tree_failing)
            interpreters.release(home, uid, ran=False)
            await asyncio.gather(*interpreters._handing_back)  # the hand-back's own task, failed
        assert interpreters.kept_out == [uid]  # before: freed in a ``finally`` whatever the outcome
        with pytest.raises(UidsExhausted):
            interpreters._uids.take()

    asyncio.run(main())


def test_a_uid_whose_processes_cannot_be_swept_stays_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        interpreters, uid, home = _pool_of_one(tmp_path)
        with monkeypatch.context() as patched:
            patched.setattr(interpreter_module, "_kill_uid", _out_of_descriptors)
            interpreters.release(home, uid)
            assert interpreters.kept_out == [uid]
        interpreters.close()
        assert interpreters.kept_out == [] and interpreters._uids.take() == uid

    asyncio.run(main())


def test_no_uid_block_is_claimed_without_its_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file that cannot be opened (descriptors run out) must not let two emulators share a block."""
    real_open = os.open

    def no_lock_file(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".lock"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(interpreter_module.os, "open", no_lock_file)
    with pytest.raises(OSError):
        interpreter_module._claim_block(950_000, 16)  # before: (950000, None), claimed with no lock


def test_a_tree_chown_that_fails_says_so(tmp_path: Path) -> None:
    """``chown -R`` that exits non-zero (twice) raises, so the uid waiting on it is not freed."""
    with pytest.raises(OSError, match="exited"):
        asyncio.run(holders_module.Holders._chown_r(str(tmp_path), 2**32, 0))  # no such uid: chown refuses it


def test_an_executor_uid_whose_work_dir_cannot_be_handed_back_stays_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emulator.executor import Executor, ExecutorConfig

    async def main() -> None:
        executor = Executor(ExecutorConfig(sandbox_uid_count=2))
        try:
            uid = await executor._acquire_uid()
            assert uid is not None
            executor._held[uid] = str(tmp_path)
            with monkeypatch.context() as patched:
                patched.setattr(HOLDERS, "let_go", _out_of_descriptors)
                executor._release_uid(uid)  # before: the error escaped, and the pool's slot was never given back
            assert uid not in executor._free_uids
            other = await executor._acquire_uid()
            executor._release_uid(other)  # a later release tries again: the work dir goes back, the uid with it
            assert uid in executor._free_uids and other in executor._free_uids
        finally:
            await executor.aclose()

    asyncio.run(main())


def test_a_retry_hands_the_home_back_for_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed let-go had already taken the uid off the home's holders: its retry must still change the tree
    (before, it found no holder to let go, changed nothing, and freed the uid with the old files still its)."""

    async def main() -> None:
        interpreters, uid, home = _pool_of_one(tmp_path)
        await interpreter_module.hand_over(home, uid)
        secret = os.path.join(home, "secret")
        os.close(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600))
        os.chown(secret, uid, 65534)
        real = holders_module.chown_tree
        failures = [OSError(errno.EMFILE, "Too many open files")]

        def fails_once(path: str, owner: int, group: int) -> int:
            if failures:
                raise failures.pop()
            return real(path, owner, group)

        monkeypatch.setattr(holders_module, "chown_tree", fails_once)
        interpreters.release(home, uid, ran=False)
        assert interpreters.kept_out == [uid] and os.stat(secret).st_uid == uid
        interpreters.close()  # the retry
        assert interpreters.kept_out == []
        assert os.stat(secret).st_uid == 0 and os.stat(home).st_uid == 0

    asyncio.run(main())


def test_a_pool_whose_every_uid_is_kept_out_retries_before_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emulator.executor import Executor, ExecutorConfig

    async def main() -> int | None:
        executor = Executor(ExecutorConfig(sandbox_uid_count=2))
        try:
            taken = [await executor._acquire_uid(), await executor._acquire_uid()]
            with monkeypatch.context() as patched:
                patched.setattr(HOLDERS, "let_go", _out_of_descriptors)
                for uid in taken:
                    assert uid is not None
                    executor._held[uid] = str(tmp_path)
                    executor._release_uid(uid)
            assert sorted(executor._kept_out) == sorted(taken)
            # No release will come: before, this waited for ever.
            return await asyncio.wait_for(executor._acquire_uid(), 10)
        finally:
            await executor.aclose()

    assert asyncio.run(main()) is not None


def test_an_executor_closed_with_a_uid_kept_out_keeps_its_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its uids may still own files: another executor of this process must not get the same block."""
    from emulator.executor import Executor, ExecutorConfig
    from emulator.executor import executor as executor_module

    async def main() -> tuple[int | None, int | None]:
        executor = Executor(ExecutorConfig(sandbox_uid_count=2))
        block = executor._uid_block
        uid = await executor._acquire_uid()
        assert uid is not None
        executor._held[uid] = str(tmp_path)
        monkeypatch.setattr(HOLDERS, "let_go", _out_of_descriptors)  # and at the close's retry too
        executor._release_uid(uid)
        await executor.aclose()
        return block, block if block in executor_module._claimed_uid_blocks else None

    block, still_claimed = asyncio.run(main())
    assert block is not None and still_claimed == block  # before: given up at the close
