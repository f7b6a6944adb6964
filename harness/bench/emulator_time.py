"""The emulator's own share of a call's latency, read from its journal.

A call's latency, as the benchmark sees it, is the client's work before its request leaves (a tool, an SDK, its HTTP
library), the emulator's time from the request's arrival to its answer, and the client's work after. Only the middle
part is the emulator's: the rest would be the same against the real service. Each journal entry holds the request's
arrival (its first bytes, on the machine's monotonic clock) and the moment its answer was complete, so the benchmark
reads the entries of a level's measured calls (``GET /_emulator/journal?route=R&since=SEQ``, between batches) and
reports their spread beside the latency.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from emulator.daytona.service import ROUTE_INTERPRETER
from emulator.sandbox_fusion.routes import ROUTE_RUN_CODE

#: The journal route of the call each emulator backend measures.
ROUTES = {"sandbox-fusion": ROUTE_RUN_CODE, "daytona": ROUTE_INTERPRETER}


class EmulatorJournal:
    """The journal of an emulator process, on one route, read over HTTP from a mark on."""

    def __init__(self, base_url: str, route: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.route = route
        self.timeout_s = timeout_s
        self._since = 0

    def _read(self) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"route": self.route, "since": self._since})
        with urllib.request.urlopen(f"{self.base_url}/_emulator/journal?{query}", timeout=self.timeout_s) as answer:
            entries: list[dict[str, Any]] = json.load(answer)
        if entries:
            self._since = max(int(entry["seq"]) for entry in entries)
        return entries

    def mark(self) -> None:
        """From now on: later reads see only the requests that arrive after this call."""
        self._read()

    def spans(self) -> tuple[float, ...]:
        """Arrival to answer, in seconds, of each request on the route since the mark (then the mark moves on).

        Requests without an arrival (none on a socket) or not finished yet are left out.
        """
        spans = []
        for entry in self._read():
            arrived, finished = entry.get("arrived"), entry.get("finished")
            if isinstance(arrived, float) and isinstance(finished, float) and finished >= arrived:
                spans.append(finished - arrived)
        return tuple(spans)
