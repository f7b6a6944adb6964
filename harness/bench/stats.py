"""Latency and throughput figures of the backend benchmark, computed as Daytona's ``benchmark_tool_backends.py`` does.

Kept apart from the drivers so the index rule and the file formats can be tested without running anything.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ``results.csv`` columns, in Daytona's order.
CSV_COLUMNS = (
    "scenario",
    "concurrency",
    "p50_s",
    "p95_s",
    "max_s",
    "mean_s",
    "throughput_calls_per_s",
    "success_count",
    "failure_count",
)
#: Keys of each ``summary.json`` result, as Daytona's script writes them.
RESULT_KEYS = (
    "scenario",
    "concurrency",
    "measured_call_count",
    "success_count",
    "failure_count",
    "p50_latency_s",
    "p95_latency_s",
    "max_latency_s",
    "mean_latency_s",
    "throughput_calls_per_s",
    "status",
)
#: Keys a result has besides Daytona's for a backend whose emulator's journal was read (see ``emulator_time``).
EMULATOR_KEYS = ("p50_emulator_s", "p95_emulator_s")
#: Top-level keys of ``summary.json``.
SUMMARY_KEYS = ("backend", "created_at", "host", "python_version", "results", "setup_result")


def percentile(values: Sequence[float], pct: float) -> float:
    """The value at index ``round((n - 1) * pct)`` of the sorted values (Daytona's rule: no interpolation)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= pct <= 1.0:
        raise ValueError(f"percentile fraction must be in [0, 1], got {pct}")
    ordered = sorted(values)
    return ordered[round((len(ordered) - 1) * pct)]


def spread(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, max and mean of timings (all 0.0 when there are none, as for an empty pool)."""
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0, "mean": 0.0}
    return {
        "p50": percentile(values, 0.50),
        "p95": percentile(values, 0.95),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


@dataclass(frozen=True)
class LevelResult:
    """One (scenario, concurrency) cell: the measured batches only, warm-ups left out."""

    scenario: str
    concurrency: int
    latencies_s: tuple[float, ...]
    batch_walls_s: tuple[float, ...]
    success_count: int
    failure_count: int
    #: The emulator's own time per measured call, from the request's arrival to its answer (its journal); empty for
    #: a backend that is not the benchmark's own emulator.
    emulator_s: tuple[float, ...] = ()

    @property
    def throughput(self) -> float:
        """Calls over the sum of batch wall times (the time between batches is not counted)."""
        wall = sum(self.batch_walls_s)
        return len(self.latencies_s) / wall if wall > 0 else 0.0

    def result(self) -> dict[str, Any]:
        """The ``summary.json`` form."""
        figures = spread(self.latencies_s)
        result: dict[str, Any] = {
            "scenario": self.scenario,
            "concurrency": self.concurrency,
            "measured_call_count": len(self.latencies_s),
            "success_count": self.success_count,
            "failure_count": self.failure_count,
            "p50_latency_s": figures["p50"],
            "p95_latency_s": figures["p95"],
            "max_latency_s": figures["max"],
            "mean_latency_s": figures["mean"],
            "throughput_calls_per_s": self.throughput,
            "status": "ok",
        }
        if self.emulator_s:
            emulator = spread(self.emulator_s)
            result.update(zip(EMULATOR_KEYS, (emulator["p50"], emulator["p95"]), strict=True))
        return result

    def row(self) -> dict[str, str]:
        """The ``results.csv`` form: latencies to 4 decimals, throughput to 2."""
        figures = spread(self.latencies_s)
        return {
            "scenario": self.scenario,
            "concurrency": str(self.concurrency),
            "p50_s": f"{figures['p50']:.4f}",
            "p95_s": f"{figures['p95']:.4f}",
            "max_s": f"{figures['max']:.4f}",
            "mean_s": f"{figures['mean']:.4f}",
            "throughput_calls_per_s": f"{self.throughput:.2f}",
            "success_count": str(self.success_count),
            "failure_count": str(self.failure_count),
        }


@dataclass(frozen=True)
class PoolTimings:
    """Times to create (setup) and release (teardown) the pre-created sandboxes."""

    create_times_s: tuple[float, ...]
    create_wall_s: float
    release_times_s: tuple[float, ...] = ()
    release_wall_s: float = 0.0

    def setup_result(self) -> dict[str, Any]:
        created = spread(self.create_times_s)
        released = spread(self.release_times_s)
        return {
            "setup": {
                "sandbox_count": len(self.create_times_s),
                "create_times_s": list(self.create_times_s),
                "p50_create_s": created["p50"],
                "p95_create_s": created["p95"],
                "max_create_s": created["max"],
                "mean_create_s": created["mean"],
                "total_wall_s": self.create_wall_s,
            },
            "teardown": {
                "sandbox_count": len(self.release_times_s),
                "release_times_s": list(self.release_times_s),
                "mean_release_s": released["mean"],
                "total_wall_s": self.release_wall_s,
            },
        }


def write_csv(path: Path, results: Sequence[LevelResult]) -> None:
    """``results.csv`` with exactly :data:`CSV_COLUMNS`."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for level in results:
            writer.writerow(level.row())


def write_summary(path: Path, header: Mapping[str, Any], results: Sequence[LevelResult], pool: PoolTimings) -> None:
    """``summary.json``: ``header`` (backend, created_at, host, python_version, extras) plus results and setup."""
    data = {**header, "results": [level.result() for level in results], "setup_result": pool.setup_result()}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
