"""Driver for /run_jupyter: runs the request's cells in order in one kernel and reports each cell's output.

Runs under the runtime interpreter as a standalone script (it imports nothing from the emulator). Reads the
request config from ``config.json`` next to it, prints ``config:`` and the config as the real driver does, and writes
the per-cell results to ``cells.json``: per cell stdout, stderr, ``display`` (the MIME bundles of ``display()`` and
of a trailing expression's value) and ``error`` (``traceback``, ``ename``, ``evalue``).

The real driver starts an IPython kernel (ipykernel) and sends it each cell. Here, with the ``ipython`` engine, the
cells run in IPython's own shell, set up the way ipykernel sets up its shell: the cell file names of its compiler,
its environment variables, ``!cmd`` through a pipe, the traceback of an error as the kernel sends it (IPython's
structured, ANSI-coloured lines), output captured at the file-descriptor level, ``input()`` answered with the end of
input, and a kernel that stops (``exit()``, or a crash) leaves the cells after it unanswered, so the driver waits
until its time is up. The ``python`` engine, for runtimes without IPython, runs cells as plain Python and shows the
last expression's ``repr``.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import signal
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: What the real driver's kernel writes to its stderr on start (recorded).
KERNEL_WARNING = (
    "[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication (including code and"
    " outputs) is sent in plain text and is susceptible to eavesdropping. Use IPC transport or launch with kernel"
    " manager-provisioned CurveZMQ keys to enable transport encryption.\n"
)
#: ipykernel's shell sets these in the kernel's environment (colour on, pagers off).
KERNEL_ENV = {
    "TERM": "xterm-color",
    "CLICOLOR": "1",
    "FORCE_COLOR": "1",
    "CLICOLOR_FORCE": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
}
#: The seed of the MurmurHash2 that ipykernel's compiler names cells with.
CELL_HASH_SEED = 0xC70F6907
#: The real driver checks its kernel with this cell first, so the request's cells are In[2], In[3], ...
HEALTH_CHECK = "print(123)"


def murmur2(data: bytes, seed: int) -> int:
    """MurmurHash2 (32-bit, little-endian blocks) of ``data``."""
    mult, mask = 0x5BD1E995, 0xFFFFFFFF
    value = (seed ^ len(data)) & mask
    whole = len(data) - len(data) % 4
    for (block,) in struct.iter_unpack("<I", data[:whole]):
        block = (block * mult) & mask
        block ^= block >> 24
        block = (block * mult) & mask
        value = ((value * mult) & mask) ^ block
    if whole < len(data):
        value ^= int.from_bytes(data[whole:], "little")
        value = (value * mult) & mask
    value ^= value >> 13
    value = (value * mult) & mask
    return value ^ (value >> 15)


def cell_file_name(raw_code: str) -> str:
    """The file name ipykernel's compiler gives a cell (the cell's traceback frames and SyntaxErrors show it)."""
    named = os.environ.get("IPYKERNEL_CELL_NAME")
    if named is not None:
        return named
    return f"/tmp/ipykernel_{os.getpid()}/{murmur2(raw_code.encode('utf-8'), CELL_HASH_SEED)}.py"


# --------------------------------------------------------------------------- plain Python


def _run_plain_cell(source: str, namespace: dict[str, Any], counter: int) -> dict[str, Any]:
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
        error.append({"traceback": [ln.rstrip("\n") for ln in lines], "ename": type(exc).__name__, "evalue": str(exc)})
    finally:
        sys.stdout, sys.stderr = saved
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "display": display, "error": error}


def run_plain(cells: list[str], results_path: str) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    results: list[dict[str, Any]] = []
    for index, cell in enumerate(cells):
        results.append(_run_plain_cell(cell, namespace, index + 2))
        with open(results_path, "w") as f:
            json.dump(results, f)


# --------------------------------------------------------------------------- IPython, as ipykernel drives it


class OutStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of a cell, named and behaving as ipykernel's (no ``buffer``, str only).

    The kernel's streams also forward what the process writes to descriptors 1 and 2 (a subprocess, a C library),
    so text written here goes straight to the descriptor, which points at one file per stream during a cell: both
    kinds of output keep the order they were written in. ``fileno()`` is, as in the kernel, a copy of the process's
    original stream: the driver's.
    """

    encoding = "UTF-8"

    def __init__(self, fd: int, original: int, name: str) -> None:
        super().__init__()
        self._fd = fd
        self._original = original
        self.name = name

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._original

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text)}")
        data = text.encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(self._fd, data) :]
        return len(text)


class CellCapture:
    """Points descriptors 1 and 2 at fresh unnamed files for one cell and reads them back after it."""

    def __init__(self) -> None:
        self._originals = {fd: os.dup(fd) for fd in (1, 2)}
        self._files: dict[int, int] = {}
        self._streams = (sys.stdout, sys.stderr)

    def start(self) -> None:
        self._streams = (sys.stdout, sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            handle, path = tempfile.mkstemp()
            os.unlink(path)
            self._files[fd] = handle
            os.dup2(handle, fd)
        sys.stdout = OutStream(1, self._originals[1], "stdout")
        sys.stderr = OutStream(2, self._originals[2], "stderr")

    def stop(self) -> tuple[str, str]:
        """The cell's stdout and stderr."""
        sys.stdout, sys.stderr = self._streams
        texts = []
        for fd, original in self._originals.items():
            os.dup2(original, fd)
            handle = self._files.pop(fd)
            os.lseek(handle, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(handle, 1 << 16):
                chunks.append(chunk)
            os.close(handle)
            texts.append(b"".join(chunks).decode("utf-8", "replace"))
        return texts[0], texts[1]


def _clean(bundle: dict[str, Any]) -> dict[str, Any]:
    """A MIME bundle as the kernel sends it: binary data (images) base64-encoded."""
    return {mime: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v for mime, v in bundle.items()}


def load_ipython() -> dict[str, ModuleType]:
    """The IPython modules the kernel shell is made of (ImportError without IPython)."""
    import IPython.core.autocall
    import IPython.core.compilerop
    import IPython.core.displayhook
    import IPython.core.displaypub
    import IPython.core.error
    import IPython.core.interactiveshell
    import traitlets.config

    return {
        "autocall": IPython.core.autocall,
        "compilerop": IPython.core.compilerop,
        "displayhook": IPython.core.displayhook,
        "displaypub": IPython.core.displaypub,
        "error": IPython.core.error,
        "interactiveshell": IPython.core.interactiveshell,
        "config": traitlets.config,
    }


def _make_shell(mods: dict[str, ModuleType], cell: dict[str, Any]) -> Any:
    """IPython's shell with the parts ipykernel replaces replaced; outputs go to ``cell["display"|"error"]``."""
    base_shell = mods["interactiveshell"].InteractiveShell

    class KernelCompiler(mods["compilerop"].CachingCompiler):  # type: ignore[misc]
        def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
            return cell_file_name(raw_code)

    class KernelDisplayHook(mods["displayhook"].DisplayHook):  # type: ignore[misc]
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: dict[str, Any], md_dict: Any = None) -> None:
            cell["display"].append(_clean(format_dict))

        def finish_displayhook(self) -> None:
            sys.stdout.flush()
            sys.stderr.flush()

    class KernelDisplayPublisher(mods["displaypub"].DisplayPublisher):  # type: ignore[misc]
        def publish(self, data: dict[str, Any], metadata: Any = None, *args: Any, **kwargs: Any) -> None:
            cell["display"].append(_clean(data))

        def clear_output(self, wait: bool = False) -> None:
            pass

    class KernelShell(base_shell):  # type: ignore[valid-type,misc]
        keepkernel_on_exit = None
        system = base_shell.system_piped

        def init_environment(self) -> None:
            os.environ.update(KERNEL_ENV)

        def init_virtualenv(self) -> None:
            pass

        def ask_exit(self) -> None:
            self.exit_now = not self.keepkernel_on_exit

        def _showtraceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            cell["error"].append({"traceback": stb, "ename": str(etype.__name__), "evalue": str(evalue)})

    config = mods["config"].Config()
    config.HistoryManager.enabled = False
    shell = KernelShell.instance(
        config=config,
        compiler_class=KernelCompiler,
        displayhook_class=KernelDisplayHook,
        display_pub_class=KernelDisplayPublisher,
    )
    shell.exiter = mods["autocall"].ZMQExitAutocall(shell)
    shell.user_ns["exit"] = shell.user_ns["quit"] = shell.exiter
    # The kernel sends what IPython would page (``obj?``, ``%less``) and ``%edit``'s file to the frontend in the
    # execute reply, which the driver does not read: nothing of it reaches a cell's output (and no pager or editor
    # is started here).
    shell.set_hook("show_in_pager", _nothing, 99)
    shell.register_magic_function(_nothing, "line_cell", "edit")
    shell.register_magic_function(_nothing, "line_cell", "ed")

    def less(line: str) -> None:
        if not line:
            raise mods["error"].UsageError("Missing filename.")
        with open(line) as paged:
            paged.read()

    shell.register_magic_function(less, "line", "less")
    shell.register_magic_function(less, "line", "more")
    return shell


def _nothing(*args: Any, **kwargs: Any) -> None:
    """What reaches a cell's output of something the kernel sends to the frontend only."""


#: The driver's own stdout, in the kernel's process (where the driver would print an input request's prompt).
_driver_stdout: int | None = None


def _no_stdin(prompt: object = "", *args: Any, **kwargs: Any) -> str:
    """``input()``/``getpass()`` in the kernel: the driver answers from its own stdin, which is closed.

    The real kernel raises the EOFError in two frames of ipykernel's; here the traceback's last frame is this one.
    """
    if _driver_stdout is not None:
        os.write(_driver_stdout, str(prompt).encode("utf-8", "replace"))
    raise EOFError


def run_kernel(mods: dict[str, ModuleType], cells: list[str], results_path: str) -> bool:
    """Runs the cells in the kernel shell; False when the kernel stopped with cells left (they never answer)."""
    import builtins
    import getpass

    cell: dict[str, Any] = {"stdout": "", "stderr": "", "display": [], "error": []}
    shell = _make_shell(mods, cell)
    builtins.input = _no_stdin
    getpass.getpass = _no_stdin
    results: list[dict[str, Any]] = []
    capture = CellCapture()
    for index, source in enumerate([HEALTH_CHECK, *cells]):
        cell.update(stdout="", stderr="", display=[], error=[])
        capture.start()
        try:
            shell.run_cell(source, store_history=True)
        finally:
            cell["stdout"], cell["stderr"] = capture.stop()
        if index:
            results.append(dict(cell))
        if shell.exit_now and index < len(cells):
            return False
    with open(results_path, "w") as f:
        json.dump(results, f, default=str)
    return True


def _kernel_process(mods: dict[str, ModuleType], cells: list[str], results_path: str) -> None:
    """Runs the kernel in a child and waits for it; a kernel that stopped early leaves the driver waiting."""
    read_end, write_end = os.pipe()
    driver_stdout = os.dup(1)
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        global _driver_stdout
        _driver_stdout = driver_stdout
        status = 1
        try:
            if run_kernel(mods, cells, results_path):
                os.write(write_end, b"done")
                status = 0
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    os.close(write_end)
    os.close(driver_stdout)
    answer = b""
    while chunk := os.read(read_end, 64):
        answer += chunk
    os.waitpid(pid, 0)
    if answer != b"done":
        # The real driver waits for the reply of a kernel that is gone until the sandbox's timeout ends it.
        while True:
            signal.pause()


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "config.json")) as f:
        config = json.load(f)
    engine = config.pop("engine", "auto")
    load: Callable[[], dict[str, ModuleType]] = load_ipython
    mods = None
    if engine == "ipython":
        mods = load()  # as upstream's driver without its kernel packages: an ImportError, before anything is printed
    elif engine == "auto":
        try:
            mods = load()
        except ImportError:
            mods = None
    # As upstream's pydantic model_dump_json(indent=2): non-ASCII text as it is. Like upstream's driver, no limit per
    # cell (its cell_timeout is read and never used): the command's own timeout bounds the whole run.
    print("config: \n" + json.dumps(config, indent=2, ensure_ascii=False))
    sys.stdout.flush()
    results_path = os.path.join(here, "cells.json")
    if mods is None:
        run_plain(config["cells"], results_path)
    else:
        sys.stderr.write(KERNEL_WARNING)
        sys.stderr.flush()
        _kernel_process(mods, config["cells"], results_path)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
