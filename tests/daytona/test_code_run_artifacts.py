"""Lines of ``/process/code-run``'s output that start with the daemon's artifact marker are not in ``result`` (its
v0.190 source: ``process/coderun/artifacts.go``, ``ParseArtifacts``, called on every code-run): the output is split
at each ``\\n``, every piece that starts with ``dtn_artifact_k39fd2:`` dropped, whatever follows the marker, and
the rest joined with ``\\n`` again. ``/process/execute`` does not look for it.

Why it matters to a trainer: code that prints such a line (or a chart's, with matplotlib) gets a ``result`` without
it from the real service; a reward comparing the output would see a difference only on the emulator.
"""

from __future__ import annotations

import httpx
import pytest
from daytona import Daytona, DaytonaConfig

MARKER = "dtn_artifact_k39fd2:"


def test_the_sdk_gets_code_run_output_without_the_marker_lines(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        ran = sandbox.process.code_run(f"print('a'); print('{MARKER} not json'); print('b')")
        assert (ran.exit_code, ran.result, ran.artifacts.charts) == (0, "a\nb\n", [])
    finally:
        sandbox.delete()


@pytest.mark.parametrize(
    ("written", "result"),
    [
        (f"a\n{MARKER} not json\nb\n", "a\nb\n"),
        (f'{MARKER} {{"type": "chart", "value": {{"type": "line"}}}}\nc\n', "c\n"),  # a chart's line, too
        (f"{MARKER}\n{MARKER}   \n", ""),  # nothing after the marker: dropped all the same
        (f"a\n{MARKER}x", "a"),  # the last line dropped takes the newline before it
        (f"a\n{MARKER}x\n", "a\n"),  # a trailing newline stays
        (f"{MARKER} y\r\nz\n", "z\n"),  # only \n splits: the \r goes with its line
        (f"x {MARKER}\n {MARKER}\nX{MARKER}\n", f"x {MARKER}\n {MARKER}\nX{MARKER}\n"),  # not at a line's start
        ("dtn_artifact_k39fd2\n", "dtn_artifact_k39fd2\n"),  # no colon, no marker
        ("a\n\n\n", "a\n\n\n"),
    ],
)
def test_code_run_drops_each_line_that_starts_with_the_marker(
    tb: tuple[httpx.Client, str], written: str, result: str
) -> None:
    client, prefix = tb
    code = f"import sys\nsys.stdout.write({written!r})"
    answer = client.post(prefix + "/process/code-run", json={"code": code, "language": "python"})
    assert answer.status_code == 200
    assert (answer.json()["exitCode"], answer.json()["result"]) == (0, result)  # (the chart itself is not emulated)


def test_a_marker_line_on_stderr_is_dropped_too(tb: tuple[httpx.Client, str]) -> None:
    """The daemon's stdout and stderr go to one buffer, which it parses as a whole."""
    client, prefix = tb
    code = f"import sys\nprint('out')\nprint('{MARKER} x', file=sys.stderr)\nprint('err', file=sys.stderr)"
    answer = client.post(prefix + "/process/code-run", json={"code": code, "language": "python"})
    assert answer.json() == {"exitCode": 0, "result": "out\nerr\n"}


def test_execute_keeps_the_marker_lines(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": f"echo '{MARKER} x'; echo b"})
    assert answer.json() == {"exitCode": 0, "result": f"{MARKER} x\nb\n"}
