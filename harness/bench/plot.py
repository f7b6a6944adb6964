"""The benchmark's PNG: throughput against concurrency, log x axis, one line per backend, published points marked."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.bench.stats import LevelResult

#: Published figures from Daytona's veRL guide (its throughput chart): (label, concurrency, calls/s).
REFERENCE_POINTS = (
    ("Daytona cloud, published: 98/s at 128", 128, 98.0),
    ("Docker, published: plateau near 18/s", 128, 18.0),
)


def plot_throughput(path: Path, runs: Mapping[str, Sequence[LevelResult]], title: str = "") -> None:
    """One panel per scenario; raises ImportError when matplotlib (the ``[bench]`` extra) is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(level.scenario for levels in runs.values() for level in levels))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6 * len(scenarios), 4.8), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios, strict=True):
        for backend, levels in runs.items():
            points = sorted((lv.concurrency, lv.throughput) for lv in levels if lv.scenario == scenario)
            if points:
                ax.plot([c for c, _ in points], [t for _, t in points], marker="o", label=backend)
        for (label, concurrency, figure), marker in zip(REFERENCE_POINTS, ("*", "X"), strict=True):
            ax.scatter([concurrency], [figure], marker=marker, s=160, color="black", zorder=5, label=label)
            ax.annotate(f"{figure:g}/s", (concurrency, figure), textcoords="offset points", xytext=(-42, 6))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency (calls in flight)")
        ax.set_ylabel("throughput (calls/s)")
        ax.set_title(scenario)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if title:  # wrapped to the figure's width (about 75 characters per panel at this size)
        fig.suptitle(textwrap.fill(title, 75 * len(scenarios)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
