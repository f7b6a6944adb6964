"""The URLs users give on the command line (a service, a policy server): checked once, up front, so that a typo is
one clear error rather than a connection error on every request."""

from __future__ import annotations

from urllib.parse import urlsplit


def url_problem(raw: str) -> str | None:
    """Why ``raw`` cannot name a service (it must be an http(s) URL with a host), or None if it can."""
    parsed = urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{raw!r} is not an http(s) URL with a host"
    return None
