"""Run-semantics of both executor paths against the recorded real-server answers."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from emulator.executor import KEEP_BYTES, ExecutionResult

from .conftest import Runner, normalize_paths

REFERENCE = Path(__file__).resolve().parents[3] / "fixtures" / "reference" / "sandbox_fusion" / "run_code_cases.json"
CASES: dict[str, dict[str, Any]] = json.loads(REFERENCE.read_text())


def _case(case_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    case = CASES[case_id]
    return case["request"], case["response"]["run_result"]


def _as_dict(result: ExecutionResult) -> dict[str, Any]:
    return {
        "status": result.status,
        "return_code": result.return_code,
        "stdout": normalize_paths(result.stdout),
        "stderr": normalize_paths(result.stderr),
    }


def _expected(run_result: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": run_result["status"],
        "return_code": run_result["return_code"],
        "stdout": normalize_paths(run_result["stdout"]),
        "stderr": normalize_paths(run_result["stderr"]),
    }


@pytest.mark.parametrize(
    "case_id", ["01_print", "03_exception", "04_syntax_error", "09_stdin", "11_memory_limit", "28_non_utf8_stdout"]
)
def test_recorded_case_matches_exactly(runner: Runner, case_id: str, py311: None) -> None:
    request, want = _case(case_id)
    stdin = request.get("stdin")
    got = runner.run(
        request["code"],
        stdin=stdin.encode() if stdin is not None else None,
        memory_limit_mb=int(request.get("memory_limit_MB", -1)),
    )
    assert _as_dict(got) == _expected(want)
    assert got.execution_time is not None and 0 < got.execution_time < 2


def test_memory_without_limit_allocates(runner: Runner) -> None:
    request, want = _case("12_memory_nolimit")
    assert _as_dict(runner.run(request["code"])) == _expected(want)


def test_thread_under_memory_limit_cannot_start(runner: Runner, py311: None) -> None:
    """Case 31: the 1 GiB soft stack limit becomes the default thread stack, which cannot be mapped."""
    request, want = _case("31_thread_with_memlimit_1024")
    got = runner.run(request["code"], memory_limit_mb=1024)
    stdlib = re.compile(r'File "[^"]*/threading\.py", line \d+')
    assert got.return_code == 1
    assert stdlib.sub("THREADING", normalize_paths(got.stderr) or "") == stdlib.sub(
        "THREADING", normalize_paths(want["stderr"]) or ""
    )


def test_threads_work_without_memory_limit(runner: Runner) -> None:
    code = "import threading\nt=threading.Thread(target=lambda: print('in thread'))\nt.start(); t.join()\nprint('done')"
    got = runner.run(code)
    assert (got.return_code, got.stdout) == (0, "in thread\ndone\n")


_READ_THREAD_STACK = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None)\n"
    "attr = ctypes.create_string_buffer(256)\n"
    "size = ctypes.c_size_t()\n"
    "libc.pthread_getattr_default_np(attr)\n"
    "libc.pthread_attr_getstacksize(attr, ctypes.byref(size))\n"
    "print(size.value)"
)


def test_default_thread_stack_follows_each_request(runner: Runner) -> None:
    """Each program sees the default thread stack a fresh process would: its memory limit's, or the usual one.

    Requests with and without limits, one at a time and mixed in one burst, so a size set for one child never leaks
    into the next (the fast path sets it in the warm interpreter and resets it for a request without a limit).
    """

    def stack(result: ExecutionResult) -> int:
        assert result.return_code == 0, result.stderr
        return int(result.stdout or "")

    plain = stack(runner.run(_READ_THREAD_STACK))
    assert plain < 1024 * 2**20
    sequence = [256, -1, 512, 512, -1, -1, 256]
    assert [stack(runner.run(_READ_THREAD_STACK, memory_limit_mb=m)) for m in sequence] == [
        m * 2**20 if m > 0 else plain for m in sequence
    ]

    async def burst() -> list[ExecutionResult]:
        runs = [runner.arun(_READ_THREAD_STACK, memory_limit_mb=m) for m in sequence * 3]
        return [result for result, _ in await asyncio.gather(*runs)]

    assert [stack(r) for r in runner.call(burst())] == [m * 2**20 if m > 0 else plain for m in sequence * 3]


def test_native_threads_fail_under_memory_limit(runner: Runner, runtime: dict[str, Any]) -> None:
    """Case 32: OpenBLAS threads fail as in a fresh process, then the process dies by SIGINT."""
    if not runtime["numpy"]:
        pytest.skip("numpy is not installed for the runtime interpreter")
    got = runner.run("import numpy as np\nprint(np.arange(10).sum())", memory_limit_mb=1024)
    assert got.return_code == -2
    assert (got.stderr or "").startswith("OpenBLAS blas_thread_init: pthread_create failed for thread 1 of")


def test_timeout_gives_tle(runner: Runner) -> None:
    got = runner.run("while True: pass", timeout=0.5)
    assert (got.status, got.return_code, got.stdout, got.stderr) == ("TimeLimitExceeded", None, "", "")
    # Never before the limit; after it, a margin wide enough for a loaded machine's late timer and kill (a run the
    # timeout did not end would go on for ever).
    assert got.execution_time is not None and 0.5 <= got.execution_time < 2.0


def test_timeout_keeps_flushed_output(runner: Runner) -> None:
    code = (
        "import sys\nprint('started', flush=True)\nsys.stderr.write('err-before-hang\\n')\n"
        "print('never flushed')\nwhile True: pass"
    )
    got = runner.run(code, timeout=0.5)
    assert (got.status, got.return_code) == ("TimeLimitExceeded", None)
    assert (got.stdout, got.stderr) == ("started\n", "err-before-hang\n")


def test_zero_timeout_is_immediate_tle(runner: Runner) -> None:
    got = runner.run("print(1)", timeout=0)
    assert (got.status, got.return_code, got.stdout, got.stderr) == ("TimeLimitExceeded", None, "", "")
    # No program is started (the status and empty output say so); the bound only rules out a wait, with room for a
    # loaded machine.
    assert got.execution_time is not None and got.execution_time < 0.5


def test_sigkill_self(runner: Runner) -> None:
    got = runner.run("import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)")
    assert (got.status, got.return_code, got.stdout, got.stderr) == ("Finished", -9, "bye\n", "")


@pytest.mark.parametrize(
    ("code", "rc", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit()", 0, ""),
        ("import sys; sys.exit(256 + 7)", 7, ""),
        ("raise SystemExit(True)", 1, ""),
        ("import sys; sys.exit('bad input')", 1, "bad input\n"),
        ("print('x', end='')\nraise SystemExit(-1)", 255, ""),
    ],
)
def test_system_exit(runner: Runner, code: str, rc: int, stderr: str) -> None:
    got = runner.run(code)
    assert (got.status, got.return_code, got.stderr) == ("Finished", rc, stderr)


def test_keyboard_interrupt_dies_by_sigint(runner: Runner) -> None:
    got = runner.run("print('a')\nraise KeyboardInterrupt")
    assert got.return_code == -2
    assert got.stdout == "a\n"
    assert normalize_paths(got.stderr) == (
        'Traceback (most recent call last):\n  File "/tmp/tmpDIR/tmpFILE.py", line 2, in <module>\n'
        "    raise KeyboardInterrupt\nKeyboardInterrupt\n"
    )


def test_input_without_stdin_is_eof(runner: Runner) -> None:
    got = runner.run("input()")
    assert got.return_code == 1
    assert (got.stderr or "").endswith("EOFError: EOF when reading a line\n")


def test_large_stdin_is_fed_completely(runner: Runner) -> None:
    data = b"x" * 300_000 + b"\n"
    got = runner.run("import sys\nprint(len(sys.stdin.buffer.read()))", stdin=data)
    assert (got.return_code, got.stdout) == (0, "300001\n")


def test_chained_exception_traceback(runner: Runner) -> None:
    code = "def f():\n    try:\n        1/0\n    except ZeroDivisionError:\n        raise KeyError('k')\nf()\n"
    got = runner.run(code)
    assert got.return_code == 1
    text = normalize_paths(got.stderr) or ""
    assert "During handling of the above exception, another exception occurred:" in text
    assert text.count('File "/tmp/tmpDIR/tmpFILE.py"') == 3
    assert "zygote" not in text


@pytest.mark.parametrize(("size", "expect_len"), [(100_000, 100_001), (300_000, KEEP_BYTES)])
def test_output_capture_sizes(runner: Runner, size: int, expect_len: int) -> None:
    got = runner.run(f"print('a' * {size})", timeout=3)
    assert (got.status, got.return_code) == ("Finished", 0)
    assert len(got.stdout or "") == expect_len


def test_huge_output_blocks_until_tle(runner: Runner) -> None:
    got = runner.run("print('a' * 1_000_000)", timeout=1)
    assert (got.status, got.return_code) == ("TimeLimitExceeded", None)
    assert got.stdout == "a" * KEEP_BYTES


def test_endless_print_is_contained(runner: Runner) -> None:
    got = runner.run("while True: print()", timeout=1)
    assert (got.status, got.return_code) == ("TimeLimitExceeded", None)
    assert got.stdout == "\n" * KEEP_BYTES


def test_truncation_splitting_utf8_is_a_decode_error(runner: Runner) -> None:
    got = runner.run("print('a' + 'é' * 200_000)", timeout=3)
    assert got.stdout == "[DecodeError] 'utf-8' codec can't decode byte 0xc3 in position 219263: unexpected end of data"


def test_stderr_is_captured_separately(runner: Runner) -> None:
    got = runner.run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (got.stdout, got.stderr) == ("out\n", "err\n")


def test_random_state_differs_between_runs(runner: Runner) -> None:
    code = "import random, os\nprint(random.random(), os.urandom(8).hex())"
    outputs = {runner.run(code).stdout for _ in range(3)}
    assert len(outputs) == 3


def test_atexit_threads_and_finalisation(runner: Runner) -> None:
    code = (
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit')\n"
        "class D:\n    def __del__(self): print('del')\n"
        "d = D()\n"
        "threading.Thread(target=lambda: (time.sleep(0.05), print('thread'))).start()\n"
        "f = open('unclosed.txt', 'w'); f.write('buffered data')\n"
        "print('main')\n"
    )
    result, fetched = runner.call(runner.arun(code, fetch="unclosed.txt"))
    assert (result.return_code, result.stdout) == (0, "main\nthread\natexit\ndel\n")
    assert fetched == b"buffered data"


def test_files_are_visible_and_writable(runner: Runner) -> None:
    code = "print(open('data/in.txt').read())\nopen('out.txt', 'w').write('result-42')"
    result, fetched = runner.call(runner.arun(code, files={"data/in.txt": b"hello"}, fetch="out.txt"))
    assert (result.return_code, result.stdout) == (0, "hello\n")
    assert fetched == b"result-42"


def test_argv_path_cwd_and_main_module(runner: Runner) -> None:
    code = (
        "import sys, os\n"
        "print(sys.argv == [__file__], sys.path[0] == os.path.dirname(__file__), os.getcwd() == sys.path[0])\n"
        "print(__name__, __spec__, __package__, __cached__, type(__loader__).__name__, type(__builtins__).__name__)\n"
        "print(list(globals()))\n"
        "import __main__; print(__main__.__dict__ is globals())\n"
        "print([name for name in sys.modules if 'zygote' in name])\n"
    )
    got = runner.run(code)
    assert got.stdout == (
        "True True True\n__main__ None None None SourceFileLoader module\n"
        "['__name__', '__doc__', '__package__', '__loader__', '__spec__', '__annotations__', '__builtins__', "
        "'__file__', '__cached__', 'sys', 'os']\nTrue\n[]\n"
    )


def test_fresh_interpreter_process_state(both: dict[str, Runner]) -> None:
    """What a program can observe about its process is identical on both paths."""
    code = (
        "import signal, sys, os, resource\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
        "print([signal.getsignal(s) for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGCHLD)])\n"
        "print(sys.stdout.line_buffering, sys.stderr.line_buffering, sys.stdin.isatty(), sys.stdout.isatty())\n"
        "print(sys.stdout.encoding, sys.stdout.errors, sys.stdin.errors, sys.stderr.errors)\n"
        "print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())\n"
        "print(sorted(os.listdir('/proc/self/fd')))\n"
        "print(sys.getrecursionlimit(), sys.flags.optimize, sys.flags.isolated)\n"
        "print(resource.getrlimit(resource.RLIMIT_STACK), resource.getrlimit(resource.RLIMIT_FSIZE))\n"
        "print(sys.stdout.seekable(), sys.stdin.seekable())\n"
    )
    fast = both["fast"].run(code)
    faithful = both["faithful"].run(code)
    assert fast.return_code == faithful.return_code == 0
    assert fast.stdout == faithful.stdout
    assert "['0', '1', '2', '3']" in (fast.stdout or "")  # 3 = the fd listdir itself opened


@pytest.mark.parametrize(
    "code",
    [
        "x = 1 +\n",
        "def f():\n  return 1\n   return 2\n",
        "print('unterminated)\n",
        "'''never closed\n",
        "x = (1,\n",
        "# -*- coding: latin-1 -*-\nprint('\xe9')\n",
        "\ufeffprint('bom')\n",
        "import missing_module_xyz\n",
        "a = [1, 2, 3]\nprint(a[10])\n",
        "def f(n): return f(n + 1)\nf(0)\n",
        # A null byte: the tokenizer names its line and shows the line up to it (compile() names neither).
        "print(1)\0",
        "x = 1\nprint(1)\0\n",
        "\0print(1)",
        "a = 1\r\nb = 2\0",
        "a = 1\rb = 2\rc\0",
        "y = '\u00e9'\0 + 1\n",
    ],
)
def test_fast_and_faithful_agree(both: dict[str, Runner], code: str) -> None:
    data = code.encode("latin-1") if "latin-1" in code else code.encode()
    fast = both["fast"].run(data)
    faithful = both["faithful"].run(data)
    assert _as_dict(fast) == _as_dict(faithful)


def test_non_python_command(runner: Runner) -> None:
    """Case 15: any argv runs (here bash), exit codes and streams as usual."""
    from emulator.executor import ExecutionRequest

    async def go() -> ExecutionResult:
        with runner.executor.workdir() as wd:
            wd.write_file("f.sh", b"echo hi; echo oops >&2; exit 2")
            return await runner.executor.run(ExecutionRequest(argv=["/bin/bash", "f.sh"], cwd=wd.path, timeout=5))

    got = runner.call(go())
    assert (got.status, got.return_code, got.stdout, got.stderr) == ("Finished", 2, "hi\n", "oops\n")


def test_missing_program_is_an_error(runner: Runner) -> None:
    from emulator.executor import ExecutionRequest

    async def go() -> ExecutionResult:
        with runner.executor.workdir() as wd:
            return await runner.executor.run(ExecutionRequest(argv=["/nonexistent/prog"], cwd=wd.path, timeout=5))

    got = runner.call(go())
    assert got == ExecutionResult("Error", None, None, None, "[Errno 2] No such file or directory: '/nonexistent/prog'")


def test_thread_under_memory_limit_same_on_both_paths(both: dict[str, Runner]) -> None:
    """Any runtime version: the warm fork fails to start threads exactly like a fresh interpreter."""
    code = "import threading\nt = threading.Thread(target=print)\nt.start(); t.join()\nprint('done')"
    fast = both["fast"].run(code, memory_limit_mb=1024)
    faithful = both["faithful"].run(code, memory_limit_mb=1024)
    assert fast.return_code == 1
    assert _as_dict(fast) == _as_dict(faithful)
