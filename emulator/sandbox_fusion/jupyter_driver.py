"""Driver for /run_jupyter: runs the request's cells in order in one kernel and reports each cell's output.

Runs under the runtime interpreter as a standalone script (it imports nothing from the emulator), as ``main.py`` in
the work dir, which is the kernel's cwd, laid out as upstream's: the request config in
``tmp/sandbox/configs/input.json`` (upstream's contents), the results in ``tmp/sandbox/configs/output.json``. It
prints ``config:`` and the config as the real driver does, and writes per cell stdout, stderr, ``display`` (the MIME
bundles of ``display()`` and of a trailing expression's value) and ``error`` (``traceback``, ``ename``, ``evalue``).
The engine comes in an environment variable that it removes before any cell runs; IPython's own dir is
``tmp/sandbox/.ipython`` (the work dir is ``$HOME``, and ``~/.ipython`` would be one more entry beside the user's
files).

The real driver starts an IPython kernel (ipykernel) and sends it each cell. Here, with the ``ipython`` engine, the
cells run in IPython's own shell in a process the driver forks (the kernel), set up the way ipykernel sets up its
shell and runs a request: in a running asyncio loop, with the cell file names of its compiler, its ``sys.argv`` and
environment variables, ``!cmd`` through a terminal, the traceback of an error as the kernel sends it (IPython's
structured, ANSI-coloured lines), output captured at the file-descriptor level, ``input()`` answered with the end of
input; a kernel that stops (``exit()``, or a crash) leaves the cells after it unanswered, so the driver waits until
its time is up. The ``python`` engine, for runtimes without IPython, runs cells as plain Python and shows the
last expression's ``repr``.
"""

from __future__ import annotations

import ast
import asyncio
import atexit
import base64
import contextlib
import datetime
import io
import json
import math
import numbers
import os
import select
import signal
import struct
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
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
#: Upstream's config and output files, relative to the driver (the emulator's ``jupyter.py`` names the same).
INPUT_FILE = "tmp/sandbox/configs/input.json"
OUTPUT_FILE = "tmp/sandbox/configs/output.json"
#: IPython's dir (profiles), beside upstream's configs rather than in ``$HOME``, the work dir itself.
IPYTHON_DIR = "tmp/sandbox/.ipython"
#: The environment variable the engine comes in (removed before any cell runs).
ENGINE_VARIABLE = "SANDBOX_EMULATOR_JUPYTER_ENGINE"


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
        write_results(results, results_path)


# --------------------------------------------------------------------------- JSON as the kernel's messages carry it


def scrub_text(text: str) -> str:
    """A string as it comes out of a kernel message: lone surrogates (which JSON's UTF-8 cannot hold) replaced."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")  # jupyter_client's packing...
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8", "replace")  # ...and its unpacking


def _json_ready(value: Any) -> Any:
    """A value in the form JSON takes it as the kernel sends it: containers as lists, bytes base64, NaN as text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return repr(value) if math.isnan(value) or math.isinf(value) else float(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {scrub_text(str(key)): _json_ready(item) for key, item in value.items()}
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, Iterable):
        return [_json_ready(item) for item in value]
    return scrub_text(repr(value))


def write_results(results: list[dict[str, Any]], results_path: str) -> None:
    """The cells' results, as the driver writes its output file (its directory made again if a cell removed it)."""
    os.makedirs(os.path.dirname(results_path), exist_ok=True)
    with open(results_path, "w") as f:
        json.dump({"status": "Finished", "cells": _json_ready(results)}, f)


# --------------------------------------------------------------------------- IPython, as ipykernel drives it


class OutStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the kernel, named and behaving as ipykernel's (str only, no ``buffer``,
    ``fileno()`` a copy of the process's original stream: the driver's). Text goes to the running cell's output; in
    a process a cell forked, to the stream's descriptor, where the kernel's watcher reads it."""

    encoding = "UTF-8"

    def __init__(self, streams: KernelStreams, fd: int, name: str) -> None:
        super().__init__()
        self._streams = streams
        self._fd = fd
        self.name = name

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._streams.originals[self._fd]

    def flush(self) -> None:
        """Nothing is held back to flush; and, as the kernel's, no error once closed."""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text)}")
        if self.closed:
            raise ValueError("I/O operation on closed file")
        try:
            data = text.encode("utf-8", "surrogateescape")  # as the kernel's JSON packs it
        except UnicodeEncodeError:
            data = text.encode("utf-8", "replace")
        self._streams.write(self._fd, data)
        return len(text)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


class KernelStreams:
    """The kernel's output streams for its whole life: descriptors 1 and 2 are pipes that a watcher thread reads.

    As ipykernel's: what a subprocess or a C library writes to the descriptors joins the running cell's output, and
    the watcher copies it to the process's original streams (the driver's), outside the lock, so a copy that blocks
    (the driver's stdout no longer read) holds up only the watcher; what Python writes through ``sys.stdout`` joins
    the cell's output only. A Python write first takes in what the descriptor holds, so the two keep the order they
    were written in; a cell's end takes in what is left. The lock is reentrant: a signal handler may print while
    the code it interrupted is printing.
    """

    def __init__(self) -> None:
        import threading

        self.originals = {fd: os.dup(fd) for fd in (1, 2)}
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._copying = threading.Lock()  # one copier at a time, in the order the chunks came
        self._output = {1: bytearray(), 2: bytearray()}
        self._to_copy: list[tuple[int, bytes]] = []
        self._pipes: dict[int, int] = {}
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.dup2(write_end, fd)
            os.close(write_end)
            self._pipes[fd] = read_end
        self._wake_r, self._wake_w = os.pipe()  # a Python write took in descriptor output: the watcher copies it
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        os.register_at_fork(before=self._lock.acquire, after_in_parent=self._lock.release, after_in_child=self._forked)
        threading.Thread(target=self._watch, name="output-watcher", daemon=True).start()
        sys.stdout = OutStream(self, 1, "stdout")
        sys.stderr = OutStream(self, 2, "stderr")

    def _forked(self) -> None:
        """In a process a cell forked: no watcher here, its Python output goes to the descriptors (the kernel's)."""
        import threading

        self._lock = threading.RLock()

    def _take_in(self, fd: int) -> bool:
        """What the descriptor's pipe holds, into the cell's output and the copies to make (under the lock); whether
        there was any."""
        read_end = self._pipes.get(fd)
        taken = False
        while read_end is not None:
            try:
                chunk = os.read(read_end, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:  # every writer closed it (a cell closed the descriptor): nothing more will come
                os.close(read_end)
                del self._pipes[fd]
                break
            self._output[fd] += chunk
            self._to_copy.append((fd, chunk))
            taken = True
        return taken

    def copy_out(self, wait: float = -1) -> None:
        """Writes the chunks taken in to the driver's streams (not under the lock: a write may block); ``wait``: how
        long to wait for another copier (-1: as long as it takes)."""
        if not self._copying.acquire(timeout=wait):
            return
        try:
            while True:
                with self._lock:
                    if not self._to_copy:
                        return
                    fd, chunk = self._to_copy.pop(0)
                with contextlib.suppress(OSError):  # the stream a cell closed (its fileno()): as the kernel's watcher
                    _write_all(self.originals[fd], chunk)
        finally:
            self._copying.release()

    def _watch(self) -> None:
        while self._pipes:
            with contextlib.suppress(OSError, ValueError):  # a pipe closed meanwhile (its writers gone): look again
                select.select([*self._pipes.values(), self._wake_r], [], [])
            with self._lock:
                for fd in (1, 2):
                    self._take_in(fd)
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 512):
                    pass
            self.copy_out()

    def _taken_in(self, fd: int) -> None:
        """Takes in (under the lock) and, when there was output, has the watcher copy it."""
        if self._take_in(fd):
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"!")

    def write(self, fd: int, data: bytes) -> None:
        if os.getpid() != self._pid:
            _write_all(fd, data)
            return
        with self._lock:
            self._taken_in(fd)
            self._output[fd] += data

    def begin(self) -> None:
        """A cell starts: what came between two cells goes to the driver's streams only."""
        with self._lock:
            for fd in (1, 2):
                self._taken_in(fd)
                self._output[fd] = bytearray()

    def end(self) -> tuple[str, str]:
        """The cell's stdout and stderr."""
        with self._lock:
            texts = []
            for fd in (1, 2):
                self._taken_in(fd)
                texts.append(self._output[fd].decode("utf-8", "replace"))
                self._output[fd] = bytearray()
        return texts[0], texts[1]


def load_ipython() -> dict[str, ModuleType]:
    """The IPython modules the kernel shell is made of (ImportError without IPython)."""
    import IPython.core.autocall
    import IPython.core.compilerop
    import IPython.core.displayhook
    import IPython.core.displaypub
    import IPython.core.error
    import IPython.core.interactiveshell
    import traitlets
    import traitlets.config

    return {
        "autocall": IPython.core.autocall,
        "compilerop": IPython.core.compilerop,
        "displayhook": IPython.core.displayhook,
        "displaypub": IPython.core.displaypub,
        "error": IPython.core.error,
        "interactiveshell": IPython.core.interactiveshell,
        "traitlets": traitlets,
        "config": traitlets.config,
    }


def _make_shell(mods: dict[str, ModuleType], cell: dict[str, Any]) -> Any:
    """IPython's shell with the parts ipykernel replaces replaced; outputs go to ``cell["display"|"error"]``."""
    base_shell = mods["interactiveshell"].InteractiveShell
    exit_autocall = mods["autocall"].ZMQExitAutocall

    class KernelCompiler(mods["compilerop"].CachingCompiler):  # type: ignore[misc]
        def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
            return cell_file_name(raw_code)

    class KernelDisplayHook(mods["displayhook"].DisplayHook):  # type: ignore[misc]
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: dict[str, Any], md_dict: Any = None) -> None:
            cell["display"].append(format_dict)

        def finish_displayhook(self) -> None:
            sys.stdout.flush()
            sys.stderr.flush()

    class KernelDisplayPublisher(mods["displaypub"].DisplayPublisher):  # type: ignore[misc]
        def publish(self, data: dict[str, Any], metadata: Any = None, *args: Any, **kwargs: Any) -> None:
            if not kwargs.get("update"):  # an update_display_data message, which the driver does not collect
                cell["display"].append(data)

        def clear_output(self, wait: bool = False) -> None:
            pass

    class KernelShell(base_shell):  # type: ignore[valid-type,misc]
        keepkernel_on_exit = None
        system = base_shell.system_piped

        @mods["traitlets"].default("exiter")  # type: ignore[untyped-decorator]
        def _default_exiter(self) -> Any:
            return exit_autocall(self)

        def init_environment(self) -> None:
            os.environ.update(KERNEL_ENV)

        def init_virtualenv(self) -> None:
            pass

        def enable_gui(self, gui: str | None = None) -> None:
            if gui not in (None, "inline"):  # the kernel's event loops for GUI toolkits are not here
                super().enable_gui(gui)

        def ask_exit(self) -> None:
            self.exit_now = not self.keepkernel_on_exit

        def _showtraceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            cell["error"].append({"traceback": stb, "ename": str(etype.__name__), "evalue": str(evalue)})

    config = mods["config"].Config()
    config.HistoryManager.enabled = False
    shell = KernelShell.instance(
        ipython_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), IPYTHON_DIR),
        config=config,
        compiler_class=KernelCompiler,
        displayhook_class=KernelDisplayHook,
        display_pub_class=KernelDisplayPublisher,
    )
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


class _Driver:
    """What the kernel's process keeps of the driver: its streams (in ``streams.originals``, where an input
    request's prompt is shown) and the runtime's own getpass."""

    streams: KernelStreams | None = None
    getpass: Callable[..., str] | None = None

    @classmethod
    def stream(cls, fd: int) -> int:
        """The driver's stream ``fd`` (1 or 2) as the kernel holds it: the copy made before the pipes took its place."""
        return cls.streams.originals[fd] if cls.streams is not None else fd


def _no_stdin(prompt: object = "", *args: Any, **kwargs: Any) -> str:
    """``input()`` in the kernel: the driver answers from its own stdin, which is closed (``EOFError``).

    The driver's ``input(prompt)`` shows the prompt on its stdout. The real kernel raises the EOFError in two frames
    of ipykernel's; here the traceback's last frame is this one.
    """
    os.write(_Driver.stream(1), str(prompt).encode("utf-8", "replace"))
    raise EOFError


def _no_stdin_password(prompt: str = "Password: ", stream: object = None) -> str:
    """``getpass()`` in the kernel: the driver's getpass, without a terminal, warns and prompts on its stderr."""
    assert _Driver.getpass is not None
    with os.fdopen(os.dup(_Driver.stream(2)), "w") as err, open(os.devnull) as closed:
        saved = sys.stdin, sys.stderr
        sys.stdin, sys.stderr = closed, err
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("default")
                _Driver.getpass(prompt)
        except EOFError:
            pass
        finally:
            sys.stdin, sys.stderr = saved
    raise EOFError


async def _execute(shell: Any, code: str) -> None:
    """One execute request, as ipykernel's ``do_execute`` runs it: inside the kernel's running event loop."""
    preprocessing_exc_tuple = None
    try:
        transformed = shell.transform_cell(code)
    except Exception:
        transformed = code
        preprocessing_exc_tuple = sys.exc_info()
    if shell.should_run_async(code, transformed_cell=transformed, preprocessing_exc_tuple=preprocessing_exc_tuple):
        running = asyncio.ensure_future(
            shell.run_cell_async(
                code, store_history=True, transformed_cell=transformed, preprocessing_exc_tuple=preprocessing_exc_tuple
            )
        )
        result = None
        try:
            result = await running
        finally:
            shell.events.trigger("post_execute")
            shell.events.trigger("post_run_cell", result)
    else:
        shell.run_cell(code, store_history=True)


def run_kernel(mods: dict[str, ModuleType], cells: list[str], results_path: str, finished: Callable[[], None]) -> None:
    """Runs the cells in the kernel shell, then writes the results and calls ``finished``; a kernel that stopped
    with cells left (they are never answered) returns without either."""
    import builtins
    import getpass
    import sysconfig
    import uuid

    os.environ["JPY_PARENT_PID"] = str(os.getppid())
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    runtime = os.path.join(os.path.expanduser("~"), ".local", "share", "jupyter", "runtime")
    sys.argv[:] = [
        os.path.join(sysconfig.get_paths()["purelib"], "ipykernel_launcher.py"),
        "-f",
        os.path.join(runtime, f"kernel-{uuid.uuid4()}.json"),
    ]
    cell: dict[str, Any] = {"stdout": "", "stderr": "", "display": [], "error": []}
    streams = _Driver.streams = KernelStreams()
    shell = _make_shell(mods, cell)
    builtins.input = _no_stdin
    _Driver.getpass = getpass.getpass
    getpass.getpass = _no_stdin_password
    results: list[dict[str, Any]] = []

    async def serve() -> None:
        for index, source in enumerate([HEALTH_CHECK, *cells]):
            cell.update(stdout="", stderr="", display=[], error=[])
            streams.begin()
            saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # as the kernel around each request
            try:
                await _execute(shell, source)
            finally:
                signal.signal(signal.SIGINT, saved)
                cell["stdout"], cell["stderr"] = streams.end()
            if index:
                results.append(dict(cell))
            if shell.exit_now and index < len(cells):
                return  # the kernel stops: the cells left are never answered
            await asyncio.sleep(0)  # the loop runs between two requests: tasks a cell started go on
        # The driver has every reply: it writes them before it shuts the kernel down (tasks and threads left
        # running are the shutdown's).
        write_results(results, results_path)
        finished()

    # The kernel's loop, not asyncio.run's: no SIGINT handler of asyncio's (a KeyboardInterrupt in a cell is the
    # cell's), and no wait for leftover tasks and executor threads before the results are out.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(serve())


#: The kernel's word to the driver, on a pipe: its cells all ran (the results are written), or it failed itself.
_DONE, _BROKEN = b"D", b"B"
#: How long the driver's shutdown of the kernel waits for it to end (jupyter_client's shutdown_wait_time).
_SHUTDOWN_WAIT_S = 5.0


def _kernel_process(mods: dict[str, ModuleType], cells: list[str], results_path: str) -> None:
    """Runs the kernel in a child and waits for its word; a kernel that stopped early leaves the driver waiting."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        said: list[bytes] = []

        def say(word: bytes) -> None:
            if not said:
                said.append(word)
                os.write(write_end, word)
                os.close(write_end)

        try:
            run_kernel(mods, cells, results_path, lambda: say(_DONE))
        except BaseException:
            with contextlib.suppress(OSError):
                _write_all(_Driver.stream(2), traceback.format_exc().encode("utf-8", "replace"))
            say(_BROKEN)
        say(b"")  # stopped early: the pipe closes without a word
        # The driver shuts the kernel down, which ends as an interpreter ends: it waits for its threads (an executor's
        # workers too), then runs its exit handlers (multiprocessing ends its daemonic children); the shutdown's
        # SIGTERM cuts that short.
        if _Driver.streams is not None:
            # The watcher's copies still to make reach the driver before the kernel ends, unless a copy blocks (the
            # driver's stdout no longer read): the kernel's watcher does not hold its exit.
            _Driver.streams.copy_out(wait=0.5)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            import threading

            shutdown = getattr(threading, "_shutdown", None)
            if shutdown is not None:
                shutdown()
            atexit._run_exitfuncs()
        finally:
            os._exit(0)
    os.close(write_end)
    word = os.read(read_end, 1)  # a process the kernel forked may hold the pipe open: one byte, not the end
    if word == _BROKEN:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sys.exit(1)
    if word != _DONE:
        # The real driver waits for the reply of a kernel that is gone until the sandbox's timeout ends it.
        while True:
            signal.pause()
    _shut_down(pid)


def _shut_down(pid: int) -> None:
    """jupyter_client's shutdown of the kernel: half its wait for the kernel to end, SIGTERM, the other half, SIGKILL.
    (It signals the kernel's process group, the kernel being a session leader; here only the kernel, whose group is
    the sandbox's.)"""
    for ending in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + _SHUTDOWN_WAIT_S / 2
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return
            time.sleep(0.01)
        os.kill(pid, ending)
    os.waitpid(pid, 0)


def main() -> None:
    engine = os.environ.pop(ENGINE_VARIABLE, "auto")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, INPUT_FILE)) as f:
        config = json.load(f)
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
    results_path = os.path.join(here, OUTPUT_FILE)
    if mods is None:
        run_plain(config["cells"], results_path)
    else:
        sys.stderr.write(KERNEL_WARNING)
        sys.stderr.flush()
        _kernel_process(mods, config["cells"], results_path)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
