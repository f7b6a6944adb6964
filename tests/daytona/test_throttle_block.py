"""Daytona's throttlers block as NestJS's guard on its Redis storage does: the hit past the limit blocks the
throttler for a whole ttl from then, refused hits still count, and the block outlives the window it began in."""

from __future__ import annotations

from emulator.daytona.config import ThrottlerSpec
from emulator.daytona.throttle import Throttlers


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _hit(throttlers: Throttlers, clock: _Clock, at: float, names: tuple[str, ...]) -> tuple[bool, dict[str, str]]:
    clock.now = 1000.0 + at
    verdict = throttlers.hit(names, "org")
    return verdict.allowed, dict(verdict.headers)


def test_a_block_lasts_a_ttl_from_the_refused_hit_and_outlives_its_window() -> None:
    clock = _Clock()
    throttlers = Throttlers([ThrottlerSpec("sandbox-create", 2, 60.0)], clock)
    names = ("sandbox-create",)
    assert _hit(throttlers, clock, 0, names) == (
        True,
        {
            "X-RateLimit-Limit-sandbox-create": "2",
            "X-RateLimit-Remaining-sandbox-create": "1",
            "X-RateLimit-Reset-sandbox-create": "60",
        },
    )
    assert _hit(throttlers, clock, 0.1, names)[0]
    assert _hit(throttlers, clock, 50, names) == (False, {"Retry-After-sandbox-create": "60"})
    # The window of t=0 is over, the block of t=50 is not: refused, with the block's 49 s left.
    assert _hit(throttlers, clock, 61, names) == (False, {"Retry-After-sandbox-create": "49"})
    # The block is over; the window opened at t=61 by the refused hit holds it and this one: 2, within the limit.
    allowed, headers = _hit(throttlers, clock, 111, names)
    assert allowed and headers["X-RateLimit-Remaining-sandbox-create"] == "0"
    assert headers["X-RateLimit-Reset-sandbox-create"] == "10"
    # The third hit of that window blocks again.
    assert _hit(throttlers, clock, 112, names) == (False, {"Retry-After-sandbox-create": "60"})


def test_refused_hits_count_so_a_client_that_keeps_knocking_stays_out_longer() -> None:
    clock = _Clock()
    throttlers = Throttlers([ThrottlerSpec("authenticated", 1, 10.0)], clock)
    names = ("authenticated",)
    assert _hit(throttlers, clock, 0, names)[0]
    assert not _hit(throttlers, clock, 1, names)[0]  # blocked until t=11
    assert not _hit(throttlers, clock, 10.5, names)[0]  # a new window from t=10.5, its first hit refused
    # The block is over, but the window of t=10.5 already holds a hit: this second one passes the limit and blocks.
    assert _hit(throttlers, clock, 11.5, names) == (False, {"Retry-After-authenticated": "10"})


def test_the_throttlers_after_a_refusing_one_neither_count_nor_answer() -> None:
    clock = _Clock()
    throttlers = Throttlers([ThrottlerSpec("authenticated", 1, 60.0), ThrottlerSpec("sandbox-create", 5, 60.0)], clock)
    names = ("authenticated", "sandbox-create")
    assert _hit(throttlers, clock, 0, names)[1]["X-RateLimit-Remaining-sandbox-create"] == "4"
    assert _hit(throttlers, clock, 1, names) == (False, {"Retry-After-authenticated": "60"})
    allowed, headers = _hit(throttlers, clock, 2, ("sandbox-create",))
    assert allowed and headers["X-RateLimit-Remaining-sandbox-create"] == "3"  # the refused request was not counted


def test_a_throttler_that_could_not_answer_is_refused_when_configured() -> None:
    import math

    import pytest

    for limit, ttl in ((-1, 60.0), (1.5, 60.0), (True, 60.0), (1, 0.0), (1, -5.0), (1, math.inf), (1, math.nan)):
        with pytest.raises(ValueError, match="ThrottlerSpec 'x'"):
            ThrottlerSpec("x", limit, ttl)  # type: ignore[arg-type]
    assert ThrottlerSpec("x", 0, 1).ttl_s == 1  # a limit of 0 refuses every hit; a whole ttl is fine
