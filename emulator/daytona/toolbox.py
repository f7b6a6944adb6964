"""The per-sandbox toolbox (the daemon): process execution, sessions and files.

Commands and code run for real through the emulator's executor, with the sandbox's home as working directory (the
executor hands it to the execution's uid), the sandbox's env plus the request's ``envs``, and the daemon's answers:
a non-zero exit is HTTP 200 with ``exitCode``; a timeout is 408 ``REQUEST_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from emulator.executor import ExecutionRequest, ExecutionResult, Executor, OutputCapture

from .config import OUTPUT_LIMIT
from .errors import ApiError, StartFailed
from .files import go_errno_text
from .go_decode import GoDecodeError, bind_json
from .go_fields import INVALID_BODY, INVALID_BODY_CODE, envs_field, string_field, type_error, uint32_field
from .go_json import go_string
from .interpreter import go_start_error
from .sandboxes import Sandbox
from .sessions import Session, SessionCancelled, SessionCommand, SessionShells

BASH = "/bin/bash"
#: The daemon's session of the sandbox's entrypoint: reserved, never made, run in or deleted through the API.
ENTRYPOINT_SESSION = "entrypoint"
#: The key in an answer that makes it a 202 Accepted (taken out before it is sent).
ACCEPTED = "\x00accepted"
#: The key in an answer that holds the command, whose output the service writes in the shape the SDK expects.
COMMAND = "\x00command"
#: The shell the daemon finds first in the image's ``/etc/shells`` (zsh when there is one, then bash).
SHELL = "/usr/bin/bash"
ExecutorGetter = Callable[[], Awaitable[Executor]]
#: Go's ``exec.Cmd.Start`` error for an environment entry that holds a NUL (``Cmd.environ``): the daemon answers it
#: as any failed start, HTTP 200 with exit code -1.
ENV_NUL = "exec: environment variable contains NUL"
#: The daemon's ``coderun.ArtifactMarker``: a line of code-run's output that starts with it is an artifact (a chart
#: of its matplotlib wrapper), never part of ``result``.
ARTIFACT_MARKER = "dtn_artifact_k39fd2:"
#: How the daemon takes a command's output: all of it, into a buffer with no bound, the command never blocked on its
#: pipe. Here each stream is read to its end, its first ``OUTPUT_LIMIT`` bytes kept. The daemon answers it as a Go
#: string in JSON: each byte that is not UTF-8 becomes U+FFFD (not Sandbox Fusion's ``[DecodeError]`` for the whole).
#: Its ``cmd.Wait`` returns once every holder of the output's pipe has closed it: ``echo a; (sleep 2; echo late) &``
#: answers after two seconds with both lines (the timeout bounds the wait: then 408).
CAPTURE = OutputCapture(keep=OUTPUT_LIMIT, absorb=None, decode=go_string, until_closed=True)


@dataclass(frozen=True)
class RequestBody:
    """A handler's request struct, as its binding reads a body: Go's type (``package.Name``) and JSON fields, and the
    prefix and code of the handler's error for a body it refuses."""

    go_type: str
    fields: tuple[str, ...]
    prefix: str
    code: str | None = None

    def bind(self, body: bytes) -> dict[str, Any]:
        """``body`` decoded into the struct (see :mod:`.go_decode`); a 400 in the handler's words if it does not."""
        try:
            return bind_json(body, self.go_type, self.fields)
        except GoDecodeError as refused:
            raise ApiError(400, f"{self.prefix}{refused}", self.code) from None


EXECUTE_BODY = RequestBody(
    "process.ExecuteRequest", ("command", "timeout", "cwd", "envs"), "bad request: invalid request body: "
)
CODE_RUN_BODY = RequestBody(
    "coderun.CodeRunRequest", ("code", "language", "argv", "envs", "timeout"), INVALID_BODY, INVALID_BODY_CODE
)
SESSION_BODY = RequestBody("session.CreateSessionRequest", ("sessionId",), INVALID_BODY, INVALID_BODY_CODE)
SESSION_EXEC_BODY = RequestBody(
    "session.SessionExecuteRequest", ("command", "runAsync", "async", "suppressInputEcho"), "invalid request body: "
)
SESSION_INPUT_BODY = RequestBody("session.SessionSendInputRequest", ("data",), INVALID_BODY, INVALID_BODY_CODE)
CONTEXT_BODY = RequestBody("interpreter.CreateContextRequest", ("cwd", "language"), "invalid request payload: ")


class CommandTimeout(Exception):
    """The command ran past its timeout (the daemon answers 408 REQUEST_TIMEOUT)."""


class SandboxGone(Exception):
    """The sandbox was stopped or deleted while its command ran: the command was killed with it."""


def _not_cancelling() -> bool:
    """Whether the current task itself is not being cancelled (its client is still there)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


def process_dir(sandbox: Sandbox, cwd: str) -> str:
    """The host directory that a command or interpreter context given ``cwd`` starts in: where the code it runs finds
    that path. The daemon sets the process's directory to ``cwd`` as it is, in the container; here the code sees the
    host's file system but for its home, so a relative ``cwd`` is under the home (the daemon's own directory), one
    under ``/home/<user>`` is in the home (a host directory), and any other absolute path is the host's (``/tmp``,
    ``/usr``, ``/``), which the code would reach with its own ``cd``. Not the file API's mapping: its private tree
    for other absolute paths is no directory that any code runs in.

    The path is walked as the kernel walks it in the container (:func:`_walk`), so that a ``..`` climbs out of the
    home where the container's would (``/home/daytona/..`` is ``/home``), never into the host directory that holds
    the sandboxes' homes, while a ``..`` after a link is taken from where the link led."""
    if "\0" in cwd:
        return cwd  # no path holds one: the kernel's refusal
    user_home = f"/home/{sandbox.user}"
    path = cwd if cwd.startswith("/") else f"{user_home}/{cwd}"
    return _walk(sandbox, [element for element in path.split("/") if element not in ("", ".")])


def _walk(sandbox: Sandbox, elements: list[str]) -> str:
    """The host path of the container path ``/`` + ``elements``: each element taken from the directory reached so
    far (a link followed where it stands), ``/home/<user>`` the home and the home's ``..`` the container's ``/home``.
    Where the walk meets what is no directory, the rest is left as it is, for the kernel's own refusal."""
    home = os.path.realpath(sandbox.home)
    current = "/"
    for index, element in enumerate(elements):
        if current not in ("/home", home) and not os.path.isdir(current):
            return os.path.join(current, *elements[index:])
        if element == "..":
            current = "/home" if current == home else os.path.dirname(current)
        elif current == "/home" and element == sandbox.user:
            current = home
        elif current == "/" and element == "home":
            current = "/home"  # the container's, which holds the home whatever the host has there
        else:
            current = os.path.realpath(os.path.join(current, element))
    return current


def sandbox_env(sandbox: Sandbox) -> dict[str, str]:
    """The environment every process of the sandbox's container has: the variables the runner sets on it
    (``container_configs.go``: the sandbox's id, snapshot and user always, its organization and region when the API
    names them, which it does), then the sandbox's ``env``, whose value wins for a name in both (Docker keeps the
    last). The snapshot is the one the sandbox was created from, empty when none was named (the runner gets the
    snapshot's image reference, which the emulator has none of)."""
    runner = {
        "DAYTONA_SANDBOX_ID": sandbox.id,
        "DAYTONA_SANDBOX_SNAPSHOT": sandbox.snapshot or "",
        "DAYTONA_SANDBOX_USER": sandbox.user,
    }
    if sandbox.organization_id:
        runner["DAYTONA_ORGANIZATION_ID"] = sandbox.organization_id
    if sandbox.target:
        runner["DAYTONA_REGION_ID"] = sandbox.target
    return {**runner, **sandbox.env}


def chdir_refusal(directory: str) -> str | None:
    """Why a process cannot start in ``directory``, in Go's words for the kernel's error (``no such file or
    directory``, ``not a directory``, ``permission denied``; ``invalid argument`` for a NUL, which no path can hold),
    or None when it can."""
    if "\0" in directory:
        return "invalid argument"
    try:
        mode = os.stat(directory).st_mode
    except OSError as error:
        return go_errno_text(error)
    return None if stat.S_ISDIR(mode) else "not a directory"


def _required(struct: str, field: str) -> str:
    """The validator's message for a ``validate:"required"`` field that is empty or absent."""
    return f"Key: '{struct}.{field}' Error:Field validation for '{field}' failed on the 'required' tag"


def code_run_line(code: str, argv: list[str], python: str) -> str:
    """The daemon's shell line for Python code (``coderun/python.go``), fed to its shell: the code in base64, decoded
    into ``python3 -u -``, and ``argv`` joined with spaces, unquoted (``formatArgv``), so that the shell splits,
    expands and runs what they hold (``["a b", "$HOME", "x;echo hi"]`` gives python ``['-', 'a', 'b', <home>, 'x']``,
    then runs an ``echo``; a NUL is dropped, as bash drops it from its input). Stderr goes where stdout goes,
    interleaved, as the daemon's one buffer takes both; the emulator's runtime Python stands for ``python3``."""
    encoded = base64.b64encode(code.encode("utf-8", "surrogateescape")).decode("ascii")
    return f"exec 2>&1\nprintf '%s' '{encoded}' | base64 -d | {shlex.quote(python)} -u - {' '.join(argv)}"


def _holds_nul(envs: dict[str, str]) -> bool:
    """Whether an entry of a process's environment holds a NUL, which Go's ``exec.Cmd`` refuses. Checked on the
    whole environment (the sandbox's own and the request's), so that none reaches the executor's child, where it
    would fail after the fork."""
    return any("\0" in name or "\0" in value for name, value in envs.items())


def _combined(result: ExecutionResult) -> str:
    return (result.stdout or "") + (result.stderr or "")


def _without_artifacts(output: str) -> str:
    """``output`` as the daemon's ``ParseArtifacts`` leaves it: split at each ``\n``, every piece that starts with
    :data:`ARTIFACT_MARKER` dropped (whatever follows the marker), the rest joined with ``\n`` again (so a dropped
    last line takes the newline before it with it, and a trailing newline stays)."""
    if ARTIFACT_MARKER not in output:
        return output
    return "\n".join(line for line in output.split("\n") if not line.startswith(ARTIFACT_MARKER))


def _shell_exit_code(result: ExecutionResult) -> int:
    """The daemon's ``exitCode`` for the shell it ran: Go's ``ExitCode()``, which is -1 for a shell killed by a
    signal (``kill -9 $$``), where the executor reports the signal (-9)."""
    code = result.return_code
    return -1 if code is None or code < 0 else code


def _piped_python_exit_code(result: ExecutionResult) -> int:
    """The daemon's ``exitCode`` for code it ran: its shell runs ``... | python3 -u -`` and exits with the pipeline's
    status, so a python killed by signal N is the shell's 128 + N (137 for SIGKILL), not -N."""
    code = result.return_code
    if code is None:
        return -1
    return 128 - code if code < 0 else code


class Toolbox:
    """Runs toolbox operations for sandboxes of one emulator."""

    def __init__(self, executor: ExecutorGetter, default_timeout: float, shells: SessionShells) -> None:
        self._executor = executor
        self._default_timeout = default_timeout
        self.shells = shells
        self._sessions: dict[str, dict[str, Session]] = {}
        self._running: dict[str, set[asyncio.Task[ExecutionResult]]] = {}

    def drop_sandbox(self, sandbox_id: str) -> None:
        """The sandbox stopped or went: its commands end with it, as its container's processes do."""
        for task in self._running.pop(sandbox_id, set()):
            task.cancel()  # the executor kills the program
        for session in self._sessions.pop(sandbox_id, {}).values():
            self.shells.drop(session)

    def _timeout(self, seconds: int | None) -> float:
        """The daemon runs a command with no timeout when the request sets none or 0; here the configured default
        (``default_command_timeout``) bounds it."""
        return self._default_timeout if not seconds else float(seconds)

    @staticmethod
    def _envs(sandbox: Sandbox, envs: dict[str, str]) -> dict[str, str]:
        return {**sandbox_env(sandbox), **envs}

    async def _run(
        self,
        argv: list[str],
        sandbox: Sandbox,
        env: dict[str, str],
        timeout: float,
        script: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecutionResult:
        executor = await self._executor()
        request = ExecutionRequest(
            argv=argv,
            cwd=sandbox.home,
            timeout=timeout,
            stdin=stdin,
            extra_env=env,
            python_script=script,
            capture=CAPTURE,
        )
        task = asyncio.ensure_future(executor.run(request))
        running = self._running.setdefault(sandbox.id, set())
        running.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if task.cancelled() and _not_cancelling():
                raise SandboxGone from None  # drop_sandbox's doing, not our caller's
            raise
        except OSError as error:  # the program could not be started (its home not handed to it, no process left)
            raise StartFailed(500, go_start_error(error, argv[0])) from None
        finally:
            running.discard(task)

    async def _bash(self, script: str, sandbox: Sandbox, env: dict[str, str], timeout: float) -> ExecutionResult:
        """``script`` run by a bash that reads it from its stdin, as the daemon feeds its shell: no argument-size
        limit (the kernel refuses a single argument over 128 KiB), and the script's commands share that stdin."""
        return await self._run([BASH], sandbox, env, timeout, stdin=script.encode("utf-8", "surrogateescape"))

    async def shell(
        self, sandbox: Sandbox, command: str, cwd: str | None, env: dict[str, str], timeout: float
    ) -> ExecutionResult:
        """``command`` through bash with stderr merged into stdout, in ``cwd`` (a sandbox path) or the home."""
        prefix = "exec 2>&1\n"
        if cwd:
            # As if the shell had started there: the directory as the kernel resolves it (``-P``, so ``pwd`` prints
            # where a link led, as a shell started in it finds it), and no OLDPWD (a fresh shell has none).
            prefix += f"cd -P -- {shlex.quote(process_dir(sandbox, cwd))} || exit 1\nunset OLDPWD\n"
        result = await self._bash(prefix + command, sandbox, env, timeout)
        if result.status == "TimeLimitExceeded":
            raise CommandTimeout
        if result.status == "Error":
            raise StartFailed(500, result.stderr or "execution failed")
        return result

    # ------------------------------------------------------------------ process

    async def execute(self, sandbox: Sandbox, raw: bytes) -> dict[str, Any]:
        """``/process/execute`` as the daemon's handler: the body bound to its types, then the command checked, then
        the env names; a ``cwd`` the shell cannot start in is exit code -1 with the start's error, HTTP 200."""
        body = EXECUTE_BODY.bind(raw)
        prefix = EXECUTE_BODY.prefix  # NewBadRequestError(fmt.Errorf("invalid request body: %w"))
        command = string_field(body, "command", "ExecuteRequest", prefix) or ""
        seconds = uint32_field(body, "timeout", "ExecuteRequest", prefix)
        cwd = string_field(body, "cwd", "ExecuteRequest", prefix)
        envs = envs_field(body, "ExecuteRequest", prefix, refused="bad request: ")
        if not command:  # the binding's validate:"required"
            raise ApiError(400, prefix + _required("ExecuteRequest", "Command"))
        if not command.strip():
            raise ApiError(400, "bad request: command cannot be empty or whitespace-only")
        env = self._envs(sandbox, envs)
        if _holds_nul(env):  # Go's exec.Cmd refuses the environment before it starts anything
            return {"exitCode": -1, "result": ENV_NUL}
        refusal = chdir_refusal(process_dir(sandbox, cwd)) if cwd else None
        if refusal is not None:  # the child's chdir failed: Go's error for the start
            return {"exitCode": -1, "result": f"fork/exec {SHELL}: {refusal}"}
        try:
            result = await self.shell(sandbox, command, cwd or None, env, self._timeout(seconds))
        except StartFailed as failed:  # the daemon's cmd.Start error (descriptors or processes run out): 200, -1
            return {"exitCode": -1, "result": failed.message}
        return {"exitCode": _shell_exit_code(result), "result": _combined(result)}

    async def code_run(self, sandbox: Sandbox, raw: bytes, python: str) -> dict[str, Any]:
        """``/process/code-run`` as the daemon's handler: ``language`` is required and is one of its toolboxes'
        names (``python``; ``javascript`` and ``typescript`` are not emulated)."""
        body = CODE_RUN_BODY.bind(raw)
        prefix = CODE_RUN_BODY.prefix  # the binding's error through NewInvalidBodyRequestError
        code = string_field(body, "code", "CodeRunRequest", prefix) or ""
        language = string_field(body, "language", "CodeRunRequest", prefix) or ""
        argv_extra = body.get("argv")
        if argv_extra is not None and not isinstance(argv_extra, list):
            raise type_error(prefix, argv_extra, "CodeRunRequest", "argv", "[]string")
        for item in argv_extra or []:
            if not isinstance(item, str):
                raise type_error(prefix, item, "CodeRunRequest", "argv", "string")
        envs = envs_field(body, "CodeRunRequest", prefix, refused="bad request: ")
        timeout = self._timeout(uint32_field(body, "timeout", "CodeRunRequest", prefix))
        missing = [
            _required("CodeRunRequest", name) for name, value in (("Code", code), ("Language", language)) if not value
        ]
        if missing:  # the binding's validate:"required", every failing field on a line of its own
            raise ApiError(400, prefix + "\n".join(missing), INVALID_BODY_CODE)
        if language != "python":
            raise ApiError(400, f"bad request: unsupported language: {language}")
        env = self._envs(sandbox, envs)
        if _holds_nul(env):  # Go's exec.Cmd refuses the environment before it starts anything
            return {"exitCode": -1, "result": ENV_NUL}
        # As the daemon runs it: ``python3 -u -`` reading the code from its stdin (``<stdin>`` in tracebacks,
        # ``sys.argv[0] == '-'``, an empty stdin left to the code). Without argv, python alone (the fast path): what
        # its shell would add is an exit code, 128 + N for a signal. With argv, the daemon's shell line itself.
        if argv_extra:
            result = await self._bash(code_run_line(code, argv_extra, python), sandbox, env, timeout)
            exit_code = _shell_exit_code(result)
        else:
            program = code.encode("utf-8", "surrogateescape")
            result = await self._run([python, "-u", "-"], sandbox, env, timeout, stdin=program)
            exit_code = _piped_python_exit_code(result)
        if result.status == "TimeLimitExceeded":
            raise CommandTimeout
        if result.status == "Error":
            raise ApiError(500, result.stderr or "execution failed")
        # No chart came (matplotlib's are not emulated, nor are charts built from marker lines the code prints): the
        # daemon leaves ``artifacts`` out.
        return {"exitCode": exit_code, "result": _without_artifacts(_combined(result))}

    # ------------------------------------------------------------------ sessions

    def sessions(self, sandbox: Sandbox) -> dict[str, Session]:
        return self._sessions.setdefault(sandbox.id, {})

    def session(self, sandbox: Sandbox, session_id: str) -> Session:
        session = self.sessions(sandbox).get(session_id)
        if session is None:
            raise ApiError(404, "not found: session not found")
        return session

    async def create_session(self, sandbox: Sandbox, raw: bytes) -> None:
        """The session's shell starts now, as the daemon's does."""
        body = SESSION_BODY.bind(raw)
        prefix = SESSION_BODY.prefix  # the binding's error through NewInvalidBodyRequestError
        session_id = string_field(body, "sessionId", "CreateSessionRequest", prefix)
        if not session_id:
            raise ApiError(400, prefix + _required("CreateSessionRequest", "SessionId"), INVALID_BODY_CODE)
        if session_id == ENTRYPOINT_SESSION:
            raise ApiError(400, "bad request: provided session ID is reserved and cannot be created/overridden")
        sessions = self.sessions(sandbox)
        if session_id in sessions:
            raise ApiError(409, "conflict: session already exists")
        session = Session(session_id)
        sessions[session_id] = session
        executor = await self._executor()
        env = {**executor.base_env(sandbox.home), **sandbox_env(sandbox)}
        try:
            await self.shells.open(session, sandbox.root, sandbox.home, env)
        except BaseException:
            if sessions.get(session_id) is session:
                del sessions[session_id]
            raise
        if session.deleted and session.gone_reason == "sandbox":  # the sandbox went while the shell started
            raise SandboxGone

    async def delete_session(self, sandbox: Sandbox, session_id: str) -> None:
        if session_id == ENTRYPOINT_SESSION:
            raise ApiError(400, "bad request: can't delete entrypoint session")
        session = self.session(sandbox, session_id)
        await self.shells.delete(session)
        if self.sessions(sandbox).get(session_id) is session:
            del self.sessions(sandbox)[session_id]

    async def session_exec(self, sandbox: Sandbox, session_id: str, raw: bytes) -> dict[str, Any]:
        if session_id == ENTRYPOINT_SESSION:
            raise ApiError(400, "bad request: can't execute command in entrypoint session")
        body = SESSION_EXEC_BODY.bind(raw)
        command_text = string_field(body, "command", "SessionExecuteRequest") or ""
        for flag in ("runAsync", "async", "suppressInputEcho"):
            if body.get(flag) is not None and not isinstance(body.get(flag), bool):
                raise type_error("invalid request body: ", body.get(flag), "SessionExecuteRequest", flag, "bool")
        if not command_text.strip():
            raise ApiError(400, "command cannot be empty")
        session = self.sessions(sandbox).get(session_id)
        if session is None:
            # the service's NotFoundError wrapped by the handler's fmt.Errorf: the default handler's 500
            raise ApiError(500, "failed to execute command: not found: session not found")
        run_async = bool(body.get("runAsync") or body.get("async"))
        command = await self.shells.execute(session, command_text, run_async, bool(body.get("suppressInputEcho")))
        if run_async:
            return {"cmdId": command.id, ACCEPTED: True}  # the daemon answers 202 Accepted
        try:
            await self.shells.wait(session, command)
        except SessionCancelled as gone:
            if str(gone) == "sandbox":
                raise SandboxGone from None
            command.exit_code = 1  # as the daemon marks the command it was waiting on
            command.exit_recorded = True
            raise ApiError(500, "failed to execute command: bad request: session cancelled") from None
        command.exit_recorded = True  # the daemon's Execute read the exit code and kept it
        return {"cmdId": command.id, "exitCode": command.exit_code, COMMAND: command}

    async def send_input(self, sandbox: Sandbox, session_id: str, command_id: str, raw: bytes) -> None:
        if session_id == ENTRYPOINT_SESSION:
            raise ApiError(400, "bad request: can't send input to entrypoint session")
        body = SESSION_INPUT_BODY.bind(raw)
        prefix = SESSION_INPUT_BODY.prefix  # the binding's error through NewInvalidBodyRequestError
        data = string_field(body, "data", "SessionSendInputRequest", prefix)
        if not data:
            raise ApiError(400, prefix + _required("SessionSendInputRequest", "Data"), INVALID_BODY_CODE)
        session = self.session(sandbox, session_id)
        await self.shells.send_input(session, self.command(sandbox, session_id, command_id), data)

    def command(self, sandbox: Sandbox, session_id: str, command_id: str) -> SessionCommand:
        command = self.session(sandbox, session_id).commands.get(command_id)
        if command is None:
            raise ApiError(404, "not found: command not found")
        return command
