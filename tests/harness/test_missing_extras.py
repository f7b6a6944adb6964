"""A command whose extra is not installed says which one to install (exit 2), whenever its import happens.

Each case runs the command line in a fresh interpreter where one package cannot be imported (``sys.modules[name] =
None`` makes every ``import name`` fail as if it were not installed), so the project's own modules load as they would
on a machine without that extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_RUN_WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from harness.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _without(packages: str, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", _RUN_WITHOUT, packages, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize(
    ("packages", "argv", "extra", "missing"),
    [
        ("daytona", ["bench-daytona", "--sandboxes", "1", "--json", "o"], "daytona", "daytona"),
        ("verl", ["bench", "--backends", "emulator-sf-fast", "--quick", "--out", "o"], "verl", "verl"),
        ("verl", ["bench", "--backends", "emulator-daytona-fast", "--quick", "--out", "o"], "verl", "verl"),
        ("aiohttp", ["bench-throughput", "--client", "aiohttp", "--modes", "fast", "--json", "o"], "bench", "aiohttp"),
        ("pyarrow", ["gsm8k-convert", "in.jsonl", "o.parquet"], "verl", "pyarrow"),
    ],
)
def test_a_missing_package_is_one_line_and_exit_2(
    tmp_path: Path, packages: str, argv: list[str], extra: str, missing: str
) -> None:
    if argv[0] == "gsm8k-convert":
        problem = {"question": "1 + 1?", "answer": "<<1+1=2>>2\n#### 2"}
        (tmp_path / "in.jsonl").write_text(json.dumps(problem) + "\n", encoding="utf-8")
    result = _without(packages, *argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"needs the [{extra}] extra ({missing} is not installed)" in result.stderr
    assert f"pip install 'sandbox-emulator[{extra}]'" in result.stderr
    for written in tmp_path.glob("o*"):  # found out before anything ran or was written
        assert written.is_dir() and not any(written.rglob("*"))


def test_validate_needs_verl_only_for_the_gsm8k_reward(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    entry = {"input": "q", "output": "#### 2", "gts": "2", "score": 1.0, "step": 1}
    (dump / "1.jsonl").write_text(json.dumps(entry) + "\n", encoding="utf-8")
    without_reward = _without("verl", "validate", str(dump), "--reward", "none")
    assert "Traceback" not in without_reward.stderr and "verl" not in without_reward.stderr
    assert without_reward.returncode in (0, 1), without_reward.stderr  # validated: clean or with violations
    with_reward = _without("verl", "validate", str(dump), "--reward", "gsm8k")
    assert with_reward.returncode == 2 and "verl" in with_reward.stderr and "Traceback" not in with_reward.stderr


def test_the_daytona_fixtures_without_the_sdk_say_which_extra_to_install(pytester: pytest.Pytester) -> None:
    """Each test that asks for them fails with that one line, not a ModuleNotFoundError from inside the plugin."""
    pytester.makeconftest("import sys\n\nsys.modules['daytona'] = None  # as if the extra were not installed\n")
    pytester.makepyfile(
        test_user="def test_config(daytona_config):\n    pass\n\n\ndef test_client(daytona_client):\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert "ModuleNotFoundError" not in out and "Traceback" not in out and "another exception" not in out
    assert "import of daytona halted" not in out
    assert out.count("the daytona_config fixture needs the [daytona] extra (daytona is not installed)") >= 2
    assert "pip install 'sandbox-emulator[daytona]'" in out
