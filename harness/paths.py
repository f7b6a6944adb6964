"""Where the project's data files are.

They live in the checkout's top-level ``fixtures/``; ``harness/fixtures`` links to it, so the wheel and the sdist
carry a copy as package data and an installed ``harness`` finds it beside itself, as a checkout does.
"""

from __future__ import annotations

from pathlib import Path

#: The data files: tool configs, the bundled GSM8K problems, the reference suite and its snapshots, the chaos
#: profiles and regressions.
FIXTURES: Path = Path(__file__).resolve().parent / "fixtures"
