"""A program's own module beside it is what its import finds, even where the warm interpreter holds a module of that
name (imported there for earlier programs that named it)."""

from __future__ import annotations

import base64

import requests


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _run(url: str, code: str, **extra: object) -> dict[str, object]:
    answer = requests.post(url, json={"code": code, "language": "python", **extra}, timeout=60)
    assert answer.status_code == 200
    body: dict[str, object] = answer.json()
    return body


def test_a_module_file_and_a_package_in_files_shadow_what_the_warm_interpreter_holds(sandbox_fusion_url: str) -> None:
    # Earlier programs named them: the warm interpreter holds the stdlib's random and fractions from now on.
    first = _run(sandbox_fusion_url, "import random, fractions\nprint(fractions.Fraction(1, 2))")
    assert first["run_result"]["stdout"] == "1/2\n", first  # type: ignore[index]
    held = _run(sandbox_fusion_url, "import sys\nprint('random' in sys.modules, 'fractions' in sys.modules)")
    assert held["run_result"]["stdout"] == "True True\n", held  # type: ignore[index]
    body = _run(
        sandbox_fusion_url,
        "import random, fractions, os\nprint(random.VALUE, fractions.VALUE, os.path.basename(random.__file__))\n",
        files={"random.py": _b64("print('mine')\nVALUE = 7\n"), "fractions/__init__.py": _b64("VALUE = 8\n")},
    )
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "mine\n7 8 random.py\n"  # type: ignore[index]
    # and the next program without them gets the stdlib's again
    after = _run(sandbox_fusion_url, "import random\nprint(hasattr(random, 'VALUE'), hasattr(random, 'shuffle'))")
    assert after["run_result"]["stdout"] == "False True\n", after  # type: ignore[index]


def test_a_module_name_of_a_fresh_interpreter_is_not_forgotten(sandbox_fusion_url: str) -> None:
    """``os`` is imported before a fresh interpreter's first line: an ``os.py`` beside the program is not what its
    ``import os`` finds there either."""
    body = _run(sandbox_fusion_url, "import os\nprint(hasattr(os, 'getpid'))", files={"os.py": _b64("X = 1\n")})
    assert body["run_result"]["stdout"] == "True\n", body  # type: ignore[index]


def test_a_directory_of_a_held_modules_name_without_init_is_no_package_of_the_programs(sandbox_fusion_url: str) -> None:
    """A real interpreter finds the stdlib's ``fractions`` before a namespace portion: the program gets the same module
    that ``statistics`` holds, not a second copy of it."""
    _run(sandbox_fusion_url, "import statistics, fractions")
    body = _run(
        sandbox_fusion_url,
        "import statistics, fractions\nprint(statistics.Fraction is fractions.Fraction)\n",
        files={"fractions/__init__.txt": _b64("not code\n")},
    )
    assert body["run_result"]["stdout"] == "True\n", body  # type: ignore[index]
