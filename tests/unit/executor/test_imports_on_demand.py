"""The warm interpreter imports a stdlib module for its children once a program names it, not at start-up.

Every module it holds costs every child (its memory's page tables are copied at each fork and torn down at each exit),
so a program that imports nothing should not pay for ``statistics`` or ``decimal``; a program that does import one
pays its import only until the warm interpreter holds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, ExecutorConfig

#: Which of four candidates a program finds imported.
HELD = "import sys\nprint(sorted(m for m in ('fractions', 'random', 'statistics', 'decimal') if m in sys.modules))\n"


class Fresh:
    """One fast-path executor with a warm interpreter of its own (the shared one has seen other tests' programs)."""

    def __init__(self, private_tmp: bool = True) -> None:
        self.loop = asyncio.new_event_loop()
        self.executor = Executor(ExecutorConfig(python_mode="fast", warm_interpreters=1, private_tmp=private_tmp))
        self.loop.run_until_complete(self.executor.start())

    def run(self, code: str) -> ExecutionResult:
        """``python -`` with the program on its stdin, as Daytona's code-run runs it: the warm interpreter gets the
        source (as it does from Sandbox Fusion's files) and compiles it before the fork."""

        async def one() -> ExecutionResult:
            with self.executor.workdir() as wd:
                request = ExecutionRequest(
                    argv=[self.executor.config.python, "-"], cwd=wd.path, timeout=10.0, stdin=code.encode()
                )
                return await self.executor.run(request)

        return self.loop.run_until_complete(one())

    def run_script(self, script: Path) -> ExecutionResult:
        """A script that stays where it is (its directory outlives the run; the child reads it itself)."""
        request = ExecutionRequest(
            argv=[self.executor.config.python, str(script)],
            cwd=str(script.parent),
            timeout=10.0,
            python_script=str(script),
        )
        return self.loop.run_until_complete(self.executor.run(request))

    def close(self) -> None:
        self.loop.run_until_complete(self.executor.aclose())
        self.loop.close()


@pytest.fixture
def fresh() -> Iterator[Fresh]:
    made = Fresh()
    try:
        yield made
    finally:
        made.close()


def _ok(result: ExecutionResult) -> str:
    assert (result.status, result.return_code, result.stderr) == ("Finished", 0, ""), result
    assert result.stdout is not None
    return result.stdout


def test_a_module_is_held_for_later_programs_once_one_names_it(fresh: Fresh) -> None:
    assert _ok(fresh.run(HELD)) == "[]\n"
    assert _ok(fresh.run("from fractions import Fraction\nprint(Fraction(1, 3) + 1)\n")) == "4/3\n"
    assert _ok(fresh.run(HELD)) == "['decimal', 'fractions']\n"  # fractions imports decimal
    # statistics brings random along (whose after-fork reseed is swapped for a cheaper one: see below)
    assert _ok(fresh.run("import statistics\nprint(statistics.mean([1, 2]))\n")) == "1.5\n"
    assert _ok(fresh.run(HELD)) == "['decimal', 'fractions', 'random', 'statistics']\n"


def test_an_import_in_a_function_or_a_dotted_one_counts(fresh: Fresh) -> None:
    assert _ok(fresh.run("def later():\n    import decimal\n    return decimal\n")) == ""
    assert _ok(fresh.run(HELD)) == "['decimal']\n"
    # a dotted name under a held candidate: ``random`` is one, ``random.x`` is not a module but names it
    assert _ok(fresh.run("try:\n    import random.nothing\nexcept ImportError:\n    print('no')\n")) == "no\n"
    assert _ok(fresh.run(HELD)) == "['decimal', 'random']\n"


def test_random_imported_on_demand_is_still_seeded_afresh_in_each_run(fresh: Fresh) -> None:
    program = "import random\nprint(random.random())\n"
    values = {_ok(fresh.run(program)) for _ in range(4)}
    assert len(values) == 4
    assert "random" in _ok(fresh.run(HELD))


def test_the_import_looks_only_at_the_stdlib_not_at_the_last_programs_directory(tmp_path: Path) -> None:
    """Just before it forks, the warm interpreter holds the last child's ``sys.path`` (its script's directory first):
    a ``fractions.py`` there must not become every later child's ``fractions``. (Without a private /tmp, so that the
    warm interpreter sees the directory under ``tmp_path``, as it sees a Sandbox Fusion run's.)"""
    fresh = Fresh(private_tmp=False)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "fractions.py").write_text("print('not the stdlib')\n")
    (theirs / "main.py").write_text("print('ran')\n")
    try:
        assert _ok(fresh.run_script(theirs / "main.py")) == "ran\n"
        program = "import fractions, os\nprint(os.path.dirname(fractions.__file__) == os.path.dirname(os.__file__))\n"
        assert _ok(fresh.run(program)) == "True\n"
    finally:
        fresh.close()


def test_a_name_off_the_list_is_never_imported_by_the_warm_interpreter(fresh: Fresh) -> None:
    """Names that are not candidates (here, third-party or made up) are never imported by the warm interpreter."""
    result = fresh.run("try:\n    import no_such_module_here\nexcept ImportError as e:\n    print(e.name)\n")
    assert _ok(result) == "no_such_module_here\n"
    assert _ok(fresh.run("import sys\nprint('no_such_module_here' in sys.modules)\n")) == "False\n"


def test_a_program_on_stdin_that_the_compiler_warns_about_still_runs(fresh: Fresh) -> None:
    """The warm interpreter leaves such a program to the child to compile (so that the warning reaches its stderr),
    which compiles the source it was given: there is no file to read it from."""
    result = fresh.run("print(1 is 1)\n")
    assert (result.status, result.return_code, result.stdout) == ("Finished", 0, "True\n"), result
    assert result.stderr is not None and "SyntaxWarning" in result.stderr


def test_an_attribute_or_a_variable_of_a_candidates_name_imports_nothing(fresh: Fresh) -> None:
    """Only import statements count: ``d.copy()`` or a variable called ``random`` is no reason to hold a module."""
    program = (
        "random = [3, 1]\nd = {'a': 1}\nprint(d.copy(), sorted(random))\nclass N:\n    array = 1\nprint(N.array)\n"
    )
    assert _ok(fresh.run(program)) == "{'a': 1} [1, 3]\n1\n"
    probe = "import sys\nprint([m for m in ('copy', 'random', 'array') if m in sys.modules])\n"
    assert _ok(fresh.run(probe)) == "[]\n"


def test_the_modules_of_a_requests_files_are_read_in_its_real_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files' paths are real ones: a work dir under a symlinked temp root is compared by its real path too;
    a directory without ``__init__`` is no package of the program's, a built-in module no file shadows."""
    from emulator.executor import zygote_main as z

    monkeypatch.setattr(z, "_FRESH_MODULES", frozenset({"sys", "os"}))
    real = "/real/tmpabc"
    files = [
        (f"{real}/random.py", b"", False),
        (f"{real}/fractions/__init__.py", b"", False),
        (f"{real}/decimal/__init__.txt", b"", False),  # a namespace portion at most: the stdlib's decimal still wins
        (f"{real}/os.py", b"", False),  # a fresh interpreter holds os already
        (f"{real}/gc.py", b"", False),  # built in: found before any file
        (f"{real}/data.tar.gz", b"", False),
        (f"{real}/sub/json.py", b"", False),  # not on sys.path
        (f"{real}/tmpmain.py", b"", True),
    ]
    workdir = {"path": "/link/tmpabc", "real": real, "files": [], "fetch": []}
    script = {"script": "/link/tmpabc/tmpmain.py", "script_dir": real, "cwd": "/link/tmpabc", "dir": workdir}
    assert z._own_modules(script, files) == {"random", "fractions", "tmpmain"}
    on_stdin = {"program_on_stdin": True, "script": None, "cwd": "/link/tmpabc", "dir": workdir}
    assert z._own_modules(on_stdin, files) == {"random", "fractions", "tmpmain"}
    monkeypatch.setattr(z, "_FRESH_MODULES", None)
    assert z._own_modules(script, files) == frozenset()  # unknown: no module of the program's is preferred


def test_typing_too_is_held_only_once_a_program_imports_it(fresh: Fresh) -> None:
    """The warm interpreter's own code does not import ``typing`` (its annotations are never evaluated)."""
    probe = "import sys\nprint('typing' in sys.modules)\n"
    assert _ok(fresh.run(probe)) == "False\n"
    assert _ok(fresh.run("from typing import List\nx: List[int] = [1]\nprint(x)\n")) == "[1]\n"
    assert _ok(fresh.run(probe)) == "True\n"
