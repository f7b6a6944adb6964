"""YAML and JSON readers for plans and decision logs that refuse duplicate keys and say where in one line.

``yaml.safe_load`` and ``json.loads`` keep the last of two equal keys: a plan with ``fault`` written twice in one rule
silently loses the first. Here a duplicate is a ``FaultPlanError`` naming the key and where it is (line and column in
YAML, the path of its mapping in JSON, which has no positions after parsing), and a syntax error is one line naming
the source and position (PyYAML's own message spans several lines and says ``<unicode string>``).
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from .errors import FaultPlanError

__all__ = ["DuplicateKeyError", "json_loads_unique", "load_json", "load_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a mapping with one key twice is an error (a ``<<`` merge may still override)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML refuses it with its own message
            if key in seen:
                raise ConstructorError(
                    None, None, f"duplicate key {key!r} (also on line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, where: str) -> Any:
    """Parse YAML ``text`` read from ``where`` (a file name, or ``<yaml>``)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark is not None else where
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        context = " ".join(str(exc.context).split()) if exc.context and exc.problem else ""
        raise FaultPlanError(position, f"not valid YAML: {problem}" + (f" ({context})" if context else "")) from None
    except yaml.YAMLError as exc:
        raise FaultPlanError(where, "not valid YAML: " + " ".join(str(exc).split())) from None


class _Duplicated(dict[str, Any]):
    """A JSON object that had ``duplicate`` twice (the last value kept, as ``json`` does), found after parsing."""

    duplicate: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    duplicate: str | None = None
    for key, value in pairs:
        if key in out and duplicate is None:
            duplicate = key
        out[key] = value
    if duplicate is None:
        return out
    marked = _Duplicated(out)
    marked.duplicate = duplicate
    return marked


def _find_duplicate(value: Any, path: str) -> tuple[str, str] | None:
    """(path of the first object holding a duplicate key, the key), in document order."""
    if isinstance(value, _Duplicated):
        return path, value.duplicate
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = [(f"{path}.{k}" if path else k, v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    for sub, item in items:
        found = _find_duplicate(item, sub)
        if found is not None:
            return found
    return None


class DuplicateKeyError(ValueError):
    """A JSON object had ``key`` twice; ``path`` names the object (``rules[0].fault``; empty at the top level)."""

    def __init__(self, path: str, key: str) -> None:
        self.path = path
        self.key = key
        super().__init__(f"duplicate key {key!r}" + (f" in {path}" if path else ""))


def json_loads_unique(text: str | bytes) -> Any:
    """``json.loads``, but an object with a key twice raises ``DuplicateKeyError`` (syntax: ``JSONDecodeError``)."""
    data = json.loads(text, object_pairs_hook=_pairs)
    found = _find_duplicate(data, "")
    if found is not None:
        raise DuplicateKeyError(*found)
    return data


def load_json(text: str | bytes, where: str) -> Any:
    """Parse JSON ``text`` read from ``where``; errors are one line: ``where:line:column`` for a syntax error,
    ``where:path`` for a duplicate key (``plan.json:rules[0].fault: duplicate key 'status'``)."""
    try:
        return json_loads_unique(text)
    except json.JSONDecodeError as exc:
        raise FaultPlanError(f"{where}:{exc.lineno}:{exc.colno}", f"not valid JSON: {exc.msg}") from None
    except DuplicateKeyError as exc:
        raise FaultPlanError(f"{where}:{exc.path}" if exc.path else where, f"duplicate key {exc.key!r}") from None
