"""The demo: an embedded emulator answering real programs, then the same service under injected faults.

Uses only the standard library as the client, so it runs on the bare install (``make demo``).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from emulator.app import Emulator
from emulator.server import EmulatorServer

PROGRAMS: list[tuple[str, dict[str, Any]]] = [
    ("print", {"code": "print(2 + 2)", "language": "python"}),
    ("exception", {"code": "print('before')\nraise ValueError('boom')", "language": "python"}),
    ("stdin", {"code": "a, b = map(int, input().split())\nprint(a * b)", "language": "python", "stdin": "6 7\n"}),
    ("timeout", {"code": "print('started', flush=True)\nwhile True: pass", "language": "python", "run_timeout": 1}),
    ("bash", {"code": "echo hi; echo oops >&2; exit 2", "language": "bash"}),
    ("unknown language", {"code": "x", "language": "cobol"}),
]

FAULTS = {
    "seed": 7,
    "rules": [
        {"id": "gateway-504", "route": "sandbox_fusion.run_code", "requests": "2-3", "fault": {"status": 504}},
        {
            "id": "throttle",
            "route": "sandbox_fusion.run_code",
            "requests": "5",
            "fault": {"status": 429, "retry_after": 2},
        },
    ],
}


def post(url: str, payload: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def summarize(status: int, body: str) -> str:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return f"HTTP {status}  {body[:60]!r}..."
    if status != 200 or not isinstance(data, dict) or "run_result" not in data:
        return f"HTTP {status}  {json.dumps(data)[:90]}"
    run = data.get("run_result") or {}
    stderr_tail = (run.get("stderr") or "").strip().splitlines()[-1:]
    shown = (run.get("stdout") or "") + (" | " + stderr_tail[0] if stderr_tail else "")
    return (
        f"HTTP {status}  {data['status']:<8} {run.get('status', '-'):<17} rc={run.get('return_code')!s:<4} "
        f"{shown.strip()[:50]!r}"
    )


def main() -> int:
    emulator = Emulator()
    with EmulatorServer(emulator) as server:
        print(f"Embedded Sandbox Fusion emulator at {server.run_code_url}\n")
        print("1. Real programs, isolated, answered as the real server answers them")
        for name, payload in PROGRAMS:
            started = time.perf_counter()
            status, body = post(server.run_code_url, payload)
            print(f"   {name:<17} {summarize(status, body)}  ({time.perf_counter() - started:.2f} s)")

        print("\n2. The same service behind a flaky gateway (seeded, replayable fault plan)")
        emulator.set_faults(FAULTS)
        emulator.reset()
        for i in range(1, 7):
            status, body = post(server.run_code_url, {"code": f"print({i} * {i})", "language": "python"})
            print(f"   request {i}: {summarize(status, body)}")

        stats = emulator.journal.stats()
        route = stats["by_route"].get("sandbox_fusion.run_code", {})
        print("\n3. The journal saw everything")
        print(f"   requests={stats['requests']}  by status={route.get('by_status')}  by fault={route.get('by_fault')}")
        print(f"   max in flight={stats['max_in_flight']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
