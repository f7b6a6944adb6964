"""Backend benchmark: executions/s of ``print(2+2)`` through HTTP, per concurrency level and execution path.

The emulator runs as its own process (``sandbox-emulator serve``) so the load generator does not share its
interpreter. The load generator shares the machine's cores, though, so by default it is the lean one of
:mod:`harness.bench.loadgen` (about 0.04 ms of CPU per request); ``--client aiohttp`` measures with aiohttp's client
instead (about 0.22 ms; httpx would be the bottleneck at high concurrency). Prints a table and the emulator's peak RSS
(VmHWM of the server process and of its warm interpreter). Figures, not assertions: run it, read it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

from harness.bench.emulator_process import EmulatorProcess, EmulatorStartError

PAYLOAD = {"code": "print(2+2)", "language": "python"}
CLIENTS = ("lean", "aiohttp")


@dataclass
class LevelResult:
    mode: str
    concurrency: int
    requests: int
    ok: int
    errors: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0


def _vm_hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    kids = [int(x) for x in children.read().split()]
            except OSError:
                continue
            found.extend(kids)
            stack.extend(kids)
    return found


def _answered_four(status: int, body: bytes) -> bool:
    """The check of every answer: HTTP 200 and the program's output."""
    if status != 200:
        return False
    try:
        return bool(json.loads(body)["run_result"]["stdout"] == "4\n")
    except (ValueError, KeyError, TypeError):
        return False


def _lean_level(port: int, mode: str, concurrency: int, total: int) -> LevelResult:
    from harness.bench import loadgen

    body = json.dumps(PAYLOAD).encode()
    loadgen.run(loadgen.drive("127.0.0.1", port, "/run_code", body, concurrency, concurrency, _answered_four))  # warm
    result = loadgen.run(loadgen.drive("127.0.0.1", port, "/run_code", body, concurrency, total, _answered_four))
    return LevelResult(mode, concurrency, total, result.ok, result.errors, result.seconds)


async def _level(url: str, mode: str, concurrency: int, total: int) -> LevelResult:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        counter = iter(range(total))
        ok = errors = 0

        async def worker() -> None:
            nonlocal ok, errors
            for _ in counter:
                try:
                    async with session.post(url + "/run_code", json=PAYLOAD) as resp:
                        body = await resp.json()
                        good = resp.status == 200 and body["run_result"]["stdout"] == "4\n"
                except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, TypeError):
                    good = False
                if good:
                    ok += 1
                else:
                    errors += 1

        warm = iter(range(concurrency))
        await asyncio.gather(*(_one(session, url) for _ in warm))
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return LevelResult(mode, concurrency, total, ok, errors, elapsed)


async def _one(session: object, url: str) -> None:
    async with session.post(url + "/run_code", json=PAYLOAD) as resp:  # type: ignore[attr-defined]
        await resp.read()


def default_requests(mode: str, concurrency: int) -> int:
    """Requests per level when not given: some seconds of steady state on the fast path, fewer on the slow one.

    Ten per connection (1,280 at 128, about 1.3 s) measured much of the ramp up: 972/s, where runs of 5,120 gave
    1,006 to 1,047/s on the same machine.
    """
    return max(200, concurrency * (40 if mode == "fast" else 10))


def run_mode(
    mode: str,
    levels: list[int],
    requests: int,
    python: str | None,
    temp_root: str | None = None,
    client: str = "lean",
    warm: int | None = None,
) -> tuple[list[LevelResult], dict[str, int]]:
    """Measure one path at each level against its own ``serve`` process; :class:`EmulatorStartError` if it ends."""
    serve_args = [*(["--python", python] if python else []), *(["--temp-root", temp_root] if temp_root else [])]
    if warm is not None:
        serve_args += ["--warm-interpreters", str(warm)]
    results: list[LevelResult] = []
    with EmulatorProcess(mode, serve_args=serve_args) as emulator:
        assert emulator.pid is not None
        port = int(emulator.base_url.rsplit(":", 1)[1])
        for level in levels:
            total = requests or default_requests(mode, level)
            print(f"  {mode:9s} concurrency {level:4d}: {total} requests ...", file=sys.stderr, flush=True)
            if client == "lean":
                results.append(_lean_level(port, mode, level, total))
            else:
                results.append(asyncio.run(_level(emulator.base_url, mode, level, total)))
        kids = _descendants(emulator.pid)
        memory = {
            "server_peak_rss_kb": _vm_hwm_kb(emulator.pid),
            "warm_interpreter_peak_rss_kb": max((_vm_hwm_kb(k) for k in kids), default=0),
        }
    return results, memory


def main(args: argparse.Namespace) -> int:
    raw = args.concurrency
    concurrency = ",".join(raw) if isinstance(raw, list) else str(raw)  # "1,16" or "1 16", as bench takes them
    try:
        levels = list(dict.fromkeys(int(x) for x in concurrency.split(",") if x.strip()))
        modes = list(dict.fromkeys(m.strip() for m in str(args.modes).split(",") if m.strip()))
    except ValueError:
        print(
            f"sandbox-emulator bench-throughput: --concurrency must be integers, got {concurrency!r}",
            file=sys.stderr,
        )
        return 2
    client = getattr(args, "client", "lean")
    if client not in CLIENTS:
        print(f"sandbox-emulator bench-throughput: --client is one of {', '.join(CLIENTS)}", file=sys.stderr)
        return 2
    if client == "aiohttp":
        import aiohttp  # noqa: F401  (missing: the command line says which extra to install)
    bad = [m for m in modes if m not in ("fast", "faithful")]
    if bad or not modes:
        given = ", ".join(map(repr, bad)) or "an empty list"
        print(
            f"sandbox-emulator bench-throughput: --modes: unknown {given}; choose from fast, faithful", file=sys.stderr
        )
        return 2
    if not levels or any(level < 1 for level in levels):
        print(
            f"sandbox-emulator bench-throughput: --concurrency takes positive integers, got {concurrency!r}",
            file=sys.stderr,
        )
        return 2
    if args.requests < 0:
        print("sandbox-emulator bench-throughput: --requests must be 0 (scaled to the level) or more", file=sys.stderr)
        return 2
    if args.requests and args.requests < max(levels):  # a level would run with fewer connections than it says
        print(
            f"sandbox-emulator bench-throughput: --requests {args.requests} is fewer than --concurrency "
            f"{max(levels)}: a level needs at least one request per connection",
            file=sys.stderr,
        )
        return 2
    temp_root = getattr(args, "temp_root", None)
    from harness.cli import check_temp_root
    from harness.outputs import file_problem, write_text

    problem = check_temp_root(temp_root) or (file_problem(args.json, "--json") if args.json else None)
    if problem:
        print(f"sandbox-emulator bench-throughput: {problem}", file=sys.stderr)
        return 2
    from harness.bench import machine

    speed: machine.MachineSpeed | None = None
    try:
        speed = machine.measure()
    except machine.ProbeError as exc:
        print(f"sandbox-emulator bench-throughput: {exc}", file=sys.stderr)
    else:
        print(f"machine speed: {speed.describe()}", file=sys.stderr, flush=True)
    all_results: list[LevelResult] = []
    memory: dict[str, dict[str, int]] = {}
    for mode in modes:
        try:
            warm = getattr(args, "warm_interpreters", None)
            results, mem = run_mode(mode, levels, args.requests, args.python, temp_root, client, warm)
        except EmulatorStartError as exc:
            print(f"sandbox-emulator bench-throughput: {mode}: {exc}", file=sys.stderr)
            return 2
        all_results.extend(results)
        memory[mode] = mem
    print(f"{'path':10s} {'concurrency':>11s} {'requests':>8s} {'errors':>6s} {'exec/s':>9s}")
    for r in all_results:
        print(f"{r.mode:10s} {r.concurrency:11d} {r.requests:8d} {r.errors:6d} {r.per_second:9.1f}")
    for mode, mem in memory.items():
        print(
            f"{mode:10s} peak RSS: server {mem['server_peak_rss_kb'] / 1024:.1f} MiB, "
            f"warm interpreter {mem['warm_interpreter_peak_rss_kb'] / 1024:.1f} MiB"
        )
    by = {(r.mode, r.concurrency): r.per_second for r in all_results}
    for level in levels:
        if ("fast", level) in by and ("faithful", level) in by and by[("faithful", level)] > 0:
            print(f"fast/faithful at concurrency {level}: {by[('fast', level)] / by[('faithful', level)]:.1f}x")
    if args.json:
        figures = {
            "levels": [asdict(r) | {"per_second": r.per_second} for r in all_results],
            "memory": memory,
            "machine_speed": speed.as_dict() if speed is not None else None,
        }
        problem = write_text(args.json, json.dumps(figures, indent=2) + "\n", "--json")
        if problem:
            print(f"sandbox-emulator bench-throughput: {problem}", file=sys.stderr)
            return 2
    return 0 if all(r.errors == 0 for r in all_results) else 1
