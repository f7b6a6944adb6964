"""The user guide's code runs: each ```python block is a test case (a block defining ``test_*`` functions runs
under pytest, with the project's plugin; any other block runs as a script), and each shell block names only
``sandbox-emulator`` subcommands, and options, that the CLI has. The guide documents every fixture and option the
pytest plugin registers and every CLI subcommand."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import build_parser

#: Blocks that may not run standalone (each marked ``<!-- no-test: reason -->`` in the guide); keep them few.
MAX_UNTESTED = 2
BLOCK_TIMEOUT_S = 60


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)


def _test_functions(code: str) -> list[str]:
    tree = ast.parse(code)
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def test_python_block_runs(python_block: Any, markdown_docs: Any, tmp_path: Path) -> None:
    code = python_block.code
    tests = _test_functions(code)
    if tests:
        module = tmp_path / "test_from_user_guide.py"
        module.write_text(code, encoding="utf-8")
        result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)], tmp_path)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"{python_block.label} failed under pytest:\n{output}"
        assert f"{len(tests)} passed" in output, output
    else:
        script = tmp_path / "block.py"
        script.write_text(code, encoding="utf-8")
        result = _run([sys.executable, str(script)], markdown_docs.repo)
        assert result.returncode == 0, f"{python_block.label} failed:\n{result.stdout}{result.stderr}"


def test_untested_blocks_are_few_and_explained(markdown_docs: Any) -> None:
    python_blocks = markdown_docs.user_guide_python_blocks()
    untested = [block for block in python_blocks if block.no_test is not None]
    report = "\n".join(f"{block.label}: {block.no_test}" for block in untested)
    assert len(python_blocks) >= 5, "the user guide should show its API in runnable Python"
    assert all(block.no_test for block in untested), f"a no-test block must say why:\n{report}"
    assert len(untested) <= MAX_UNTESTED, f"too many blocks are not run ({len(untested)}):\n{report}"


def _subcommands() -> set[str]:
    match = re.search(r"\{([a-z0-9,-]+)\}", build_parser().format_usage())
    assert match is not None, "the CLI's usage line lists no subcommands"
    return set(match[1].split(","))


def _help_of(subcommand: str) -> str:
    """``sandbox-emulator SUBCOMMAND --help``, in process (the subcommand's own module is imported)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser(subcommand).parse_args([subcommand, "--help"])
    return out.getvalue()


def _invocations(code: str) -> list[list[str]]:
    """The argument lists of each ``sandbox-emulator`` command in a shell block (after the program name)."""
    found = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        for command in re.split(r"\s(?:&&|\|\||;|\|)\s", line):
            words = shlex.split(command, comments=True)
            if words and Path(words[0]).name == "sandbox-emulator":
                found.append(words[1:])
    return found


def test_shell_block_uses_real_subcommands(shell_block: Any, markdown_docs: Any) -> None:
    invocations = _invocations(shell_block.code)
    assert invocations, f"{shell_block.label} mentions sandbox-emulator but runs no command of it"
    known = _subcommands()
    for words in invocations:
        positional = [w for w in words if not w.startswith(("-", "["))]
        assert positional and positional[0] in known, (
            f"{shell_block.label}: `sandbox-emulator {' '.join(words)}`: no subcommand "
            f"{positional[0] if positional else '(none)'!r}; the CLI has {sorted(known)}"
        )
        if shell_block.path != markdown_docs.user_guide:
            continue
        options = {re.split(r"[=\]]", w.lstrip("["))[0] for w in words if w.lstrip("[").startswith("--")}
        help_text = _help_of(positional[0])
        unknown = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", help_text))
        assert not unknown, f"{shell_block.label}: `sandbox-emulator {positional[0]}` has no option {unknown}"


def _plugin_registrations() -> tuple[list[str], list[str]]:
    """Fixture names and command-line options the pytest plugin registers, read from its source."""
    import harness.pytest_plugin as plugin

    tree = ast.parse(Path(plugin.__file__).read_text(encoding="utf-8"))
    fixtures = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    ]
    options = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "addoption"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    return fixtures, options


def test_user_guide_documents_every_fixture_option_and_subcommand(markdown_docs: Any) -> None:
    guide = markdown_docs.user_guide.read_text(encoding="utf-8")
    fixtures, options = _plugin_registrations()
    assert len(fixtures) >= 10 and len(options) >= 4, (fixtures, options)
    missing = [f"fixture {name}" for name in fixtures if f"`{name}`" not in guide]
    missing += [f"option {name}" for name in options if f"`{name}" not in guide]
    missing += [f"subcommand {name}" for name in sorted(_subcommands()) if f"`sandbox-emulator {name}" not in guide]
    assert not missing, "the user guide does not mention: " + ", ".join(missing)
