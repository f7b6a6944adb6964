"""A journal of every request the emulator answers, with the statistics tests ask for.

Tests read it to check client behaviour without instrumenting the client: how many requests were in flight at
most, what each attempt got, how long a client waited between retries. It is readable in process and over HTTP
(``GET /_emulator/journal``), so Ray workers and other processes are observable too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class JournalEntry:
    """One request: when it came, what it was, which fault (if any) it got, and how it ended."""

    seq: int
    route: str
    method: str
    path: str
    key: str
    attempt: int
    started: float  # the emulator clock (monotonic seconds)
    wall_started: float  # time.time(), for humans
    in_flight: int  # requests in flight on this route when this one arrived, itself included
    fault: str | None = None  # kind of injected fault, e.g. "status", "reset", "hang"; None when none
    injected_latency: float = 0.0
    # When the request's first bytes arrived (a WebSocket's: its upgrade request's), on the real monotonic clock: an
    # injected latency runs from then. None in process (an ASGI client has no socket) and on a virtual clock.
    arrived: float | None = None
    status: int | None = None  # HTTP status sent; None when the connection was dropped
    outcome: str = "pending"  # "ok", "invalid", "fault", "reset", "error", "cancelled"
    finished: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["duration"] = self.duration
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JournalEntry:
        """Rebuild an entry from ``to_dict`` output (e.g. what ``GET /_emulator/journal`` answers)."""
        names = {f.name for f in fields(cls)}
        missing = sorted(n for n in ("seq", "route", "method", "path", "key", "attempt", "started") if n not in data)
        if missing:
            raise ValueError(f"journal entry lacks {', '.join(missing)}: {dict(data)!r}"[:300])
        values = {k: v for k, v in data.items() if k in names}
        values.setdefault("wall_started", 0.0)
        values.setdefault("in_flight", 0)
        values["detail"] = dict(values.get("detail") or {})
        return cls(**values)


def retry_after_detail(headers: Iterable[tuple[str, str]]) -> dict[str, float]:
    """The waits a response asked for, by header name (``Retry-After`` or Daytona's ``Retry-After-{throttler}``).

    Stored in an entry's ``detail["retry_after"]`` so a compliance check can compare it with the client's next try;
    values that are not a number of seconds (an HTTP date) are left out.
    """
    waits: dict[str, float] = {}
    for name, value in headers:
        lower = name.lower()
        if lower == "retry-after" or lower.startswith("retry-after-"):
            try:
                waits[name] = max(0.0, float(str(value).strip()))
            except ValueError:
                continue
    return waits


#: Entries kept by default: a long-running server must not grow without bound.
DEFAULT_MAX_ENTRIES = 200_000


#: What ``Journal.counts`` may count entries by.
_COUNTABLE = frozenset({f.name for f in fields(JournalEntry)} | {"duration"})


class Journal:
    """Thread-safe append-only log of requests plus live in-flight counters.

    It keeps the newest ``max_entries`` (None: all); ``dropped`` counts older entries let go. Counters of requests in
    flight and their maxima cover every request, dropped or not.
    """

    def __init__(self, clock: Any = None, max_entries: int | None = DEFAULT_MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition()  # notified after each begin and end, for wait_for
        self._entries: deque[JournalEntry] = deque(maxlen=max_entries)
        self._seq = 0
        self.dropped = 0
        self._in_flight: Counter[str] = Counter()
        self._max_in_flight: Counter[str] = Counter()
        # The requests begun since the last clear that have not ended, by identity: only their ends count down.
        self._open: dict[int, JournalEntry] = {}
        self._now = clock.monotonic if clock is not None else time.monotonic

    def begin(self, route: str, method: str, path: str, key: str = "", attempt: int = 1) -> JournalEntry:
        with self._lock:
            self._in_flight[route] += 1
            current = self._in_flight[route]
            if current > self._max_in_flight[route]:
                self._max_in_flight[route] = current
            self._seq += 1
            if self._entries.maxlen is not None and len(self._entries) == self._entries.maxlen:
                self.dropped += 1
            entry = JournalEntry(
                seq=self._seq,
                route=route,
                method=method,
                path=path,
                key=key,
                attempt=attempt,
                started=self._now(),
                wall_started=time.time(),
                in_flight=current,
            )
            self._entries.append(entry)
            self._open[id(entry)] = entry
        with self._changed:
            self._changed.notify_all()
        return entry

    def end(self, entry: JournalEntry, status: int | None, outcome: str, **detail: Any) -> None:
        with self._lock:
            if entry.finished is not None:
                return
            entry.finished = self._now()
            entry.status = status
            entry.outcome = outcome
            entry.detail.update(detail)
            if self._open.pop(id(entry), None) is entry:  # else begun before a clear: counted then, not now
                self._in_flight[entry.route] -= 1
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[Journal], bool], timeout: float | None = None) -> bool:
        """Block until ``predicate(journal)`` holds, re-checked whenever a request begins or ends; False when
        ``timeout`` seconds passed first. For tests that must act at a given point of the traffic, e.g.
        ``journal.wait_for(lambda j: j.in_flight("daytona.interpreter.execute") > 0, 10)``. From a coroutine, run it
        in a thread (``asyncio.to_thread``) so the loop keeps serving."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def clear(self) -> None:
        """Start afresh: no entries, nothing in flight. A request still in flight from before (a client that gave
        up during a hang) belongs to the earlier journal: it is not counted in flight now, nor is its end, so what a
        test reads is its own requests' (the journal belongs to the test that follows the clear)."""
        with self._lock:
            self._entries.clear()
            self._seq = 0
            self.dropped = 0
            self._open.clear()
            self._in_flight = Counter()
            self._max_in_flight = Counter()

    def entries(self, route: str | None = None, since: int = 0) -> list[JournalEntry]:
        """The entries kept (on ``route``, a prefix or exact name), oldest first; only those after sequence number
        ``since`` when given, so a reader can take what is new since its last read."""
        with self._lock:
            return [e for e in self._entries if e.seq > since and (route is None or _route_matches(e.route, route))]

    def max_in_flight(self, route: str | None = None) -> int:
        """Highest number of simultaneous requests seen (on ``route``, a prefix or exact name, or overall)."""
        with self._lock:
            if route is not None:
                return max((v for k, v in self._max_in_flight.items() if _route_matches(k, route)), default=0)
        return _max_overlap(self.entries())

    def in_flight(self, route: str | None = None) -> int:
        with self._lock:
            return sum(v for k, v in self._in_flight.items() if route is None or _route_matches(k, route))

    def counts(self, by: str = "outcome", route: str | None = None) -> dict[str, int]:
        """Count entries by a field: ``outcome``, ``status``, ``fault``, ``route`` or any other of an entry's."""
        if by not in _COUNTABLE:
            raise ValueError(f"cannot count journal entries by {by!r}: one of {', '.join(sorted(_COUNTABLE))}")
        counter: Counter[str] = Counter(str(getattr(e, by)) for e in self.entries(route))
        return dict(counter)

    def stats(self) -> dict[str, Any]:
        entries = self.entries()
        routes = sorted({e.route for e in entries})
        return {
            "requests": len(entries),
            "dropped": self.dropped,
            "in_flight": self.in_flight(),
            "max_in_flight": self.max_in_flight(),
            "by_route": {
                r: {
                    "requests": sum(1 for e in entries if e.route == r),
                    "max_in_flight": self.max_in_flight(r),
                    "by_outcome": self.counts("outcome", r),
                    "by_status": self.counts("status", r),
                    "by_fault": self.counts("fault", r),
                }
                for r in routes
            },
        }

    def to_list(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries()]


def _route_matches(name: str, wanted: str) -> bool:
    return name == wanted or name.startswith(wanted + ".")


def _max_overlap(entries: Iterable[JournalEntry]) -> int:
    events: list[tuple[float, int]] = []
    for e in entries:
        events.append((e.started, 1))
        events.append((e.finished if e.finished is not None else float("inf"), -1))
    events.sort(key=lambda ev: (ev[0], ev[1]))
    best = current = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best
