"""The scripts that run under the runtime interpreter, which may be Python 3.8 or newer (``harness.runtime``), use
nothing newer. Their syntax parses as 3.8's; and what 3.8 refuses only when the line runs is looked for outside
annotations (which ``from __future__ import annotations`` leaves unevaluated): an ``X | Y`` union in
``isinstance``/``issubclass`` (a SyntaxError in a program once reached one), a subscripted builtin such as
``dict[str, int]``, ``str.removeprefix``/``removesuffix`` (3.9), ``zip(strict=)`` and ``int.bit_count`` (3.10)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import emulator

ROOT = Path(emulator.__file__).parent
SCRIPTS = [
    ROOT / "executor" / "zygote_main.py",
    ROOT / "executor" / "zygote_boot.py",
    ROOT / "daytona" / "interp_driver.py",
    ROOT / "sandbox_fusion" / "jupyter_driver.py",
]
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
NEWER_METHODS = {"removeprefix", "removesuffix", "bit_count"}


def _evaluated(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that runs, annotations left out."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns") or (isinstance(node, ast.AnnAssign) and field == "target"):
                continue
            children = value if isinstance(value, list) else [value]
            stack.extend(child for child in children if isinstance(child, ast.AST))


def _problems(tree: ast.AST) -> list[str]:
    found = []
    for node in _evaluated(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            checked = node.args[1] if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 else None
            if isinstance(checked, ast.BinOp) and isinstance(checked.op, ast.BitOr):
                found.append(f"line {node.lineno}: an X | Y union in {node.func.id}")
            if node.func.id == "zip" and any(k.arg == "strict" for k in node.keywords):
                found.append(f"line {node.lineno}: zip(strict=)")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
            found.append(f"line {node.lineno}: {node.value.id}[...] evaluated")
        if isinstance(node, ast.Attribute) and node.attr in NEWER_METHODS:
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_runtime_script_is_python_3_8(script: Path) -> None:
    tree = ast.parse(script.read_text(), filename=str(script), feature_version=(3, 8))
    assert _problems(tree) == []


def test_the_check_finds_what_it_looks_for() -> None:
    source = (
        "isinstance(x, int | str)\nzip(a, b, strict=True)\nT = dict[str, int]\n'ab'.removeprefix('a')\n"
        "def f(a: dict[str, int]) -> list[int]:\n    b: tuple[int] = (1,)\n"
    )
    assert len(_problems(ast.parse(source))) == 4


def test_the_two_signal_resets_are_the_same() -> None:
    """The warm interpreter and the Daytona driver each reset inherited signals in a copy of one function (neither
    may import the other): their code, docstrings left out, must not drift apart."""

    def body(script: Path) -> str:
        tree = ast.parse(script.read_text())
        [function] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_default_signals"]
        return ast.dump(ast.Module(body=function.body[1:], type_ignores=[]))  # [0] is the docstring

    assert body(ROOT / "executor" / "zygote_main.py") == body(ROOT / "daytona" / "interp_driver.py")
