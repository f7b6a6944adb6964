"""Retry-After is a floor, not the wait: clients throttled at the same moment must not come back together."""

from __future__ import annotations

import random

from harness.tools.retry import RetryPolicy


def test_retry_after_is_waited_plus_jitter() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0)
    rng = random.Random(1)
    waits = [policy.delay(1, rng, retry_after=2.0) for _ in range(200)]
    assert min(waits) >= 2.0  # never earlier than the server asked
    assert max(waits) <= 2.5  # at most one backoff ceiling later
    # Spread over the window, not stacked on the floor (max(backoff, 2.0) would give 2.0 every time).
    assert len({round(w, 3) for w in waits}) > 150
    assert sum(1 for w in waits if w < 2.05) < 40


def test_without_retry_after_it_is_the_backoff() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0)
    assert policy.delay(3, random.Random(7)) == policy.backoff(3, random.Random(7))
