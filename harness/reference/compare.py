"""Structural comparison of two JSON values: the leaf paths where they differ, named like ``body.run_result.stderr``
or ``body.cells[4].error[0]``, so that a divergence can be registered by the field it touches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MISSING: Any = object()


@dataclass(frozen=True)
class Difference:
    """``expected`` is the recording's value, ``got`` the checked target's; ``None`` stands for absent in
    ``to_dict`` when ``missing``/``extra`` say so."""

    path: str
    expected: Any
    got: Any
    kind: str  # "changed", "missing" (in the target's answer), "extra" (not in the recording)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "expected": self.expected, "got": self.got}

    def describe(self, width: int = 300) -> str:
        if self.kind == "missing":
            return f"{self.path}: missing (recorded {_short(self.expected, width)})"
        if self.kind == "extra":
            return f"{self.path}: not in the recording (got {_short(self.got, width)})"
        return f"{self.path}:\n    recorded {_short(self.expected, width)}\n    got      {_short(self.got, width)}"


def _short(value: Any, width: int) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def diff(expected: Any, got: Any, path: str = "") -> list[Difference]:
    """Every leaf where ``got`` differs from ``expected`` (dict keys compared as sets, lists position by position;
    ``1`` and ``1.0`` are equal, ``1`` and ``True`` are not)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out: list[Difference] = []
        for key in list(expected) + [k for k in got if k not in expected]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in got:
                out.append(Difference(sub, expected[key], None, "missing"))
            elif key not in expected:
                out.append(Difference(sub, None, got[key], "extra"))
            else:
                out += diff(expected[key], got[key], sub)
        return out
    if isinstance(expected, list) and isinstance(got, list):
        out = []
        for i in range(max(len(expected), len(got))):
            sub = f"{path}[{i}]"
            if i >= len(got):
                out.append(Difference(sub, expected[i], None, "missing"))
            elif i >= len(expected):
                out.append(Difference(sub, None, got[i], "extra"))
            else:
                out += diff(expected[i], got[i], sub)
        return out
    if type(expected) is bool or type(got) is bool:
        same = type(expected) is type(got) and expected == got
    else:
        same = expected == got
    return [] if same else [Difference(path, expected, got, "changed")]
