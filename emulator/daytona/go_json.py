"""JSON values as the daemon's Go decoder holds them (Go strings are bytes: a lone surrogate cannot be one)."""

from __future__ import annotations

from typing import Any


def as_go_decodes(value: Any) -> Any:
    """``value`` with a lone surrogate escape (``"\\ud800"``) in any string or key turned into U+FFFD, as Go's
    decoder turns it."""
    if isinstance(value, dict):
        return {as_go_decodes(key): as_go_decodes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_go_decodes(item) for item in value]
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in value)
    return value


__all__ = ["as_go_decodes"]
