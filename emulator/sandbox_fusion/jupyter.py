"""``/run_jupyter``: cells run in order in one kernel per request.

The answer has the recorded shape: a ``driver`` command result, one entry per cell (stdout, stderr, display,
error) and fetched files. As on the real server, a cell that raises still gives top-level ``Success``; a driver
that does not finish within ``total_timeout`` plus ten seconds gives ``Failed`` with no cells. ``cell_timeout`` and
``memory_limit_MB`` are taken and ignored, as upstream's driver and runner do.

The kernel is IPython's shell as ipykernel sets it up, when the runtime Python has IPython (engine ``auto`` or
``ipython``), or plain Python (``python``, or ``auto`` without IPython); see ``jupyter_driver.py``.

The work dir (the kernel's cwd) is laid out as upstream's: the request's files, the driver as ``main.py`` (over a
file of that name), its config in ``tmp/sandbox/configs/input.json`` and its results in ``output.json`` there, which
is fetched for the driver and left out of the answer's files.
"""

from __future__ import annotations

import errno
import json
import os
from importlib import resources

from emulator.executor import ExecutionRequest, Executor
from emulator.sandbox_fusion.jupyter_driver import ENGINE_VARIABLE, INPUT_FILE, OUTPUT_FILE
from emulator.sandbox_fusion.models import (
    CellRunResult,
    CommandRunStatus,
    RunJupyterRequest,
    RunJupyterResponse,
    RunStatus,
)
from emulator.sandbox_fusion.runners import collect_files, restore_files, to_command_result, tool_path

#: Upstream runs the driver with ``run_timeout=total_timeout + 10``.
_DRIVER_GRACE_S = 10.0
#: How cells run: IPython's shell as ipykernel drives it, plain Python, or IPython where the runtime has it.
JUPYTER_ENGINES = ("auto", "ipython", "python")
_DRIVER_SOURCE = resources.files("emulator.sandbox_fusion").joinpath("jupyter_driver.py").read_bytes()
#: Upstream's name for its driver, in the work dir.
DRIVER_FILE = "main.py"


def _config_dir_error(path: str, names: list[str]) -> OSError | None:
    """What upstream's ``os.makedirs`` of the config dir (no ``exist_ok``) raises after the request's files were
    written: the dir exists when a file was written in it, and a file where one of its parents goes is no dir."""
    parts = os.path.dirname(INPUT_FILE).split("/")
    written = {os.path.normpath(name) for name in names if "IGNORE_THIS_FILE" not in name}
    for depth in range(1, len(parts) + 1):
        here = "/".join(parts[:depth])
        if here in written and depth < len(parts):
            return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.path.join(path, here, parts[depth]))
    config_dir = "/".join(parts)
    if any(name == config_dir or name.startswith(config_dir + "/") for name in written):
        return FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.path.join(path, config_dir))
    return None


class JupyterRunner:
    """Runs a :class:`RunJupyterRequest` through the executor with the kernel-like driver."""

    def __init__(self, executor: Executor, python: str, pod_name: str | None = None, engine: str = "auto") -> None:
        if engine not in JUPYTER_ENGINES:
            raise ValueError(f"jupyter engine must be one of {', '.join(JUPYTER_ENGINES)}, got {engine!r}")
        self._engine = engine
        self._executor = executor
        self._python = python
        self._pod_name = pod_name
        self._path = tool_path(python)

    async def run(self, request: RunJupyterRequest) -> RunJupyterResponse:
        response = RunJupyterResponse(status=RunStatus.Success, message="", executor_pod_name=self._pod_name)
        code_repr = "\n".join(request.cells)[:100]
        try:
            # One program in the dir: the sandbox creates it, its files and removes it.
            with self._executor.deferred_workdir() as workdir:
                restore_files(workdir, dict(request.files))
                workdir.write_file(DRIVER_FILE, _DRIVER_SOURCE)
                script = os.path.join(workdir.path, DRIVER_FILE)
                failed = _config_dir_error(workdir.path, list(request.files))
                if failed is not None:
                    raise failed
                config = {
                    "kernel": request.kernel,
                    "cells": request.cells,
                    "cell_timeout": float(request.cell_timeout),
                    "total_timeout": float(request.total_timeout),
                }
                workdir.write_file(INPUT_FILE, json.dumps(config, indent=2).encode())  # as upstream writes it
                workdir.fetch = [OUTPUT_FILE, *request.fetch_files]
                result = await self._executor.run(
                    ExecutionRequest(
                        argv=[self._python, script],
                        cwd=workdir.path,
                        # As upstream: the driver gets ten seconds more than total_timeout, and no memory limit
                        # (the request's memory_limit_MB never reaches its command).
                        timeout=request.total_timeout + _DRIVER_GRACE_S,
                        extra_env={"PATH": self._path, ENGINE_VARIABLE: self._engine},
                        python_script=script,
                        setup=workdir.setup(),
                    )
                )
                workdir.complete(result.files, result.workdir_removed)
                driver = to_command_result(result, "python main.py")  # upstream's driver command
                response.driver = driver
                if driver.status != CommandRunStatus.Finished or driver.return_code != 0:
                    response.status = RunStatus.Failed
                    return response
                raw = workdir.read_file(OUTPUT_FILE)
                cells = json.loads(raw)["cells"] if raw else []
                response.cells = [CellRunResult.model_validate(c) for c in cells]
                files = collect_files(workdir, request.fetch_files)
                files.pop(OUTPUT_FILE, None)  # upstream takes its output out of the fetched files
                response.files = files
        except Exception as exc:  # as upstream: any exception is a SandboxError answer, HTTP 200
            response.status = RunStatus.SandboxError
            response.message = f"exception on running jupyter {code_repr}: {exc} None"
        return response
