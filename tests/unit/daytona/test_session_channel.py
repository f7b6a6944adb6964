"""How the emulator reads a session shell's channels: log lines to the running command as they come, whatever their
size or how the reads cut them; an record only at the start of a line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.daytona.session_logs import unmarked
from emulator.daytona.sessions import LogChannel, SessionShells, ShellStart

OUT = b"\x01\x01\x01"
ERR = b"\x02\x02\x02"


def _read(stream: bytes, cuts: list[int]) -> tuple[bytes, list[bytes]]:
    logged: list[bytes] = []
    exits: list[bytes] = []
    channel = LogChannel(-1, logged.append, exits.append)
    start = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        channel.feed(stream[start:cut] if cut > start else b"")
        start = max(start, cut)
    return b"".join(logged), exits


_LINES = st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")), max_size=5)


@given(_LINES, st.lists(st.integers(0, 4000)))
def test_log_lines_and_records_come_out_whole_however_the_reads_cut_them(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(OUT + line + b"\n" for line in lines) + b"\x03\x03\x03abc 7\n" + OUT + b"next\n"
    logged, exits = _read(stream, cuts)
    assert logged == b"".join(OUT + line + b"\n" for line in lines) + OUT + b"next\n"
    assert exits == [b"abc 7"]


def test_a_record_is_only_a_record_at_the_start_of_a_line() -> None:
    inside = OUT + b"say \x03\x03\x03abc 0\n"
    assert _read(inside, []) == (inside, [])
    bogus = b"\x03\x03\x03" + b"x" * 300 + b"\n"  # longer than any record: a line of the sandbox's own
    assert _read(bogus, [10, 100]) == (bogus, [])


def test_markers_are_taken_out_for_an_old_sdk_even_when_a_read_splits_one() -> None:
    assert unmarked(OUT + b"a\n" + ERR + b"b\n", final=False) == (b"a\nb\n", 10)
    assert unmarked(b"a\n\x01\x01", final=False) == (b"a\n", 2)  # the start of a marker waits for the rest
    assert unmarked(b"a\n\x01\x01", final=True) == (b"a\n\x01\x01", 4)
    assert unmarked(b"a\n" + OUT, final=False) == (b"a\n", 5)  # a whole marker at the end is no start of one


@pytest.mark.parametrize(("grace", "limit"), [(float("nan"), 1), (-1.0, 1), (1.0, -5)])
def test_a_grace_or_log_limit_that_is_no_amount_is_refused_at_the_start(grace: float, limit: int) -> None:
    start = ShellStart("python3", "driver", lambda _uid: {}, None, lambda _h, _u, _r: None, lambda _e, _c: b"", None)
    with pytest.raises(ValueError, match=r"session_termination_grace|session_log_limit"):
        SessionShells(start, grace, limit)
