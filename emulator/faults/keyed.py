"""Keyed pseudo-randomness: every draw is a pure function of its identity.

A stateful RNG would make the fault a request gets depend on how many draws happened
before it, i.e. on arrival order under concurrency. Hashing the identity instead makes
``(seed, rule, route, key, attempt, purpose)`` alone decide the outcome.
"""

from __future__ import annotations

import hashlib

__all__ = ["keyed_uniform", "logical_key"]

_SEP = b"\x1f"
_SCALE = float(2**64)


def keyed_uniform(seed: int, rule_index: int, route: str, key: str, attempt: int, purpose: str) -> float:
    """Return a float in the open interval (0, 1) derived only from the arguments.

    ``purpose`` separates independent streams (firing vs latency) for the same request.
    The result is never exactly 0 or 1, so inverse CDFs such as the lognormal's are safe.
    """
    parts = (str(seed), str(rule_index), route, key, str(attempt), purpose)
    digest = hashlib.blake2b(_SEP.join(p.encode("utf-8", "surrogatepass") for p in parts), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / _SCALE


def logical_key(body: bytes | str, explicit: str | None = None) -> str:
    """The logical request key the HTTP layer passes to ``decide``.

    An explicit key (e.g. from a request header) wins; otherwise a short hash of the body, so a
    client retrying the same payload is recognised as the same logical request (attempt 2, 3, ...).
    """
    if explicit:
        return explicit
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return hashlib.blake2b(data, digest_size=8).hexdigest()
