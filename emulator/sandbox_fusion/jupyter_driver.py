"""Kernel-like driver for /run_jupyter: runs cells in order in one namespace and reports each cell's output.

Runs under the runtime interpreter as a standalone script (it imports nothing from the emulator). Reads the
request config from ``config.json`` next to it, prints ``config:`` and the config as the real driver does, and writes
the per-cell results to ``cells.json``. Per cell: stdout, stderr, ``display`` (the value of a trailing expression
as ``{"text/plain": repr}``, like a notebook's Out[n]) and ``error`` (``ename``, ``evalue``, ``traceback``).
"""

from __future__ import annotations

import ast
import io
import json
import os
import sys
import traceback
from typing import Any


def _run_cell(source: str, namespace: dict[str, Any], counter: int) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    display: list[dict[str, str]] = []
    error: list[dict[str, Any]] = []
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    filename = f"<cell-{counter}>"
    try:
        tree = ast.parse(source, filename=filename, mode="exec")
        last_expr = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr):
            tree.body.pop()
            last_expr = ast.Expression(tail.value)
        exec(compile(tree, filename, "exec"), namespace)
        if last_expr is not None:
            value = eval(compile(last_expr, filename, "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                display.append({"text/plain": repr(value)})
    except BaseException as exc:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        error.append({"ename": type(exc).__name__, "evalue": str(exc), "traceback": [ln.rstrip("\n") for ln in lines]})
    finally:
        sys.stdout, sys.stderr = saved
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "display": display, "error": error}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "config.json")) as f:
        config = json.load(f)
    # As upstream's pydantic model_dump_json(indent=2): non-ASCII text as it is. Like upstream's driver, no limit per
    # cell (its cell_timeout is read and never used): the command's own timeout bounds the whole run.
    print("config: \n" + json.dumps(config, indent=2, ensure_ascii=False))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    results: list[dict[str, Any]] = []
    for index, cell in enumerate(config["cells"]):
        results.append(_run_cell(cell, namespace, index + 2))
        with open(os.path.join(here, "cells.json"), "w") as f:
            json.dump(results, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
