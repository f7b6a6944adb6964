"""Validation of the tools' YAML config (``config:`` of a verl tool entry) and of model-given call arguments.

A bad config value is a :class:`ValueError` naming the key when the tool is built; a bad value in a tool call (the
model's doing) falls back to the configured default, or is answered with an observation that says what is wrong, so
nothing the model writes raises out of ``execute``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: Keys verl itself puts in a tool's ``config`` (``initialize_tools_from_config`` reads ``config.type``).
VERL_KEYS = frozenset({"type"})


def check_keys(config: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    """Refuse keys of ``config`` not in ``known``, suggesting the closest known key (a typo is otherwise silent)."""
    allowed = sorted(set(known))
    for key in config:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {allowed}"
        raise ValueError(f"unknown key {key!r} in {where}{hint}")


def is_number(value: object) -> bool:
    """An int or float, not a bool (YAML ``true`` is not a number here) and not a string."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(config: Mapping[str, Any], key: str, default: int, name: str | None = None) -> int:
    value = config.get(key, default)
    if not _is_int(value) or value < 1:
        raise ValueError(f"tool config {name or key!r} must be a positive integer, got {value!r}")
    return int(value)


def int_at_least(config: Mapping[str, Any], key: str, default: int, minimum: int, name: str | None = None) -> int:
    value = config.get(key, default)
    if not _is_int(value) or value < minimum:
        raise ValueError(f"tool config {name or key!r} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def finite_number(
    config: Mapping[str, Any], key: str, default: float, *, positive: bool, name: str | None = None
) -> float:
    """A finite number, > 0 (``positive``) or >= 0; bools and strings are refused."""
    value = config.get(key, default)
    ok = is_number(value) and math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"tool config {name or key!r} must be a finite number {bound}, got {value!r}")
    return float(value)


def flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A real bool: ``bool("false")`` is True, so strings are refused rather than guessed."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"tool config {key!r} must be true or false, got {value!r}")
    return value


def timeout_seconds(config: Mapping[str, Any], key: str, default: float) -> float:
    """A configured timeout: finite and > 0 (and small enough that twice it plus slack is still finite)."""
    value = finite_number(config, key, default, positive=True)
    if not math.isfinite(2 * value + 10):
        raise ValueError(f"tool config {key!r} must be a finite number > 0, got {value!r}")
    return value


def optional_text(config: Mapping[str, Any], key: str, secret: bool = False) -> str | None:
    """A string setting that may be left out (absent, null or empty: None); any other type is refused here rather
    than by the SDK's validation on every create. A ``secret``'s value is not repeated in the message."""
    value = config.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        shown = type(value).__name__ if secret else repr(value)
        raise ValueError(f"tool config {key!r} must be a string, got {shown}")
    return value


def text_mapping(config: Mapping[str, Any], key: str) -> dict[str, str]:
    """A mapping of names to strings (numbers are written as strings, as YAML users expect of ``PORT: 8080``);
    absent or null: empty. Lists (``["A=1"]``), strings, nulls, bools and nested values are refused: YAML's
    ``true`` would become ``"True"``."""
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"tool config {key!r} must be a mapping of names to strings, got {value!r}")
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not (isinstance(item, str) or is_number(item)):
            raise ValueError(f"tool config {key!r} must map names to strings, got {name!r}: {item!r}")
        out[name] = str(item)
    return out


def max_timeout_seconds(config: Mapping[str, Any], default_timeout: float) -> float | None:
    """``max_timeout``: the most a tool call may ask for (absent or null: no bound, as verl's tool). It may not be
    below ``default_timeout``, which calls without a timeout of their own get."""
    if config.get("max_timeout") is None:
        return None
    bound = timeout_seconds(config, "max_timeout", 0)
    if bound < default_timeout:
        raise ValueError(
            f"tool config 'max_timeout' ({bound:g}) must be at least 'default_timeout' ({default_timeout:g})"
        )
    return bound


def model_timeout(value: object, default: float, most: float | None = None) -> float:
    """The timeout a tool call asked for, or ``default`` when it is not a finite positive number; at most ``most``
    (the tool's ``max_timeout``) when one is set.

    Numeric strings (``"5"``) are accepted, as before; ``"inf"``, ``"nan"``, zero, negatives, bools, non-numeric
    strings and anything else fall back to the default (the model's mistake is not an exception). A model asking for
    an hour gets ``most``: one endless program must not hold a rollout that long."""
    if isinstance(value, bool):
        return default
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(2 * seconds + 10)):
        return default
    return seconds if most is None else min(seconds, most)


def arguments_problem(parameters: object) -> str | None:
    """Why a tool call's arguments cannot be used, or None. verl passes whatever ``json.loads`` made of the model's
    arguments: a string, a list or null as well as the object the schema asks for."""
    if isinstance(parameters, Mapping):
        return None
    return f'expected a JSON object such as {{"code": "print(1)"}}, got {json_kind(parameters)}'


def json_kind(value: object) -> str:
    """``value``'s JSON type in words, for a message to the model."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
