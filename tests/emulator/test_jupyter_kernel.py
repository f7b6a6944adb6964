"""``/run_jupyter`` in IPython's shell as ipykernel sets it up (the ``ipython`` engine), and the plain-Python engine.

The exact answer of the real service (tracebacks included) is compared in ``tests/reference``; these tests check the
kernel's behaviours that the recording does not show, each as IPython and ipykernel 6 define it: the output of a
trailing ``;``, ``display()``, the pretty-printer, ``!cmd``, magics, top-level ``await``, the kernel's environment,
output written at the file-descriptor level, the cell file names of ipykernel's compiler, ``input()``, and a kernel
that stops with cells left.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
from typing import Any

import httpx
import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.executor import ExecutorConfig
from emulator.sandbox_fusion.jupyter_driver import CELL_HASH_SEED, KERNEL_WARNING, murmur2

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(cells: list[str], engine: str = "auto", python: str | None = None, **fields: Any) -> dict[str, Any]:
    """One ``/run_jupyter`` request to a fresh in-process emulator."""
    executor = ExecutorConfig(python=python) if python else ExecutorConfig()
    emulator = Emulator(EmulatorConfig(executor=executor, jupyter_engine=engine))

    async def main() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=emulator.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox", timeout=120) as client:
                answer = await client.post("/run_jupyter", json={"cells": cells, **fields})
                assert answer.status_code == 200, answer.text
                return dict(answer.json())
        finally:
            await emulator.aclose()

    return asyncio.run(main())


def _plain(text: str) -> str:
    return ANSI.sub("", text)


@pytest.fixture(scope="module")
def python_without_ipython(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A runtime interpreter that cannot import IPython: a bare virtual environment."""
    where = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    assert subprocess.run([python, "-c", "import IPython"], capture_output=True).returncode != 0
    return python


def test_murmur2_gives_ipykernels_cell_names() -> None:
    # Values of ipykernel 6's murmur2_x86 with its seed, for inputs of each tail length and a multi-byte character.
    known = {
        "": 3990065800,
        "a": 2167009006,
        "ab": 2805137849,
        "abc": 3350977461,
        "abcd": 804720481,
        "é": 2171970256,
        'raise RuntimeError("error message")': 1306137650,
    }
    assert {text: murmur2(text.encode(), CELL_HASH_SEED) for text in known} == known


def test_cells_run_as_the_kernel_runs_them() -> None:
    cells = [
        "a = 1;",  # 0: an assignment shows nothing
        "a;",  # 1: a trailing semicolon hides the value
        "a",  # 2
        "display(5); display('x')",  # 3: display() without an import, one bundle per call
        "list(range(40))",  # 4: IPython's pretty-printer breaks a long list, one item per line
        "{3, 1, 2}",  # 5: and sorts a set
        "import asyncio\nawait asyncio.sleep(0)\n7",  # 6: top-level await
        "!echo hi; echo there",  # 7: a shell command through a terminal, as the kernel runs it
        "_exit_code",  # 8
        "%time x = 1",  # 9
        "from IPython.display import HTML\nHTML('<b>x</b>')",  # 10: every MIME type of the value
        "In[1], get_ipython().execution_count",  # 11: the driver's health check was In[1]
        "import os; os.system('echo fd'); print('py'); os.write(2, b'e2')",  # 12: descriptor-level output, in order
        "[os.environ[k] for k in ('TERM', 'CLICOLOR', 'FORCE_COLOR', 'CLICOLOR_FORCE', 'PAGER', 'GIT_PAGER')]",  # 13
        "import warnings; warnings.warn('w')",  # 14: the cell's file is ipykernel's compiler's name for it
        "def f(:",  # 15
        "len?",  # 16: paged help goes to the frontend only
        "import sys; sys.stdout.buffer",  # 17: the kernel's stream has no buffer
        "sys.stdout.write('abc')",  # 18
        "__name__",  # 19
    ]
    answer = _run(cells)
    assert answer["status"] == "Success", answer
    # What a cell writes at the descriptor level the kernel also copies to its own streams, the driver's.
    assert answer["driver"]["stderr"] == KERNEL_WARNING + "e2"
    assert answer["driver"]["stdout"].endswith("}\nfd\n")
    got = answer["cells"]
    assert [len(cell["display"]) for cell in got[:3]] == [0, 0, 1]
    assert got[2]["display"] == [{"text/plain": "1"}]
    assert got[3]["display"] == [{"text/plain": "5"}, {"text/plain": "'x'"}]
    assert got[4]["display"] == [{"text/plain": "[" + ",\n ".join(str(n) for n in range(40)) + "]"}]
    assert got[5]["display"] == [{"text/plain": "{1, 2, 3}"}]
    assert got[6]["display"] == [{"text/plain": "7"}]
    assert got[7]["stdout"] == "hi\r\nthere\r\n"
    assert got[8]["display"] == [{"text/plain": "0"}]
    assert got[9]["stdout"].startswith("CPU times: ") and "Wall time: " in got[9]["stdout"]
    assert got[10]["display"] == [{"text/plain": "<IPython.core.display.HTML object>", "text/html": "<b>x</b>"}]
    assert got[11]["display"] == [{"text/plain": "('print(123)', 13)"}]
    assert (got[12]["stdout"], got[12]["stderr"]) == ("fd\npy\n", "e2")
    assert got[13]["display"] == [{"text/plain": "['xterm-color', '1', '1', '1', 'cat', 'cat']"}]
    warning = re.fullmatch(r"/tmp/ipykernel_(\d+)/(\d+)\.py:1: UserWarning: w\n  (.*)\n", got[14]["stderr"])
    assert warning is not None, got[14]
    assert warning[2] == str(murmur2(cells[14].encode(), CELL_HASH_SEED)) and warning[3] == cells[14]
    [syntax] = got[15]["error"]
    assert (syntax["ename"], syntax["evalue"]) == (
        "SyntaxError",
        f"invalid syntax ({murmur2(cells[15].encode(), CELL_HASH_SEED)}.py, line 1)",
    )
    assert "Cell \x1b[0;32mIn[17], line 1" in syntax["traceback"][0]
    assert got[16] == {"stdout": "", "stderr": "", "display": [], "error": []}
    assert [(e["ename"], e["evalue"]) for e in got[17]["error"]] == [
        ("AttributeError", "'OutStream' object has no attribute 'buffer'")
    ]
    assert (got[18]["stdout"], got[18]["display"]) == ("abc", [{"text/plain": "3"}])
    assert got[19]["display"] == [{"text/plain": "'__main__'"}]


def test_input_meets_the_drivers_closed_stdin() -> None:
    """The driver answers an input request from its own stdin, closed: ``input``'s prompt lands in the driver's
    stdout, ``getpass``'s (no terminal: its warning, its notice, the prompt) in its stderr; the kernel raises
    EOFError."""
    answer = _run(["name = input('name? ')", "import getpass; getpass.getpass('secret: ')", "print('after')"])
    assert answer["status"] == "Success", answer
    assert answer["driver"]["stdout"].endswith("}\nname? ")
    stderr = answer["driver"]["stderr"].removeprefix(KERNEL_WARNING)
    assert "GetPassWarning: Can not control echo on the terminal." in stderr
    assert stderr.endswith("Warning: Password input may be echoed.\nsecret: ")
    for cell in answer["cells"][:2]:
        [error] = cell["error"]
        assert (error["ename"], error["evalue"]) == ("EOFError", "")
        # The separator, the header, the cell's frame, the frame that raised (ipykernel's two frames in the real
        # kernel, the driver's one here), the exception.
        assert len(error["traceback"]) == 5, error
        assert "raise" in _plain(error["traceback"][3]) and "EOFError" in _plain(error["traceback"][3])
        assert (cell["stdout"], cell["stderr"]) == ("", "")
    assert answer["cells"][2]["stdout"] == "after\n"


def test_cells_run_inside_the_kernels_event_loop() -> None:
    """ipykernel runs each request in its running asyncio loop: ``asyncio.run`` in a cell fails, and a task a cell
    starts goes on between cells."""
    cells = [
        "import asyncio\nasyncio.get_event_loop().is_running()",
        "async def five():\n    return 5\nasyncio.run(five())",
        "async def tick():\n    ticks.append(1)\nticks = []\ntask = asyncio.ensure_future(tick())",
        "ticks",
        "await five()",
    ]
    got = _run(cells)["cells"]
    assert got[0]["display"] == [{"text/plain": "True"}]
    assert [(e["ename"], e["evalue"]) for e in got[1]["error"]] == [
        ("RuntimeError", "asyncio.run() cannot be called from a running event loop")
    ]
    assert got[3]["display"] == [{"text/plain": "[1]"}]
    assert got[4]["display"] == [{"text/plain": "5"}]


def test_the_kernels_argv_streams_and_namespace() -> None:
    cells = [
        "%who",  # exit and quit are the kernel's, not the user's
        "import sys; sys.argv[0].endswith('/ipykernel_launcher.py'), sys.argv[1], sys.argv[2].endswith('.json')",
        "import argparse; argparse.ArgumentParser().parse_args()",  # the notebook's well-known -f
        "import io; buffer = io.StringIO(); sys.stdout = buffer",  # the streams are the kernel's, set once
        "print('into the buffer')",
        "sys.stdout = sys.__stdout__; buffer.getvalue()",
        "h = display('a', display_id=True); h.update('b')",  # an update is not a new display
        "raise ValueError('\\udcff')",  # a lone surrogate, as the kernel's JSON carries it
    ]
    got = _run(cells)["cells"]
    assert got[0]["stdout"] == "Interactive namespace is empty.\n"
    assert got[1]["display"] == [{"text/plain": "(True, '-f', True)"}]
    assert [e["ename"] for e in got[2]["error"]] == ["SystemExit"]
    assert "error: unrecognized arguments: -f " in got[2]["stderr"]
    assert got[4]["stdout"] == ""
    assert "into the buffer" in got[5]["display"][0]["text/plain"]
    assert got[6]["display"] == [{"text/plain": "'a'"}]
    assert [(e["ename"], e["evalue"]) for e in got[7]["error"]] == [("ValueError", "\ufffd")]


def test_a_closed_stream_stays_closed() -> None:
    got = _run(["import sys; sys.stdout.close()", "print('x')"])["cells"]
    assert [(e["ename"], e["evalue"]) for e in got[1]["error"]] == [("ValueError", "I/O operation on closed file")]


def test_output_a_background_process_writes_later_goes_to_the_cell_then_running() -> None:
    cells = [
        "import os, subprocess\nos.mkfifo('go')\nlate = subprocess.Popen('read x < go; echo late', shell=True)",
        "with open('go', 'w') as go:\n    go.write('now\\n')\nlate.wait()",
    ]
    got = _run(cells)["cells"]
    assert (got[0]["stdout"], got[1]["stdout"]) == ("", "late\n")


def test_processes_a_cell_leaves_running_do_not_hold_the_answer() -> None:
    """The driver shuts the kernel down: its exit handlers end multiprocessing's daemonic children."""
    cells = [
        "import multiprocessing, time\n"
        "child = multiprocessing.Process(target=time.sleep, args=(60,), daemon=True)\nchild.start()",
        "import concurrent.futures\npool = concurrent.futures.ProcessPoolExecutor(2)\npool.submit(abs, -1).result()",
    ]
    answer = _run(cells, total_timeout=30)
    assert answer["status"] == "Success", answer
    assert answer["driver"]["execution_time"] < 30
    assert answer["cells"][1]["display"] == [{"text/plain": "1"}]


def test_matplotlib_figures_are_shown_inline() -> None:
    # matplotlib comes with the test install (the bench extra): no skip, a missing one fails here.
    cells = ["%matplotlib inline", "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"]
    got = _run(cells)["cells"]
    assert got[0]["error"] == []
    [figure] = got[1]["display"]
    assert base64.b64decode(figure["image/png"]).startswith(b"\x89PNG")


def test_a_cell_that_removes_the_work_dir_still_gets_its_answer() -> None:
    answer = _run(["import os, shutil; shutil.rmtree(os.getcwd())", "1 + 1"])
    assert answer["status"] == "Success", answer
    assert answer["cells"][1]["display"] == [{"text/plain": "2"}]


def test_a_subprocess_given_the_cells_stream_writes_to_the_drivers_stdout() -> None:
    """The kernel's ``sys.stdout.fileno()`` is its original stdout, which it inherits from the driver."""
    answer = _run(["import subprocess, sys\nsubprocess.run(['echo', 'direct'], stdout=sys.stdout); None"])
    assert answer["cells"][0]["stdout"] == ""
    assert answer["driver"]["stdout"].endswith("}\ndirect\n")


def test_exit_as_the_last_cell_is_answered() -> None:
    answer = _run(["x = 1", "exit()"])
    assert answer["status"] == "Success", answer
    assert answer["cells"][1] == {"stdout": "", "stderr": "", "display": [], "error": []}


def test_a_kernel_that_stopped_leaves_the_driver_waiting_for_its_timeout() -> None:
    """``exit()`` stops the kernel (ipykernel stops its loop) and a crash ends it: the driver waits for the next
    reply until its command's time (``total_timeout`` + 10 s) is up, and the answer has no cells."""

    async def both() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                asyncio.to_thread(_run, ["exit()", "print('never')"], total_timeout=0),
                asyncio.to_thread(_run, ["print('before')", "import os; os._exit(0)"], total_timeout=0),
            )
        )

    for answer in asyncio.run(both()):
        assert answer["status"] == "Failed", answer
        assert answer["driver"]["status"] == "TimeLimitExceeded"
        assert answer["driver"]["return_code"] is None
        assert answer["driver"]["execution_time"] >= 10
        assert answer["cells"] == []


def test_the_python_engine_runs_plain_python() -> None:
    answer = _run(["list(range(40))", "a = 1;", "1/0", "print('\\udcff')"], engine="python")
    assert answer["status"] == "Success", answer
    assert answer["driver"]["stderr"] == ""
    assert answer["cells"][0]["display"] == [{"text/plain": repr(list(range(40)))}]
    assert answer["cells"][1]["display"] == []
    [error] = answer["cells"][2]["error"]
    assert (error["ename"], error["evalue"]) == ("ZeroDivisionError", "division by zero")
    assert error["traceback"][0] == "Traceback (most recent call last):"
    assert list(error) == ["traceback", "ename", "evalue"]
    assert answer["cells"][3]["stdout"] == "\ufffd\n"  # a lone surrogate, replaced so the answer stays JSON


def test_without_ipython_auto_runs_plain_python_and_ipython_fails_as_the_driver_does(
    python_without_ipython: str,
) -> None:
    answer = _run(["list(range(40))"], engine="auto", python=python_without_ipython)
    assert answer["status"] == "Success", answer
    assert answer["cells"][0]["display"] == [{"text/plain": repr(list(range(40)))}]
    # Upstream's driver imports its kernel packages first: without them it ends before printing its config.
    answer = _run(["list(range(40))"], engine="ipython", python=python_without_ipython)
    assert answer["status"] == "Failed", answer
    driver = answer["driver"]
    assert (driver["status"], driver["return_code"], driver["stdout"]) == ("Finished", 1, "")
    assert driver["stderr"].rstrip().endswith("ModuleNotFoundError: No module named 'IPython'")
    assert answer["cells"] == []


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="jupyter_engine must be one of auto, ipython, python, got 'ruby'"):
        EmulatorConfig(jupyter_engine="ruby")


def test_the_cells_results_are_json_even_for_binary_bundles() -> None:
    """A value whose PNG representation is bytes is sent base64-encoded, as the kernel encodes images."""
    cell = "class P:\n    def _repr_png_(self):\n        return b'\\x89PNG'\nP()"
    answer = _run([cell])
    [bundle] = answer["cells"][0]["display"]
    assert bundle["image/png"] == "iVBORw=="
    assert json.loads(json.dumps(answer)) == answer
    assert _plain(bundle["text/plain"]).startswith("<")


def test_a_keyboard_interrupt_in_a_cell_is_the_cells() -> None:
    """The kernel sets Python's SIGINT handler around each request: the cell catches it, the next cell runs."""
    cells = [
        "import os, signal\n"
        "try:\n    os.kill(os.getpid(), signal.SIGINT)\nexcept KeyboardInterrupt:\n    print('caught')",
        "os.kill(os.getpid(), signal.SIGINT)",
        "print('next')",
    ]
    answer = _run(cells)
    assert answer["status"] == "Success", answer
    got = answer["cells"]
    assert got[0]["stdout"] == "caught\n"
    assert [e["ename"] for e in got[1]["error"]] == ["KeyboardInterrupt"]
    assert got[2]["stdout"] == "next\n"


def test_work_left_in_the_loops_executor_does_not_hold_the_answer() -> None:
    cells = ["import asyncio, time\nasyncio.get_running_loop().run_in_executor(None, time.sleep, 60)\nprint('started')"]
    answer = _run([*cells, "print('next')"], total_timeout=30)
    assert answer["status"] == "Success", answer
    assert [cell["stdout"] for cell in answer["cells"]] == ["started\n", "next\n"]
    # The kernel's exit waits for the executor's thread, and the shutdown's SIGTERM after 2.5 s ends it, not the
    # thread's minute.
    assert 2.5 <= answer["driver"]["execution_time"] < 20


def test_writing_to_dev_stdout_loses_nothing() -> None:
    """The kernel's descriptors are pipes: opening /dev/stdout (``> /dev/stdout``) truncates nothing."""
    cells = [
        "print('first cell')",
        "print('a' * 10)\nimport os; os.system('echo hi > /dev/stdout; echo err > /dev/stderr')\nprint('b')",
        "print('next')",
    ]
    answer = _run(cells)
    got = answer["cells"]
    assert [cell["stdout"] for cell in got] == ["first cell\n", "a" * 10 + "\nhi\nb\n", "next\n"]
    assert got[1]["stderr"] == "err\n"
    assert answer["driver"]["stdout"].endswith("}\nhi\n")  # descriptor-level output only, copied to the driver


def test_threads_printing_at_once_keep_their_lines_in_the_cell_only() -> None:
    cell = (
        "import threading\n"
        "def speak(name):\n"
        "    for n in range(2000):\n"
        "        print(f'{name}-{n}')\n"
        "threads = [threading.Thread(target=speak, args=(f't{i}',)) for i in range(4)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()"
    )
    answer = _run([cell])
    stdout = answer["cells"][0]["stdout"]
    # print() writes the text and the newline apart, so lines of threads interleave, but no write is lost or cut.
    assert sorted(re.findall(r"t\d-\d+", stdout)) == sorted(f"t{i}-{n}" for i in range(4) for n in range(2000))
    assert stdout.count("\n") == 8000
    assert answer["driver"]["stdout"].endswith("}\n")  # Python's output is not copied to the driver


def test_a_process_a_cell_forks_prints_into_the_cell() -> None:
    cell = "import os\npid = os.fork()\nif pid == 0:\n    print('child')\n    os._exit(0)\nos.waitpid(pid, 0); None"
    answer = _run([cell, "print('after')"])
    assert [cell["stdout"] for cell in answer["cells"]] == ["child\n", "after\n"]


def test_descriptor_output_the_driver_no_longer_reads_holds_up_only_the_watcher() -> None:
    """Past what the sandbox reads of the driver's stdout, the copy blocks; the cells still print and answer."""
    cells = [
        "import subprocess\nflood = subprocess.Popen('seq 1 300000', shell=True)",
        "import time\ntime.sleep(0.5)\nprint('next')",
    ]
    answer = _run(cells, total_timeout=15)
    assert answer["status"] == "Success", answer
    # Amid the numbers still coming in, as in the kernel (print writes "next" and its newline apart: numbers may
    # come in between).
    assert "next" in answer["cells"][1]["stdout"]


def test_a_signal_handler_may_print_while_the_code_prints() -> None:
    cell = (
        "import signal, time\n"
        "ticks = []\n"
        "def tick(number, frame):\n"
        "    ticks.append(1)\n"
        "    print('tick', end='')\n"
        "signal.signal(signal.SIGALRM, tick)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)\n"
        "end = time.monotonic() + 1\n"
        "n = 0\n"
        "while time.monotonic() < end:\n"
        "    print('.', end='')\n"
        "    n += 1\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "print('done', len(ticks) > 10)"
    )
    answer = _run([cell], total_timeout=15)
    assert answer["status"] == "Success", answer
    assert answer["cells"][0]["stdout"].endswith("done True\n")


def test_a_cell_that_closes_the_kernels_original_stream_breaks_nothing() -> None:
    cells = [
        "import os, sys\nwith os.fdopen(sys.stdout.fileno(), 'w') as original:\n    original.write('x\\n')",
        "os.write(1, b'y\\n'); print('z')",
        "os.system('seq 1 30000 > /dev/null; echo hi'); print('after')",
    ]
    answer = _run(cells, total_timeout=15)
    assert answer["status"] == "Success", answer
    assert [cell["stdout"] for cell in answer["cells"][1:]] == ["y\nz\n", "hi\nafter\n"]
    assert all(cell["error"] == [] for cell in answer["cells"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("engine", ["ipython", "python"])
def test_the_work_dir_is_laid_out_as_upstreams(engine: str) -> None:
    """The kernel's cwd holds the request's files, the driver as ``main.py`` and upstream's config dir; a user file
    the emulator once used for itself (``config.json``, ``cells.json``) is the user's, and only upstream's output
    file is kept out of the answer's files."""
    cells = [
        "import os; print(sorted(os.listdir('.')), sorted(os.listdir('tmp/sandbox/configs')))",
        "print(open('config.json').read(), open('cells.json').read())",
        "print('SANDBOX_EMULATOR_JUPYTER_ENGINE' in os.environ)",
    ]
    config_json, cells_json = b'{"mine": 1}', b"[2]"
    fetch = ["config.json", "cells.json", "tmp/sandbox/configs/input.json", "tmp/sandbox/configs/output.json"]
    files = {"config.json": _b64(config_json), "cells.json": _b64(cells_json)}
    answer = _run(cells, engine=engine, files=files, fetch_files=fetch, total_timeout=20)
    assert answer["status"] == "Success", answer
    stdout = [cell["stdout"] for cell in answer["cells"]]
    assert stdout == [
        "['cells.json', 'config.json', 'main.py', 'tmp'] ['input.json']\n",
        '{"mine": 1} [2]\n',
        "False\n",
    ]
    upstream_input = {"kernel": "python3", "cells": cells, "cell_timeout": 0.0, "total_timeout": 20.0}
    assert answer["files"] == {
        "config.json": _b64(config_json),
        "cells.json": _b64(cells_json),
        "tmp/sandbox/configs/input.json": _b64(json.dumps(upstream_input, indent=2).encode()),
    }


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("tmp/sandbox/configs/x", "[Errno 17] File exists: '{dir}/tmp/sandbox/configs'"),
        ("tmp/sandbox/configs", "[Errno 17] File exists: '{dir}/tmp/sandbox/configs'"),
        ("tmp/sandbox", "[Errno 20] Not a directory: '{dir}/tmp/sandbox/configs'"),
        ("tmp", "[Errno 20] Not a directory: '{dir}/tmp/sandbox'"),
    ],
)
def test_a_file_in_the_way_of_upstreams_config_dir_is_its_error(name: str, error: str) -> None:
    """Upstream makes its config dir after writing the request's files, without ``exist_ok``."""
    answer = _run(["print(1)"], engine="python", files={name: _b64(b"x")})
    assert (answer["status"], answer["driver"], answer["cells"]) == ("SandboxError", None, []), answer
    match = re.fullmatch(r"exception on running jupyter print\(1\): (.*) None", answer["message"])
    assert match is not None, answer["message"]
    work_dir = re.search(r"'(/\S*/tmp\w{8})/", match.group(1))
    assert work_dir is not None, match.group(1)
    assert match.group(1) == error.format(dir=work_dir.group(1))


def test_a_file_beside_upstreams_config_dir_is_written() -> None:
    answer = _run(["print(open('tmp/sandbox/y').read())"], engine="python", files={"tmp/sandbox/y": _b64(b"y")})
    assert answer["cells"][0]["stdout"] == "y\n", answer
