"""Limiter config checks: a config that would make every call fail, or quietly not limit, is refused when the limiter
is made, with one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from harness.ratelimit import MAX_LEASE_S, MIN_LEASE_S, LimiterConfig, LimiterConfigError, open_limiter


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"lease_s": 0.005}, "lease_s"),
        ({"lease_s": MIN_LEASE_S / 2}, "lease_s"),
        ({"lease_s": 1e308}, "lease_s"),
        ({"lease_s": MAX_LEASE_S * 2}, "lease_s"),
        ({"burst": 5}, "burst"),
        ({"adaptive": {1: 2, "x": 3}}, "adaptive"),
        ({"limit": 2, 3: 4}, "unknown"),
    ],
)
def test_bad_config_values_are_refused_naming_the_key(mapping: dict[Any, Any], key: str) -> None:
    with pytest.raises(LimiterConfigError, match=key) as info:
        LimiterConfig.from_mapping(mapping)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_lease_bounds_are_inclusive() -> None:
    assert LimiterConfig(lease_s=MIN_LEASE_S).lease_s == MIN_LEASE_S
    assert LimiterConfig(lease_s=MAX_LEASE_S).lease_s == MAX_LEASE_S
    assert LimiterConfig(rate_per_second=2.0, burst=5).bucket_size == 5.0


@pytest.mark.parametrize("config", [None, 5, "limit=3", [("limit", 3)]])
def test_open_limiter_needs_a_mapping_or_a_config(config: Any) -> None:
    with pytest.raises(TypeError, match="LimiterConfig or a mapping") as info:
        open_limiter(config, "local")
    assert repr(config) in str(info.value)


@pytest.mark.parametrize("namespace", ["", "  ", 123, ["ns"]])
def test_a_bad_namespace_is_refused_when_the_limiter_is_made(namespace: Any) -> None:
    with pytest.raises(LimiterConfigError, match="namespace"):
        open_limiter({"name": "ns-check", "limit": 2}, "local", namespace=namespace)


def test_a_bad_namespace_is_refused_by_the_ray_client(ray_session: dict[str, str]) -> None:
    from harness.ratelimit.ray_backend import RayLimiter

    with pytest.raises(LimiterConfigError, match="namespace"):
        RayLimiter(LimiterConfig(name="ns-check", limit=2), namespace="")
    with pytest.raises(LimiterConfigError, match="namespace"):
        open_limiter({"name": "ns-check", "limit": 2}, "ray", namespace=123)
