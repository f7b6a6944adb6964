"""The API's ``failed-auth`` throttler: failed authentications counted per client IP, and the block that follows.

As read in daytonaio/daytona at 8b6f9b14a: ``apps/api/src/auth/failed-auth-tracker.service.ts`` (the count),
``apps/api/src/common/middleware/failed-auth-rate-limit.middleware.ts`` (the block's check) and
``apps/api/src/filters/all-exceptions.filter.ts`` (where the count is made). It is not run by a ``ThrottlerGuard``
(the API's guards skip it): two pieces of the API share two Redis keys per client IP.

* Before authentication, on every route of the API, the middleware refuses a blocked IP: 429, whatever the request's
  key (a right one too), and nothing is counted.
* After it, the exception filter counts each 401 (any ``UnauthorizedException``: a wrong key, a missing one). The
  first failure opens a window of ``ttl`` (``INCR``, then ``PEXPIRE`` on the first hit); the ``limit``-th failure in
  it (``hits >= limit``) blocks the IP for ``ttl`` from then and is answered that 429 instead of its 401: with a
  limit of 5, four 401s and then a 429. Each 401 carries ``X-RateLimit-{Limit,Remaining,Reset}-failed-auth``.

A refusal carries ``X-RateLimit-Limit-failed-auth``, ``X-RateLimit-Remaining-failed-auth: 0``,
``X-RateLimit-Reset-failed-auth`` and a plain ``Retry-After`` (no ``-failed-auth`` suffix), the last two the block's
seconds left. Nothing resets the count: a request that authenticates leaves it as it was, and once the window is
over the next failure opens a new one.

The IP is Express's ``req.ips[0]`` else ``req.ip``, with ``trust proxy`` on: the first address of
``X-Forwarded-For``, else the peer's (:func:`client_ip`). The API reads its limit and ttl from
``RATE_LIMIT_FAILED_AUTH_{LIMIT,TTL}``, empty by default: the throttler is off unless configured, and a limit or ttl
of 0 turns it off too.

The toolbox proxy (``apps/proxy``) asks the API whether a bearer token may use a sandbox
(``GET /preview/{id}/access``) and sends the client's IP in ``X-Forwarded-For``: a wrong key on the toolbox counts
against the client like one on the API, and a blocked client's check gets the API's 429, which the proxy answers
with a 401. It caches each answer per (sandbox, token), a valid token for 2 minutes and an invalid one for 5 s
(:class:`ProxyTokenCache`), so a key it found valid goes on working through a block until that expires.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import FAILED_AUTH, ThrottlerSpec

Headers = list[tuple[str, str]]

#: Clients kept before the ones with nothing left to count are dropped (any ``X-Forwarded-For`` is a new client).
_PRUNE_AT = 4096


def client_ip(headers: Any, client: Any) -> str:
    """The client as the API tells it: the first address of ``X-Forwarded-For``, else the peer's address."""
    forwarded = ",".join(headers.getlist("x-forwarded-for"))
    first = forwarded.split(",", 1)[0].strip()
    if first:
        return first
    return str(client.host) if client is not None else ""


def _seconds(left: float) -> int:
    """Seconds as the API turns a Redis ``PTTL`` into them: whole milliseconds, rounded up to a second."""
    return math.ceil(round(left * 1000) / 1000)


@dataclass
class _Client:
    hits: int = 0
    window_end: float = -math.inf
    blocked_until: float = -math.inf


class FailedAuth:
    """The failed-auth counter and block per client IP; thread-safe. Off when ``spec`` is None or its limit is 0."""

    def __init__(self, spec: ThrottlerSpec | None, now: Callable[[], float]) -> None:
        self._spec = spec if spec is not None and spec.limit > 0 else None
        self._now = now
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}

    @property
    def enabled(self) -> bool:
        return self._spec is not None

    def reset(self) -> None:
        with self._lock:
            self._clients.clear()

    def _headers(self, remaining: int, reset: int, retry_after: int | None = None) -> Headers:
        assert self._spec is not None
        headers = [
            (f"X-RateLimit-Limit-{FAILED_AUTH}", str(self._spec.limit)),
            (f"X-RateLimit-Remaining-{FAILED_AUTH}", str(remaining)),
            (f"X-RateLimit-Reset-{FAILED_AUTH}", str(reset)),
        ]
        if retry_after is not None:
            headers.append(("Retry-After", str(retry_after)))
        return headers

    def blocked(self, ip: str) -> Headers | None:
        """The middleware's check: the headers of the 429 if ``ip`` is blocked now, else None."""
        if self._spec is None:
            return None
        now = self._now()
        with self._lock:
            client = self._clients.get(ip)
            if client is None or now >= client.blocked_until:
                return None
            left = _seconds(client.blocked_until - now)
            return self._headers(0, left, left)

    def failed(self, ip: str) -> tuple[bool, Headers]:
        """Count one failed authentication of ``ip``: whether it is answered 429 instead of 401, and the headers."""
        spec = self._spec
        if spec is None:
            return False, []
        now = self._now()
        with self._lock:
            if len(self._clients) >= _PRUNE_AT:
                self._prune(now)
            client = self._clients.setdefault(ip, _Client())
            if now < client.blocked_until:  # the tracker's own check, for a failure that raced the block's start
                left = max(1, _seconds(client.blocked_until - now))
                return True, self._headers(0, left, left)
            if now >= client.window_end:
                client.hits, client.window_end = 0, now + spec.ttl_s
            client.hits += 1
            if client.hits >= spec.limit:
                client.blocked_until = now + spec.ttl_s
                whole = math.ceil(spec.ttl_s)
                return True, self._headers(0, whole, whole)
            return False, self._headers(spec.limit - client.hits, _seconds(client.window_end - now))

    def _prune(self, now: float) -> None:
        for ip in [ip for ip, c in self._clients.items() if now >= c.window_end and now >= c.blocked_until]:
            del self._clients[ip]


class ProxyTokenCache:
    """The toolbox proxy's answers to "may this bearer token use this sandbox", per (sandbox, token): a yes kept
    for 2 minutes, a no for 5 s (``validateAndCache`` in ``apps/proxy/pkg/proxy/get_sandbox_target.go``). An
    answer the proxy could not get (the API's 429) is not kept."""

    VALID_S = 120.0
    INVALID_S = 5.0

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, str], tuple[bool, float]] = {}

    def reset(self) -> None:
        with self._lock:
            self._answers.clear()

    def get(self, sandbox_id: str, token: str) -> bool | None:
        now = self._now()
        with self._lock:
            answer = self._answers.get((sandbox_id, token))
            if answer is None or now >= answer[1]:
                return None
            return answer[0]

    def put(self, sandbox_id: str, token: str, valid: bool) -> None:
        now = self._now()
        with self._lock:
            if len(self._answers) >= _PRUNE_AT:
                for key in [k for k, (_, until) in self._answers.items() if now >= until]:
                    del self._answers[key]
            self._answers[(sandbox_id, token)] = (valid, now + (self.VALID_S if valid else self.INVALID_S))
