"""Language runners: which commands the real server runs for each language, and how it derives the status.

Each runner writes the code to a temp file in a fresh work dir (cwd), restores ``files``, optionally compiles, runs,
then collects ``fetch_files``. Commands go through ``/bin/bash -c`` exactly as the real server's
``create_subprocess_shell`` does, so a missing toolchain answers as it does there (bash's "command not found",
return code 127). ``sql`` has no runner on the real server: the KeyError becomes a SandboxError.
"""

from __future__ import annotations

import base64
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.executor import DeferredWorkdir, ExecutionRequest, ExecutionResult, Executor, Workdir
from emulator.sandbox_fusion.models import (
    CommandRunResult,
    CommandRunStatus,
    RunCodeRequest,
    RunCodeResponse,
    RunStatus,
)

#: A RunCodeResponse or CommandRunResult as it goes on the wire: ``model_dump(mode="json")``'s keys and values.
Payload = dict[str, Any]

BASH = "/bin/bash"

#: Directories searched for toolchains, in order, besides the host PATH (rustup installs under ~/.cargo/bin).
_EXTRA_TOOL_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", os.path.expanduser("~/.cargo/bin"))


@dataclass(frozen=True)
class LanguageSpec:
    """How the real server runs one language: file suffix, optional compile command, run command.

    ``{file}`` is replaced by the absolute path of the code file, ``{name}`` by its stem.
    """

    suffix: str
    run: str
    compile: str | None = None
    file_name: str | None = None  # a fixed file name (Java's Main.java) instead of a temp name
    opening_tag: str | None = None  # put before code that does not start with it (PHP's ``<?php``)


LANGUAGE_SPECS: dict[str, LanguageSpec] = {
    "python": LanguageSpec(".py", "python {file}"),
    "pytest": LanguageSpec(".py", "pytest {file}"),
    "python_gpu": LanguageSpec(".py", "python {file}"),
    "cpp": LanguageSpec(".cpp", "./test", compile="g++ -std=c++17 {file} -o test{cpp_flags}"),
    "cuda": LanguageSpec(".cu", "./test", compile="nvcc {file} -o test"),
    "go": LanguageSpec(".go", "./out", compile="go build -o out {file}"),
    "go_test": LanguageSpec("_test.go", "go test {file}"),
    "java": LanguageSpec(".java", "java -cp .:javatuples-1.2.jar -ea Main",
                         compile="javac -cp .:javatuples-1.2.jar Main.java", file_name="Main.java"),
    "junit": LanguageSpec(".java", "java -cp .:javatuples-1.2.jar -ea Main",
                          compile="javac -cp .:javatuples-1.2.jar *.java", file_name="Main.java"),
    "nodejs": LanguageSpec(".js", "node {file}"),
    "typescript": LanguageSpec(".ts", "tsx {file}"),
    "jest": LanguageSpec(".test.ts", "npm run test"),
    "php": LanguageSpec(".php", "php -f {file}", opening_tag="<?php"),
    "csharp": LanguageSpec(".cs", "dotnet run --project {dir}", file_name="Program.cs"),
    "rust": LanguageSpec(".rs", "./test", compile="rustc {file} -o test"),
    "bash": LanguageSpec(".sh", "/bin/bash {file}"),
    "lua": LanguageSpec(".lua", "lua {file}"),
    "R": LanguageSpec(".R", "Rscript {file}"),
    "perl": LanguageSpec(".pl", "perl {file}"),
    "D_ut": LanguageSpec(".d", "./test", compile="dmd {file} -unittest -of=test"),
    "ruby": LanguageSpec(".rb", "ruby {file}"),
    "scala": LanguageSpec(".scala", "scala Main", compile="scalac {file}"),
    "julia": LanguageSpec(".jl", "julia {file}"),
    "kotlin_script": LanguageSpec(".kts", "kotlin {file}"),
    "verilog": LanguageSpec(".sv", "vvp a.out", compile="iverilog -g2012 {file}"),
    "lean": LanguageSpec(".lean", "lake build"),
    "swift": LanguageSpec(".swift", "./test.out", compile="swiftc {file} -o test.out"),
    "racket": LanguageSpec(".rkt", "racket {file}"),
}  # fmt: skip


def _source(spec: LanguageSpec, code: str) -> str:
    """The file the real server writes: PHP's code stripped of leading blanks and opened with ``<?php`` when it
    is not already (upstream's ``ensure_php_tag_in_string``)."""
    if spec.opening_tag is None:
        return code
    code = code.lstrip()
    return code if code.startswith(spec.opening_tag) else f"{spec.opening_tag}\n{code}"


#: Optional g++ link flags the real server adds when the libraries are present (probed once).
_CPP_OPTIONAL_FLAGS = ("-lcrypto", "-lssl", "-lpthread")


def tool_path(python: str) -> str:
    """PATH given to programs: the runtime Python's bin dir first (so ``python`` is the runtime), then tools."""
    dirs: list[str] = [os.path.dirname(os.path.abspath(python))]
    for entry in os.environ.get("PATH", "").split(os.pathsep) + list(_EXTRA_TOOL_DIRS):
        if entry and os.path.isdir(entry) and entry not in dirs:
            dirs.append(entry)
    return os.pathsep.join(dirs)


def parse_run_status(
    compile_result: Mapping[str, Any] | None, run_result: Mapping[str, Any] | None
) -> tuple[RunStatus, str]:
    """The real server's rule: any Error -> SandboxError(stderr); any TLE -> Failed; any rc != 0 -> Failed.

    Takes wire dicts (:func:`command_payload`, or a model's ``model_dump()``).
    """
    results = [r for r in (compile_result, run_result) if r is not None]
    for result in results:
        if result["status"] == "Error":
            return RunStatus.SandboxError, result["stderr"] or ""
    if any(r["status"] == "TimeLimitExceeded" for r in results):
        return RunStatus.Failed, ""
    if any(r["return_code"] is not None and r["return_code"] != 0 for r in results):
        return RunStatus.Failed, ""
    return RunStatus.Success, ""


def command_payload(result: ExecutionResult, command: str) -> Payload:
    """Executor result -> a CommandRunResult as it goes on the wire (Error carries no timing or return code, as on
    the real server). Built by hand, key order and all: the model's construction and dump cost more than the rest of
    the answer's path in the server, on every request.

    ``command`` is the command line the real server would have run: its ``run_command_bare`` answers a failure to
    start (a ``preexec_fn`` that raised, a fork refused) with the exception in a message naming it."""
    if result.status == "Error":
        stderr = f"exception on running command {command}: {result.stderr} | None"
        return {"status": "Error", "execution_time": None, "return_code": None, "stdout": None, "stderr": stderr}
    return {
        "status": CommandRunStatus(result.status).value,
        "execution_time": result.execution_time,
        "return_code": result.return_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
    }


def to_command_result(result: ExecutionResult, command: str) -> CommandRunResult:
    """Executor result -> wire model (see :func:`command_payload`)."""
    return CommandRunResult.model_validate(command_payload(result, command))


def _names_a_directory(name: str) -> bool:
    """Whether upstream's ``open(os.path.join(dir, name), "wb")``, after it made the parent dir, opens a directory:
    an empty name, one ending in ``/``, ``.`` or ``..`` (``"a/"``, ``"."``, ``"sub/.."``)."""
    return "\0" not in name and os.path.basename(name) in ("", ".", "..")


def restore_files(workdir: Workdir | DeferredWorkdir, files: dict[str, str | None]) -> None:
    """Write the request's base64 files; ``None`` values and IGNORE_THIS_FILE names are skipped, as upstream.

    A name that names a directory raises upstream's IsADirectoryError, its path joined as upstream joins it."""
    for name, content in files.items():
        if not isinstance(content, str) or "IGNORE_THIS_FILE" in name:
            continue
        if _names_a_directory(name):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.path.join(workdir.path, name))
        workdir.write_file(name, base64.b64decode(content))


def collect_files(workdir: Workdir | DeferredWorkdir, names: list[str]) -> dict[str, str]:
    """Base64 of each requested file that exists; missing ones are silently omitted, as upstream."""
    fetched: dict[str, str] = {}
    for name in dict.fromkeys(names):
        data = workdir.read_file(name)
        if data is not None:
            fetched[name] = base64.b64encode(data).decode("ascii")
    return fetched


def _stdin_bytes(stdin: str | None) -> bytes | None:
    """The bytes written to the program's stdin. A text UTF-8 cannot encode (a lone surrogate) gives the program an
    empty, closed stdin: the real server catches the failed write, only logs it, and closes the pipe."""
    if stdin is None:
        return None
    try:
        return stdin.encode()
    except UnicodeEncodeError:
        return b""


class CodeRunner:
    """Runs a validated :class:`RunCodeRequest` for real and builds the response the real server would send."""

    def __init__(self, executor: Executor, python: str, pod_name: str | None = None) -> None:
        self._executor = executor
        self._python = python
        self._pod_name = pod_name
        self._path = tool_path(python)
        self._cpp_flags: str | None = None

    def _cpp_link_flags(self) -> str:
        # The real server probes each flag by compiling a stub; we check the library files, which is instant.
        if self._cpp_flags is None:
            libdirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/lib64"]
            present = []
            for flag in _CPP_OPTIONAL_FLAGS:
                lib = "lib" + flag[2:]
                if any(os.path.exists(os.path.join(d, lib + ext)) for d in libdirs for ext in (".so", ".a")):
                    present.append(flag)
            self._cpp_flags = "".join(" " + f for f in present)
        return self._cpp_flags

    async def run(self, request: RunCodeRequest) -> RunCodeResponse:
        """The answer as a model (see :meth:`run_payload`)."""
        return RunCodeResponse.model_validate(await self.run_payload(request))

    async def run_payload(self, request: RunCodeRequest) -> Payload:
        """The answer as it goes on the wire: what ``RunCodeResponse.model_dump(mode="json")`` would give."""
        try:
            spec = LANGUAGE_SPECS[request.language]
            compile_result, run_result, files = await self._run_spec(spec, request)
        except Exception as exc:  # the real server answers any runner exception as SandboxError, HTTP 200
            # Upstream appends traceback.print_tb(...), which returns None: the literal " None" ends the message.
            return self._payload(RunStatus.SandboxError, f"exception on running code {request.code}: {exc} None")
        status, message = parse_run_status(compile_result, run_result)
        if status != RunStatus.SandboxError:
            message = ""
        return self._payload(status, message, compile_result, run_result, files)

    def _payload(
        self,
        status: RunStatus,
        message: str,
        compile_result: Payload | None = None,
        run_result: Payload | None = None,
        files: dict[str, str] | None = None,
    ) -> Payload:
        return {
            "status": status.value,
            "message": message,
            "compile_result": compile_result,
            "run_result": run_result,
            "executor_pod_name": self._pod_name,
            "files": {} if files is None else files,
        }

    async def _run_spec(
        self, spec: LanguageSpec, request: RunCodeRequest
    ) -> tuple[Payload | None, Payload | None, dict[str, str]]:
        # One program in the dir: the sandbox creates it, its files and removes it (no file-system work here).
        one_shot = spec.compile is None
        workdir: Workdir | DeferredWorkdir = self._executor.deferred_workdir() if one_shot else self._executor.workdir()
        with workdir:
            restore_files(workdir, request.files)
            if spec.file_name is not None:
                code_path = os.path.join(workdir.path, spec.file_name)
            else:
                code_path = workdir.new_script(spec.suffix)
            workdir.write_file(os.path.basename(code_path), _source(spec, request.code).encode())
            fields = {
                "file": code_path,
                "dir": workdir.path,
                "name": os.path.splitext(os.path.basename(code_path))[0],
                "cpp_flags": self._cpp_link_flags() if "{cpp_flags}" in (spec.compile or "") else "",
            }
            env = {"PATH": self._path}
            compile_result: Payload | None = None
            if spec.compile is not None:
                compile_command = spec.compile.format(**fields)
                compile_result = command_payload(
                    await self._executor.run(
                        ExecutionRequest(
                            argv=[BASH, "-c", compile_command],
                            cwd=workdir.path,
                            timeout=request.compile_timeout,
                            stdin=None,
                            memory_limit_mb=request.memory_limit_MB,
                            extra_env=env,
                        )
                    ),
                    compile_command,
                )
            run_result: Payload | None = None
            compiled = compile_result is None or (
                compile_result["status"] == "Finished" and compile_result["return_code"] == 0
            )
            if compiled:
                is_python = spec.run == "python {file}"
                run_command = spec.run.format(**fields)
                argv = [self._python, code_path] if is_python else [BASH, "-c", run_command]
                setup = None
                if isinstance(workdir, DeferredWorkdir):
                    workdir.fetch = list(dict.fromkeys(request.fetch_files))  # each name read and sent once
                    setup = workdir.setup()
                result = await self._executor.run(
                    ExecutionRequest(
                        argv=argv,
                        cwd=workdir.path,
                        timeout=request.run_timeout,
                        stdin=_stdin_bytes(request.stdin),
                        memory_limit_mb=request.memory_limit_MB,
                        extra_env=env,
                        python_script=code_path if is_python else None,
                        setup=setup,
                    )
                )
                if isinstance(workdir, DeferredWorkdir):
                    workdir.complete(result.files, result.workdir_removed)
                run_result = command_payload(result, run_command)
            return compile_result, run_result, collect_files(workdir, request.fetch_files)


__all__ = [
    "LANGUAGE_SPECS",
    "CodeRunner",
    "LanguageSpec",
    "Payload",
    "command_payload",
    "parse_run_status",
    "to_command_result",
    "tool_path",
]
