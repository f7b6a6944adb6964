"""Runs inside an interpreter context's process: a persistent namespace fed code over a pipe.

argv: ``<limits JSON> <uid> <gid>`` (uid ``-`` = no change). Started as the emulator's user, isolated (``-I``),
with no environment, in ``/``, it lowers its rlimits and drops to the sandbox uid (no supplementary groups); then it
reads its first line, ``{"env", "cwd"}``, and takes that environment and directory, before reading any code. With
``--exec PROGRAM ARG...`` after them it becomes that program once dropped, as a Daytona session's shell starts.
Each command is a JSON line ``{"code", "envs", "nonce"}`` (and ``"start_at"``: a ``time.monotonic()`` before which
the code must not start). The answer comes as JSON lines on the original stdout: output chunks
``{"type": "stdout"|"stderr", "text"}``, then ``{"end": nonce, "error": null | {name, value, traceback}}`` (plus
``"cancelled": true`` when a ``{"cancel": nonce}`` line came during the wait for ``start_at``: the code did not run;
or ``"interrupted": true`` when the code ended in ``KeyboardInterrupt``, its own or a SIGINT's, which the daemon's
worker reports as a control message, not an error).

The code's streams are the daemon's worker's: ``sys.stdout`` and ``sys.stderr`` are Python-level writers that send a
chunk at each newline or 1,024 characters (no ``fileno``, no ``buffer``); what reaches fds 1 and 2 (a subprocess's
output, ``sys.__stdout__``) is lost, as the daemon drops the worker's lines that are no chunk; fd 0 is a pipe where
nothing comes (the worker's stdin is its command pipe), so ``input()`` waits, until the timeout interrupts it. A
chunk whose JSON line reaches the daemon's 1 MiB line limit stops the daemon's reader for good: the driver then says
``{"overflow": true}`` and the server hears nothing more from this process.

SIGINT (the server's, at a timeout) interrupts the code as the daemon's worker's handler does, with
``KeyboardInterrupt("Execution interrupted")``; outside the code it is ignored, so that it never breaks a reply.
Stdlib only: this file runs under the sandbox's runtime interpreter, as the sandbox uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import io
import json
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback


class _Running:
    """Whether the context's code is running (a SIGINT interrupts it then, and only then), whether a SIGINT came while
    a chunk was being written (it interrupts the code once the line is whole), where chunks go, and whether the
    daemon's reader still reads them."""

    code = False
    interrupted = False
    out = -1
    deaf = False
    main_thread = threading.get_ident()
    writing = threading.RLock()  # one line at a time, from whichever thread of the code
    depth = 0  # lines of the main thread being written: a signal handler's print meanwhile waits in ``queued``
    queued: list[tuple[bytes, dict[str, object]]] = []


def _on_sigint(_signum: int, _frame: object) -> None:
    if _Running.code:
        raise KeyboardInterrupt("Execution interrupted")
    _Running.interrupted = True


#: The daemon reads the worker's lines with a 1 MiB buffer (``bufio.Scanner``): a longer line ends its reading.
_LINE_LIMIT = 1024 * 1024


def _send(message: dict[str, object]) -> None:
    """Write one JSON line whole, a SIGINT meanwhile held back until it is written (Python runs signal handlers in
    the main thread only: a line another thread of the code writes needs no such care, nor could it raise there)."""
    line = json.dumps(message).encode("ascii") + b"\n"
    if threading.get_ident() != _Running.main_thread:
        with _Running.writing:
            _write_line(line, message)
        return
    if _Running.depth:  # a signal handler of the code prints while a line is being written: it goes after it
        _Running.queued.append((line, message))
        return
    running, _Running.code = _Running.code, False
    _Running.depth += 1
    try:
        with _Running.writing:
            _write_line(line, message)
            while _Running.queued:
                _write_line(*_Running.queued.pop(0))
    finally:
        _Running.depth -= 1
        _Running.code = running
    if running and _Running.interrupted:
        _Running.interrupted = False
        raise KeyboardInterrupt("Execution interrupted")


def _write_line(line: bytes, message: dict[str, object]) -> None:
    if _Running.deaf:
        return
    if len(line) > _LINE_LIMIT and "type" in message:
        _Running.deaf = True
        line = b'{"overflow": true}\n'
    view = memoryview(line)
    while view:
        view = view[os.write(_Running.out, view) :]


class _Chunks(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the code, as the daemon's worker's stream emitter: text only, kept until a
    newline or 1,024 characters, then sent as one chunk."""

    encoding = "utf-8"

    def __init__(self, kind: str) -> None:
        super().__init__()
        self._kind = kind
        self._parts: list[str] = []
        self._size = 0
        # A flush under way: what a signal handler (or another thread) writes meanwhile is sent by that flush, after
        # what it took, never twice, never lost.
        self._flushing = False

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        if not data:
            return 0
        text = data if isinstance(data, str) else str(data)
        self._parts.append(text)
        self._size += len(text)
        if ("\n" in text or self._size >= 1024) and not self._flushing:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._parts:
                parts, self._parts = self._parts, []  # a write between these two lands in one of them: sent
                self._size = 0
                _send({"type": self._kind, "text": "".join(parts)})
        finally:
            self._flushing = False

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self.flush()
        super().close()


def _apply_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None or value is None or value <= 0:
            continue
        try:
            _soft, hard = resource.getrlimit(which)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (new, new))
        except (ValueError, OSError):
            pass


def _error_of(exc: BaseException) -> dict[str, str]:
    """The error as the daemon's worker reports it: the traceback keeps only the code's own frames, each as
    ``File "<stdin>", line N`` (no function name, and no source line, which nobody can look up for ``<string>``),
    then ``Name: value``; with none of the code's frames (a SyntaxError), that last line alone."""
    name = type(exc).__name__
    last = f"{name}: {exc}\n"
    lines = [
        f'  File "<stdin>", line {frame.lineno}\n'
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == "<string>"
    ]
    text = "Traceback (most recent call last):\n" + "".join(lines) + last if lines else last
    return {"name": name, "value": str(exc), "traceback": text}


class _Commands:
    """Command lines, read from the pipe by hand so that a wait can watch it for a cancel."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.closed = False

    def _fill(self) -> None:
        data = os.read(self.fd, 1 << 16)
        if data:
            self.buf += data
        else:
            self.closed = True

    def next(self) -> bytes | None:
        """The next line (None at the end of the pipe); cancels that came too late are dropped."""
        while True:
            while b"\n" not in self.buf:
                if self.closed:
                    return None
                self._fill()
            line, self.buf = self.buf.split(b"\n", 1)
            if b'"cancel"' not in line[:12]:
                return line

    def cancelled_before(self, start_at: float) -> bool:
        """Wait until ``start_at``; True if a cancel came first (or the pipe ended: nobody wants the result)."""
        while b"\n" not in self.buf and not self.closed:
            left = start_at - time.monotonic()
            if left <= 0:
                return False
            if select.select([self.fd], [], [], left)[0]:
                self._fill()
        if self.closed and b"\n" not in self.buf:
            return True
        self.buf = self.buf.split(b"\n", 1)[1]  # only a cancel comes before our reply
        return True


# The same prctl/capset numbers as the warm interpreter's (zygote_main.py): both files run standalone under the
# runtime Python, so neither imports the other.
_PR_SET_DUMPABLE = 4
_PR_SET_KEEPCAPS = 8
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _become(uid: int, gid: int) -> None:
    """Drop to the sandbox uid as the executor's programs do: with ``CAP_DAC_READ_SEARCH`` alone, in the bounding
    set too and handed on to what the code runs (the runtime Python may live where only root looks, such as
    ``/root/.pyenv``: without it the code could import only what was loaded before the drop, not ``fractions`` or
    ``numpy``), no new privileges, and dumpable, as an exec'd program is (``/proc/self`` is the code's own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if cap != _CAP_DAC_READ_SEARCH and libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability the kernel knows
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")
    for option, value in ((_PR_SET_KEEPCAPS, 1), (_PR_SET_NO_NEW_PRIVS, 1)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl {option}")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = 1 << _CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0)  # best effort (Linux 4.3+)
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def _setup_line(fd: int) -> dict[str, object]:
    """The first line of the command pipe, read a byte at a time: nothing after it is taken from a shell's input."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise SystemExit(0)
        line += byte
    setup: dict[str, object] = json.loads(line)
    return setup


def _place_fds(fds: object) -> None:
    """The inherited descriptors ``fds`` moved to 3, 4, 5... (a session shell's channels), the others closed."""
    if not isinstance(fds, list):
        return
    high = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 100) for fd in fds]
    for fd in fds:
        os.close(int(fd))
    for target, fd in enumerate(high, start=3):
        os.dup2(fd, target)  # inheritable, unlike the copies
        os.close(fd)


def _add_user_site() -> None:
    """The user's site-packages, which the worker's ``python3`` (no venv) has on its path: the isolated start left it
    out, so it is added now, as the sandbox's uid, from the sandbox's ``HOME`` (its ``.pth`` files included)."""
    if sys.prefix != sys.base_prefix:
        return  # a virtual environment's interpreter: no user site there either
    import site

    site.USER_BASE = None
    site.USER_SITE = None
    with contextlib.suppress(Exception):
        path = site.getusersitepackages()
        if os.path.isdir(path):
            site.addsitedir(path)
            site.ENABLE_USER_SITE = True


def _default_signals() -> None:
    """Every signal at its default, whatever the emulator's process inherited (a background job of a shell starts
    with SIGINT and SIGQUIT ignored, ``nohup`` ignores SIGHUP; an ignored signal stays ignored through exec, and a
    shell started so cannot trap it): the daemon's shells and workers find them so. SIGPIPE and SIGXFSZ stay as
    Python sets them for itself (the shell's exec restores them), SIGINT raises KeyboardInterrupt.

    Kept the same as ``emulator/executor/zygote_main.py``'s (a test compares them): both scripts run alone under the
    runtime Python and import nothing of ours.
    """
    kept = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    for number in signal.valid_signals():
        if number in kept:
            continue
        try:
            if signal.getsignal(number) == signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    _default_signals()
    _apply_limits(json.loads(sys.argv[1]))
    if sys.argv[2] != "-":
        _become(int(sys.argv[2]), int(sys.argv[3]))
    # Only now, as the sandbox's uid, the sandbox's environment and directory: the process starts as the emulator's
    # user (root), isolated (``-I``), with no environment and in ``/``, so that nothing of the sandbox's (a
    # ``PYTHONPATH``, an ``LD_PRELOAD``, a module in its home) is loaded with the emulator's rights.
    setup = _setup_line(0)
    env = setup["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    for key, value in env.items():
        with contextlib.suppress(ValueError, TypeError, UnicodeError):  # a name no environment can hold: left out
            os.environ[str(key)] = str(value)
    for directory in (setup.get("cwd"), os.environ.get("HOME"), "/"):
        if isinstance(directory, str):
            try:
                os.chdir(directory)
                break
            except OSError:
                continue
    if sys.argv[4:5] == ["--exec"]:  # a session's shell: limits and uid as a context's, then the program itself
        _place_fds(setup.get("fds"))
        for number in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; a program would inherit that
            signal.signal(number, signal.SIG_DFL)
        os.execv(sys.argv[5], sys.argv[5:])
    _add_user_site()
    # What the code sees of how it runs: the worker's, a script the daemon writes to its temp dir (``/tmp``, the
    # daemon's own, not the sandbox's $TMPDIR), not ours (whose directory, first on sys.path, would let
    # ``import config`` load the emulator's own module).
    worker = "/tmp/daytona_repl_worker.py"
    sys.argv[:] = [worker]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # as the worker's start reads it
    sys.path[:0] = [os.path.dirname(worker), *extra]
    commands = _Commands(os.dup(0))
    _Running.out = os.dup(1)
    quiet, _never_written = os.pipe()  # the code's stdin: nothing comes, as to the worker's, while the code runs
    os.dup2(quiet, 0)
    os.close(quiet)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": __builtins__}
    signal.signal(signal.SIGINT, _on_sigint)
    while (line := commands.next()) is not None:
        request = json.loads(line)
        nonce = request["nonce"]
        error: dict[str, str] | None = None
        code = None
        _Running.interrupted = False  # from here on a SIGINT is this run's, as the worker's handler raises at once
        try:  # compiled before a wait for the start (its error is reported after it, as the run's would be)
            code = compile(request["code"], "<string>", "exec")
        except BaseException as exc:
            error = _error_of(exc)
        start_at = request.get("start_at")
        if start_at is not None and commands.cancelled_before(start_at):
            _send({"end": nonce, "error": None, "cancelled": True})
            continue
        interrupted = False
        if code is not None:
            envs: dict[str, str] = request.get("envs") or {}
            saved: dict[str, str | None] = {}  # the worker puts back only what it was given
            for key in envs:
                with contextlib.suppress(ValueError, TypeError):  # a name no environment holds: never set either
                    saved[key] = os.environ.get(key)
            streams = sys.stdout, sys.stderr
            out, err = _Chunks("stdout"), _Chunks("stderr")
            try:  # a name the environment cannot hold (a NUL, an '=') is the run's error, as the real worker says it
                os.environ.update(envs)
                sys.stdout, sys.stderr = out, err
                _Running.code = True
                if _Running.interrupted:  # a SIGINT came before the code could start (while it compiled)
                    raise KeyboardInterrupt("Execution interrupted")
                exec(code, namespace)
                _Running.code = False  # a SIGINT from here on is ignored; one before it is this run's interruption
            except KeyboardInterrupt:
                _Running.code = False
                interrupted = True  # no error: the daemon's worker ends the run with control "interrupted"
            except SystemExit:
                _Running.code = False
                # the worker takes sys.exit() and exit() as the code's normal end
            except BaseException as exc:
                _Running.code = False
                error = _error_of(exc)
            finally:
                _Running.code = False
                sys.stdout, sys.stderr = streams
                for key, value in saved.items():
                    with contextlib.suppress(ValueError, OSError):
                        if value is None:
                            os.environ.pop(key, None)
                        else:
                            os.environ[key] = value
            for chunks in (out, err):  # what the code left unsent, as the worker's ``finally`` sends it
                with contextlib.suppress(Exception):
                    chunks.flush()
        if error is not None and len(json.dumps({"type": "error", **error})) >= _LINE_LIMIT:
            _send({"type": "error", **error})  # the worker's error line is past the daemon's limit: it hears no more
        answer: dict[str, object] = {"end": nonce, "error": error}
        if interrupted:
            answer["interrupted"] = True
        _send(answer)


if __name__ == "__main__":
    main()
