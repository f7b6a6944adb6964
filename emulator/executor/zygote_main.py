"""Warm-interpreter zygote of the sandbox executor (a standalone script).

It runs under the *runtime* Python, which may be another version (e.g. 3.10) without our
package installed, so it imports nothing from ``emulator`` and only the standard library.

Protocol: JSON messages over the AF_UNIX SOCK_SEQPACKET socket whose fd is ``argv[1]``.
A ``spawn`` request carries four fds (SCM_RIGHTS): the child's stdin, stdout, stderr and a
"setup status" pipe on which the child writes a message if its sandbox setup (or execve)
fails.  The zygote forks one child per request; the child either execs ``argv`` (faithful
path) or runs the Python script itself in this warm interpreter (fast path).  The zygote
reports ``started`` (pid) and ``exited`` (return code), and kills process groups on request.

In the fast path the user's code is executed at this module's top level (see the bottom of
the file) so that the call stack above the user's ``<module>`` frame is as short as possible.
"""

from __future__ import annotations

import sys

# The script directory is sys.path[0]: drop it so nothing next to us shadows the stdlib.
if sys.path and sys.path[0] == __file__.rpartition("/")[0]:
    del sys.path[0]

import array
import builtins
import contextlib
import ctypes
import errno
import gc
import json
import os
import resource
import selectors
import signal
import socket
import types
from typing import Any, NoReturn

_SELF_FILE = __file__
_MAX_MSG = 1 << 18

# Cheap, side-effect-free stdlib modules imported once here so forked children get them
# for free.  Nothing that starts threads, registers atexit handlers or reads the env at
# import time belongs here (and never third-party packages such as numpy).
_PREIMPORT = (
    "collections",
    "functools",
    "itertools",
    "re",
    "math",
    "heapq",
    "bisect",
    "string",
    "json",
    "typing",
    "dataclasses",
    "enum",
    "copy",
    "operator",
    "random",
    "statistics",
    "datetime",
    "time",
    "struct",
    "textwrap",
    "fractions",
    "decimal",
    "array",
    "base64",
    "hashlib",
    "contextlib",
    "abc",
    "numbers",
    "keyword",
    "importlib.machinery",
)

# Recursion-depth calibration: user code runs one module frame (and, on some versions, one
# C-level eval entry) deeper than in ``python <file>``.  We measure the depth a recursive
# function reaches here and in a fresh interpreter, and shift the recursion limit by the
# difference in children, so RecursionError happens at the same depth (same traceback).
_CALIBRATE_SRC = (
    "def _f(n):\n    try:\n        return _f(n + 1)\n    except RecursionError:\n        return n\ndepth = _f(1)\n"
)
_RECURSION_OFFSET = 0


def _fresh_depth() -> int | None:
    """Depth reached by the calibration code in a fresh interpreter (None if unknown)."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-c", _CALIBRATE_SRC + "print(depth)\n"],
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, write_fd, 1), (os.POSIX_SPAWN_CLOSE, read_fd)],
        )
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    try:
        return int(b"".join(chunks)) if os.waitstatus_to_exitcode(status) == 0 else None
    except ValueError:
        return None


class _RecursionLimitShim:
    """sys.get/setrecursionlimit that hide the calibration offset from user code."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.real_get = sys.getrecursionlimit
        self.real_set = sys.setrecursionlimit

    def install(self) -> None:
        offset, real_get, real_set = self.offset, self.real_get, self.real_set

        def getrecursionlimit() -> int:
            return real_get() - offset

        def setrecursionlimit(limit: int, /) -> None:
            real_set(limit)  # validates (type, >= 1) exactly like CPython
            real_set(real_get() + offset)

        for shim, real in ((getrecursionlimit, real_get), (setrecursionlimit, real_set)):
            shim.__module__ = "sys"
            shim.__doc__ = real.__doc__
        real_set(real_get() + offset)
        sys.getrecursionlimit = getrecursionlimit
        sys.setrecursionlimit = setrecursionlimit


# --- libc via ctypes --------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_PR_SET_KEEPCAPS = 8
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc.capset.argtypes = [ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData)]
_libc.capset.restype = ctypes.c_int
_PTHREAD_ATTR_SIZE = 256  # generous: sizeof(pthread_attr_t) is 56 on x86_64/aarch64
_libc.pthread_attr_init.argtypes = [ctypes.c_void_p]
_libc.pthread_attr_setstacksize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.pthread_setattr_default_np.argtypes = [ctypes.c_void_p]
_libc.pthread_attr_destroy.argtypes = [ctypes.c_void_p]


def _check(ret: int, what: str) -> None:
    """Raise OSError with errno when a libc call failed."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """Call prctl(2); returns its result so callers can inspect EINVAL."""
    return int(_libc.prctl(option, arg2, arg3, 0, 0))


class _PreexecError(Exception):
    """Setup failure that the real server reports as 'Exception occurred in preexec_fn.'."""


class _ExecError(Exception):
    """execve failed; the message is what subprocess would have raised."""


# --- zygote state -------------------------------------------------------------------------


class _State:
    """Mutable zygote state (module-level singletons, kept in one place)."""

    sock: socket.socket | None = None
    selector: selectors.BaseSelector | None = None
    wake_fds: tuple[int, int] = (-1, -1)
    children: dict[int, int] = {}  # pid -> request id
    sweep_uids: dict[int, int] = {}  # pid -> exclusive sandbox uid to sweep when it ends
    pids: dict[int, int] = {}  # request id -> pid


class _Job:
    """A Python script prepared for execution in a forked child (fast path)."""

    def __init__(self, namespace: dict[str, Any], code: types.CodeType | None, error: BaseException | None) -> None:
        self.namespace = namespace
        self.code = code
        self.error = error


def _send(msg: dict[str, Any]) -> None:
    """Send one JSON message to the executor (blocking)."""
    assert _State.sock is not None
    _State.sock.sendall(json.dumps(msg).encode())


# --- child side ---------------------------------------------------------------------------


def _count_user_tasks(uid: int) -> int:
    """Number of tasks (threads) owned by ``uid``: what RLIMIT_NPROC counts."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                data = f.read()
        except OSError:
            continue
        owner = -1
        threads = 1
        for line in data.split(b"\n"):
            if line.startswith(b"Uid:"):
                owner = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if owner == uid:
            total += threads
    return total


def _set_rlimits(req: dict[str, Any]) -> None:
    """Apply the request's rlimits (memory limit exactly like the real server's preexec)."""
    lim: dict[str, int] = req["limits"]
    memory = lim["memory"]
    if memory > 0:
        for res in (resource.RLIMIT_AS, resource.RLIMIT_DATA, resource.RLIMIT_STACK):
            _soft, hard = resource.getrlimit(res)
            # The real server cannot raise a hard limit (no CAP_SYS_RESOURCE in its container),
            # so a request above the hard limit fails in preexec_fn.
            if hard != resource.RLIM_INFINITY and memory > hard:
                raise _PreexecError("memory limit above hard rlimit")
            resource.setrlimit(res, (memory, memory))
    elif lim["as_cap"] > 0:
        resource.setrlimit(resource.RLIMIT_AS, (lim["as_cap"], lim["as_cap"]))
    if lim["cpu"] > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1))
    if lim["fsize"] > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = lim["nproc"]
    if nproc > 0:
        if req["uid"] is None:
            nproc += _count_user_tasks(os.getuid())
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _set_default_thread_stack() -> None:
    """Make glibc's default thread stack size follow the (new) soft RLIMIT_STACK.

    A fresh process gets this at startup from glibc; a forked child keeps the zygote's, so
    without this Python and native (OpenBLAS) threads would not fail as on the real server.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY:
        return
    page = resource.getpagesize()
    size = max(soft, 16384)
    size = (size + page - 1) // page * page
    attr = ctypes.create_string_buffer(_PTHREAD_ATTR_SIZE)
    _check(_libc.pthread_attr_init(attr), "pthread_attr_init")
    try:
        _check(_libc.pthread_attr_setstacksize(attr, size), "pthread_attr_setstacksize")
        _check(_libc.pthread_setattr_default_np(attr), "pthread_setattr_default_np")
    finally:
        _libc.pthread_attr_destroy(attr)


def _drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` keeping only CAP_DAC_READ_SEARCH (also across execve).

    The interpreter lives under /root (mode 0700), so an unprivileged uid needs
    CAP_DAC_READ_SEARCH to exec it.  Everything else is dropped, including the bounding set,
    and no_new_privs stops setuid binaries from regaining root.
    """
    for cap in range(64):
        if cap == _CAP_DAC_READ_SEARCH:
            continue
        if _prctl(_PR_CAPBSET_DROP, cap) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability the kernel knows
            _check(-1, "PR_CAPBSET_DROP")
    _check(_prctl(_PR_SET_KEEPCAPS, 1), "PR_SET_KEEPCAPS")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    bit = 1 << _CAP_DAC_READ_SEARCH
    data[0].effective = bit
    data[0].permitted = bit
    data[0].inheritable = bit
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH), "PR_CAP_AMBIENT")
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1), "PR_SET_NO_NEW_PRIVS")


def _child_setup(req: dict[str, Any], fds: list[int], zygote_pid: int) -> int:
    """Common sandbox setup in the forked child; returns the setup-status fd."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    stdin_fd, stdout_fd, stderr_fd, status_fd = fds
    os.dup2(stdin_fd, 0)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    # Close the zygote's own descriptors through their objects first, so that no Python
    # object is left that would later close an fd number reused by user code.
    if _State.selector is not None:
        _State.selector.close()
        _State.selector = None
    if _State.sock is not None:
        _State.sock.close()
        _State.sock = None
    os.set_inheritable(status_fd, False)
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, 1 << 20)
    os.chdir(req["cwd"])
    _set_rlimits(req)
    if req["mode"] == "python" and req["limits"]["memory"] > 0:
        _set_default_thread_stack()
    if req["uid"] is not None:
        _drop_privileges(req["uid"], req["gid"])
        if req.get("sweep"):
            # Leftovers of an earlier execution with this uid (e.g. after a zygote crash).
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
    # Die with the zygote (set after the uid change, which clears it).
    _check(_prctl(_PR_SET_PDEATHSIG, signal.SIGKILL), "PR_SET_PDEATHSIG")
    if os.getppid() != zygote_pid:
        os._exit(1)
    return status_fd


def _child_fail(status_fd: int, exc: BaseException) -> NoReturn:
    """Report a setup/exec failure on the status pipe and exit."""
    msg = f"exec\n{exc}" if isinstance(exc, _ExecError) else f"preexec\n{type(exc).__name__}: {exc}"
    with contextlib.suppress(OSError):
        os.write(status_fd, msg.encode("utf-8", "replace"))
    os._exit(1)


def _child_exec(req: dict[str, Any], status_fd: int) -> NoReturn:
    """Faithful path: exec the command (signals restored as subprocess does)."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    argv: list[str] = req["argv"]
    try:
        os.execvpe(argv[0], argv, req["env"])
    except OSError as exc:
        raise _ExecError(f"[Errno {exc.errno}] {os.strerror(exc.errno or 0)}: {argv[0]!r}") from None
    raise AssertionError("unreachable")


def _child_prepare_python(req: dict[str, Any]) -> _Job:
    """Fast path: make this interpreter look like ``python <script>`` just started."""
    path: str = req["script"]
    if _RECURSION_OFFSET > 0:
        _RecursionLimitShim(_RECURSION_OFFSET).install()
    sys.argv = [path]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [req["argv"][0], path]
    script_dir = os.path.dirname(os.path.realpath(path))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.append(script_dir)
    os.environ.clear()
    os.environ.update(req["env"])
    import importlib.machinery

    # Same keys, in the same order, as the __main__ of ``python <file>``.
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__annotations__"] = {}
    namespace["__builtins__"] = builtins
    namespace["__file__"] = path
    namespace["__cached__"] = None
    namespace["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = module
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.stderr.write(f"{req['argv'][0]}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), ...
        return _Job(namespace, None, exc)
    return _Job(namespace, code, None)


def _spawn(req: dict[str, Any], fds: list[int]) -> _Job | None:
    """Fork one child for ``req``; returns a job only inside a fast-path child."""
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        _send({"op": "spawn_failed", "id": req["id"], "error": "bad fd count"})
        return None
    zygote_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        _send({"op": "spawn_failed", "id": req["id"], "error": f"fork failed: {exc}"})
        return None
    if pid == 0:
        status_fd = fds[3]
        try:
            status_fd = _child_setup(req, fds, zygote_pid)
            if req["mode"] != "python":
                _child_exec(req, status_fd)
            os.close(status_fd)
            return _child_prepare_python(req)
        except BaseException as exc:
            _child_fail(status_fd, exc)
    for fd in fds:
        os.close(fd)
    _State.children[pid] = req["id"]
    _State.pids[req["id"]] = pid
    if req.get("sweep") and req["uid"] is not None:
        _State.sweep_uids[pid] = req["uid"]
    _send({"op": "started", "id": req["id"], "pid": pid})
    return None


def _kill_group(pid: int) -> None:
    """SIGKILL a child's process group (and the child itself, in case setsid did not run)."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _sweep_uid(uid: int) -> None:
    """SIGKILL every process of an exclusive sandbox uid (also those that left the group).

    kill(-1) hits all processes we may signal; with real and effective uid set to ``uid``
    (saved uid 0 so we can come back, effective capabilities dropped by the switch) that is
    exactly the processes of ``uid``.
    """
    try:
        os.setresuid(uid, uid, 0)
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    finally:
        try:
            os.setresuid(0, 0, 0)
        except OSError:
            os._exit(70)  # cannot regain root: let the executor start a fresh zygote


def _reap() -> None:
    """Reap exited children: kill their group while the zombie still pins the pgid."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == 0:
            return
        pid = info.si_pid
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        uid = _State.sweep_uids.pop(pid, None)
        if uid is not None:
            _sweep_uid(uid)
        _, status = os.waitpid(pid, 0)
        req_id = _State.children.pop(pid, None)
        if req_id is not None:
            _State.pids.pop(req_id, None)
            _send({"op": "exited", "id": req_id, "rc": os.waitstatus_to_exitcode(status)})


def _shutdown() -> NoReturn:
    """Kill every child group and exit (executor closed or gone)."""
    for pid in list(_State.children):
        _kill_group(pid)
    for pid in list(_State.children):
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    os._exit(0)


def _recv_fds(sock: socket.socket) -> tuple[bytes, list[int]]:
    """Non-blocking recvmsg with SCM_RIGHTS (socket.recv_fds ignores its flags argument)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(
        _MAX_MSG,
        socket.CMSG_SPACE(8 * fds.itemsize),
        socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC,
    )
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _handle_socket() -> _Job | None:
    """Process every queued request; returns a job only inside a fast-path child."""
    assert _State.sock is not None
    while True:
        try:
            data, fds = _recv_fds(_State.sock)
        except BlockingIOError:
            return None
        except OSError:
            _shutdown()
        if not data:
            for fd in fds:
                os.close(fd)
            _shutdown()
        req = json.loads(data)
        op = req.get("op")
        if op == "spawn":
            job = _spawn(req, fds)
            if job is not None:
                return job
        else:
            for fd in fds:
                os.close(fd)
            if op == "kill":
                pid = _State.pids.get(req["id"])
                if pid is not None:
                    _kill_group(pid)
                    uid = _State.sweep_uids.get(pid)
                    if uid is not None:
                        _sweep_uid(uid)
            elif op == "shutdown":
                _shutdown()


def _serve(sock: socket.socket) -> _Job:
    """Main loop; returns only inside a forked fast-path child."""
    _State.sock = sock
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _State.wake_fds = (wake_r, wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    _State.selector = selector
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    _send(
        {
            "op": "ready",
            "pid": os.getpid(),
            "version": list(sys.version_info[:3]),
            "executable": sys.executable,
        }
    )
    while True:
        for key, _events in selector.select():
            if key.fileobj is sock:
                job = _handle_socket()
                if job is not None:
                    return job
            else:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
        _reap()


# --- fast-path finalisation (what Py_RunMain + Py_FinalizeEx do) --------------------------


def _exit_code_of(exc: SystemExit) -> int:
    """Exit status for SystemExit, as CPython's handle_system_exit computes it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        if -(1 << 63) <= code < (1 << 63):
            return code & 0xFF
        return 0xFF
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(str(code))
            stream.write("\n")
    except BaseException:
        pass
    return 1


def _print_exception(exc: BaseException) -> None:
    """Display an uncaught exception via sys.excepthook without the zygote's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _SELF_FILE:
        tb = tb.tb_next
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    hook = getattr(sys, "excepthook", None)
    if hook is None:
        if sys.__stderr__ is not None:
            sys.__stderr__.write("sys.excepthook is missing\n")
        return
    try:
        hook(type(exc), exc, tb)
    except BaseException as hook_exc:
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_exc), hook_exc, hook_exc.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, tb)


def _flush_std() -> bool:
    """Flush stdout/stderr like flush_std_files(); False when stdout could not be flushed."""
    ok = True
    for stream, is_stdout in ((sys.stdout, True), (sys.stderr, False)):
        if stream is None:
            continue
        try:
            if not stream.closed:
                stream.flush()
        except BaseException as exc:
            if is_stdout:
                ok = False
                try:
                    import traceback

                    err = sys.stderr
                    if err is not None:
                        err.write(f"Exception ignored in: {stream!r}\n")
                        err.write("".join(traceback.format_exception_only(type(exc), exc)))
                except BaseException:
                    pass
    return ok


def _clear_namespace(namespace: dict[str, Any]) -> None:
    """Clear __main__'s globals as module finalisation does (so __del__/file flushes run)."""
    for name in list(namespace):
        if name.startswith("_") and not name.startswith("__"):
            namespace[name] = None
    for name in list(namespace):
        if name != "__builtins__":
            namespace[name] = None


def _finish(exc: BaseException | None, job: _Job) -> NoReturn:
    """Exit the fast-path child exactly as a fresh interpreter would end."""
    code = 0
    sigint = False
    if exc is not None:
        if isinstance(exc, SystemExit):
            code = _exit_code_of(exc)
        else:
            _print_exception(exc)
            code = 1
            sigint = isinstance(exc, KeyboardInterrupt)
        exc = None
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    if not _flush_std():
        code = 120
    try:
        _clear_namespace(job.namespace)
        gc.collect()
    except BaseException:
        pass
    if not _flush_std():
        code = 120
    if sigint:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _main(our_depth: int) -> _Job:
    """Start the zygote: calibrate, pre-import, freeze the heap and serve requests."""
    global _RECURSION_OFFSET
    fresh = _fresh_depth()
    if fresh is not None and 0 < our_depth < fresh:
        _RECURSION_OFFSET = fresh - our_depth
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    for name in _PREIMPORT:
        with contextlib.suppress(ImportError):
            __import__(name)
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    return _serve(sock)


if __name__ == "__main__":
    # Calibrate at module level: the same stack depth at which user code is exec'd below.
    _calibration: dict[str, Any] = {}
    exec(compile(_CALIBRATE_SRC, "<calibrate>", "exec"), _calibration)
    _job = _main(int(_calibration.pop("depth")))
    del _calibration
    _exc = _job.error
    if _exc is None and _job.code is not None:
        try:
            exec(_job.code, _job.namespace)
        except BaseException as _e:
            _exc = _e
    _finish(_exc, _job)
