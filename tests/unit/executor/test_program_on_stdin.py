"""``python -u -`` with the program on stdin (how Daytona's daemon runs ``code-run``) looks the same on both paths: a
real interpreter on the faithful path, a child of the warm interpreter on the fast one."""

from __future__ import annotations

from emulator.executor import ExecutionRequest

from .conftest import Runner

PROGRAM = b"""\
import sys
print(list(globals())[:9], __file__, __cached__, __loader__.__name__, __spec__)
print(sys.argv, repr(sys.path[0]), repr(sys.stdin.read()))
print('zygote' in open('/proc/self/cmdline').read())
def f():
    raise ValueError('boom')
f()
"""


def test_a_program_read_from_stdin_looks_the_same_on_both_paths(runner: Runner) -> None:
    async def run() -> tuple[str | None, str | None, int | None]:
        with runner.executor.workdir() as wd:
            python = runner.executor.config.python
            request = ExecutionRequest(argv=[python, "-u", "-"], cwd=wd.path, timeout=10, stdin=PROGRAM)
            result = await runner.executor.run(request)
        return result.stdout, result.stderr, result.return_code

    stdout, stderr, code = runner.call(run())
    names = ["__name__", "__doc__", "__package__", "__loader__", "__spec__", "__annotations__", "__builtins__"]
    assert stdout == (
        f"{[*names, '__file__', '__cached__']} <stdin> None BuiltinImporter None\n"
        "['-'] '' ''\n"
        f"{runner.mode == 'fast'}\n"  # the fast path runs it in a child of the warm interpreter
    )
    assert code == 1 and stderr == (
        "Traceback (most recent call last):\n"
        '  File "<stdin>", line 7, in <module>\n'
        '  File "<stdin>", line 6, in f\n'
        "ValueError: boom\n"
    )
