"""A forked child returns up the zygote's stack to run its program; on the way it must free nothing.

Each object a frame frees on return is a write to a page the child shares with the zygote, so a copy (about 2 us on a
VM); the request parsing's offsets and sizes, the last request's blobs and the run's list used to be freed that way,
24 copies per child at concurrency 128. Here one turn of the serving loop runs in this process on a real pipe, with a
spawn request big enough that its offsets are ints of their own; the fork is a stub that returns a job, as
``_fork_run`` does in a child, and tracemalloc watches the memory in use from that return to the end of the turn.
"""

from __future__ import annotations

import json
import os
import select
import tracemalloc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.executor import zygote_main as z


@pytest.fixture
def socket_with_a_spawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The zygote's socket (a pipe), holding one spawn request with a 4 KB script, and a poll that reports it."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK)
    script = b"print(4)\n" * 450
    head = json.dumps({"op": "spawn", "id": 1, "b": [len(script)]}).encode()
    os.write(write_end, z._HDR.pack(len(head) + len(script), len(head)) + head + script)
    os.close(write_end)

    class Epoll:
        def poll(self, timeout: float) -> list[tuple[int, int]]:
            return [(read_end, select.EPOLLIN)]

    monkeypatch.setattr(z._State, "sock", read_end)
    monkeypatch.setattr(z._State, "inbuf", bytearray())
    monkeypatch.setattr(z._State, "outbuf", bytearray())
    monkeypatch.setattr(z._State, "epoll", Epoll())
    monkeypatch.setattr(z._State, "handlers", {read_end: (z._K_SOCK, None)})
    monkeypatch.setattr(z._State, "lingering", [])
    monkeypatch.setattr(z._State, "children", {})
    monkeypatch.setattr(z._State, "host_ns", -1)
    monkeypatch.setattr(z, "_prepare", lambda req, blobs: SimpleNamespace(main=None))
    try:
        yield read_end
    finally:
        os.close(read_end)
        z._HELD[0] = z._HELD[1] = z._HELD[4] = None


def test_a_child_returning_from_its_turn_frees_nothing(
    socket_with_a_spawn: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = object()
    in_use = [0, 0]

    def fork_run(run: list[Any]) -> object:
        in_use[0] = tracemalloc.get_traced_memory()[0]
        return job  # as in the child

    monkeypatch.setattr(z, "_fork_run", fork_run)
    tracemalloc.start()
    try:
        # What two readings in a row differ by: the int that holds the first one (above 256 thanks to the ballast: the
        # smaller ints are cached, not made).
        ballast = bytearray(4096)
        calibration = [0, 0]
        calibration[0] = tracemalloc.get_traced_memory()[0]
        calibration[1] = tracemalloc.get_traced_memory()[0]
        returned = z._serve_once()
        in_use[1] = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del ballast
    assert returned is job
    assert calibration[1] - calibration[0] > 0  # the readings do see an allocation
    assert in_use[1] - in_use[0] == calibration[1] - calibration[0]  # nothing freed (nor made) on the way up
