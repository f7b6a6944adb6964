"""The URLs users give on the command line (a service, a policy server): checked once, up front, so that a typo is
one clear error rather than a connection error on every request."""

from __future__ import annotations

import re
import socket
import urllib.request
from urllib.parse import SplitResult, urlsplit

#: The ``user:password@`` of an authority: credentials, never to be stored or printed.
_USERINFO = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def without_userinfo(raw: str) -> str:
    """``raw`` without its ``user:password@``, for anything stored or printed (the credentials still go with the
    requests). Works on a malformed URL too, since its error message prints it."""
    return _USERINFO.sub(r"\1", raw)


def url_problem(raw: str) -> str | None:
    """Why ``raw`` cannot name a service (an http(s) URL with a host, a valid port, no query or fragment: the
    commands append paths to it), or None if it can."""
    shown = without_userinfo(raw)
    try:
        parsed = urlsplit(raw)
        port = parsed.port
    except ValueError as exc:  # an unclosed [IPv6 bracket, a port that is no number or out of range
        return f"{shown!r} is not a valid URL: {exc}"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{shown!r} is not an http(s) URL with a host"
    if port == 0:
        return f"{shown!r} has no valid port"
    if parsed.query or parsed.fragment:
        return f"{shown!r} has a query or fragment; give the service's base URL"
    return None


def unreachable(raw: str, timeout: float = 5.0) -> str | None:
    """Why nothing answers a TCP connection at ``raw``'s host and port, or None when something does.

    Only the connection is tried (no request, no TLS), so it says nothing of the service behind it; it turns a
    typo'd host or a stopped server into one line before any work, instead of one connection error per request.
    When a proxy applies to the URL (``HTTP(S)_PROXY``/``ALL_PROXY`` and not ``NO_PROXY``, which the HTTP client
    honours), nothing is tried: the requests go to the proxy, and the host may not be reachable directly.
    """
    try:
        parsed = urlsplit(raw)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return f"{without_userinfo(raw)!r} has no valid host and port"
    if _proxied(parsed):
        return None
    host = parsed.hostname or ""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"


def _proxied(parsed: SplitResult) -> bool:
    """Whether the environment's proxy settings send requests to ``parsed`` through a proxy (as httpx does)."""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parsed.scheme.lower()) or proxies.get("all")):
        return False
    host = (parsed.hostname or "").lower()
    return not any(_bypasses(e.strip().lower(), host, parsed.port) for e in proxies.get("no", "").split(","))


def _bypasses(entry: str, host: str, port: int | None) -> bool:
    """Whether one ``NO_PROXY`` entry (``*``, a host or domain, ``.domain``, with an optional ``:port``) names
    ``host``: the host itself or a subdomain, as httpx reads it."""
    if entry == "*":
        return True
    name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
    name = name.strip("[]").lstrip(".")
    if not name or (entry_port and entry_port != str(port or "")):
        return False
    return host == name or host.endswith("." + name)
