"""The URLs users give on the command line (a service, a policy server): checked once, up front, so that a typo is
one clear error rather than a connection error on every request."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit


def url_problem(raw: str) -> str | None:
    """Why ``raw`` cannot name a service (it must be an http(s) URL with a host), or None if it can."""
    parsed = urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{raw!r} is not an http(s) URL with a host"
    return None


def unreachable(raw: str, timeout: float = 5.0) -> str | None:
    """Why nothing answers a TCP connection at ``raw``'s host and port, or None when something does.

    Only the connection is tried (no request, no TLS), so it says nothing of the service behind it; it turns a
    typo'd host or a stopped server into one line before any work, instead of one connection error per request.
    """
    parsed = urlsplit(raw)
    host = parsed.hostname or ""
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return f"{raw!r} has no valid port"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"
