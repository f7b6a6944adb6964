"""One turn of the zygote's serving loop, in this process: the order of its work, with the I/O around it stubbed.

A turn that finds both finished children and new requests sends the results before it forks the batch (forking a
batch takes tens of ms at high concurrency, and a result held back that long holds the server and its clients back),
and keeps the finished children's objects until its forks are done (memory freed before a fork is where the child's
new objects go, each in a page the child then copies).
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from typing import Any

import pytest

from emulator.executor import zygote_main as z

SOCK, PIDFD = 1000, 1001


@pytest.fixture
def turn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """A zygote whose poll returns the socket first, then a finished child; yields the log of what the turn did."""
    calls: list[Any] = []
    status_r, status_w = os.pipe2(os.O_NONBLOCK)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.write(out_w, b"4\n")
    for fd in (out_w, err_w, status_w):
        os.close(fd)
    child = z._Child(7, 4242)
    child.out, child.err = z._Stream(out_r), z._Stream(err_r)
    child.rc = 0

    class Epoll:
        def poll(self, timeout: float) -> list[tuple[int, int]]:
            return [(SOCK, select.EPOLLIN), (PIDFD, select.EPOLLIN)]

    def on_exit(finished: z._Child, now: float) -> None:
        calls.append("exit")
        z._complete(finished)

    def flush() -> None:
        calls.append(("flush", bytes(z._State.outbuf)))
        z._State.outbuf.clear()

    def handle_socket() -> None:
        calls.append(("fork batch", list(z._HELD[3])))

    monkeypatch.setattr(z._State, "epoll", Epoll())
    monkeypatch.setattr(z._State, "handlers", {SOCK: (z._K_SOCK, None), PIDFD: (z._K_PIDFD, child)})
    monkeypatch.setattr(z._State, "by_id", {7: child})
    monkeypatch.setattr(z._State, "lingering", [])
    monkeypatch.setattr(z._State, "failures", {})
    monkeypatch.setattr(z._State, "outbuf", bytearray())
    monkeypatch.setattr(z._State, "status_r", status_r)
    monkeypatch.setattr(z._State, "host_ns", -1)
    monkeypatch.setattr(z, "_on_exit", on_exit)
    monkeypatch.setattr(z, "_flush", flush)
    monkeypatch.setattr(z, "_handle_socket", handle_socket)
    try:
        yield calls
    finally:
        os.close(status_r)
        z._HELD[3].clear()


def test_results_go_out_before_the_batch_is_forked(turn: list[Any]) -> None:
    assert z._serve_once() is None
    assert [c if isinstance(c, str) else c[0] for c in turn] == ["exit", "flush", "fork batch"]
    sent = turn[1][1]
    _length, exited = z._HDR.unpack_from(sent)
    assert exited == z._EXITED
    assert z._EXITED_BODY.unpack_from(sent, z._HDR.size)[0] == 7  # the finished request's id
    assert sent.endswith(b"4\n")  # with its output


def test_finished_children_are_freed_after_the_forks(turn: list[Any]) -> None:
    z._serve_once()
    held_while_forking = turn[2][1]
    assert [c.req_id for c in held_while_forking] == [7]
    assert z._HELD[3] == []
