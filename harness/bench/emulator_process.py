"""The emulator as its own process for benchmarks: ``sandbox-emulator serve --port 0``, stopped on exit or Ctrl-C.

A separate process, so the load generator's event loop and the emulator's do not share one interpreter (and one
core's worth of GIL): the figures are then the emulator's, not the client's.

Its emulated Daytona applies no tier's rate limits by default (``serve --daytona-tier none``): a benchmark measures
the emulator, and ``serve``'s default (Daytona's Tier 1, 300 sandbox creations a minute) would refuse any pool above
300. A fault plan's limits still apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, Any

from harness.bench.emulator_time import ROUTES

#: The bearer key the benchmark's emulator accepts on its Daytona API.
DAYTONA_KEY = "bench-key"
#: Routes that execute code: where ``fixed_latency_s`` is injected.
EXECUTION_ROUTES = tuple(ROUTES.values())


def fixed_latency_plan(seconds: float) -> dict[str, Any]:
    """A fault plan that adds exactly ``seconds`` to every execution and injects nothing else."""
    return {"rules": [{"id": "bench-fixed", "route": list(EXECUTION_ROUTES), "latency": {"fixed": seconds}}]}


class EmulatorStartError(RuntimeError):
    """The emulator process ended before it served (its status says how)."""


@dataclass
class EmulatorProcess:
    """``with EmulatorProcess("fast") as emu: emu.base_url`` (``http://127.0.0.1:PORT``)."""

    python_mode: str = "fast"
    fault_plan: Mapping[str, Any] | None = None
    #: More ``serve`` options (``--python PATH``, ``--temp-root DIR``).
    serve_args: Sequence[str] = ()
    #: The rate limits of its emulated Daytona (``serve --daytona-tier``): none by default (see the module's
    #: docstring), or a tier's, "1" to "4".
    daytona_tier: str = "none"
    base_url: str = ""
    _proc: subprocess.Popen[str] | None = field(default=None, repr=False)
    _plan_file: str | None = field(default=None, repr=False)
    _errors: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start ``serve`` and return once it listens; :class:`EmulatorStartError` (with what it said) if it ends."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--python-mode", self.python_mode]
        cmd += ["--daytona-api-key", DAYTONA_KEY, "--daytona-tier", self.daytona_tier, *self.serve_args]
        if self.fault_plan is not None:
            handle, self._plan_file = tempfile.mkstemp(prefix="bench-plan-", suffix=".json")
            with os.fdopen(handle, "w") as out:
                json.dump(dict(self.fault_plan), out)
            cmd += ["--faults", self._plan_file]
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        # Its errors go to a file, not a pipe: nothing has to drain it while the benchmark runs.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop)
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._errors, text=True, env=env, start_new_session=True
        )
        assert self._proc.stdout is not None
        # serve prints its URLs once the socket is bound; the control-plane line is the last one we need.
        for line in self._proc.stdout:
            if line.startswith("Sandbox Fusion"):
                self.base_url = line.split()[2].removesuffix("/run_code")
            if line.startswith("Control plane"):
                break
        if not self.base_url or self._proc.poll() is not None:
            code = self._proc.wait()
            self._errors.seek(0)
            said = [x.strip() for x in self._errors.read().decode(errors="replace").splitlines() if x.strip()]
            reason = f": {said[-1]}" if said else ""
            raise EmulatorStartError(f"the emulator process exited with status {code} before serving{reason}")

    def stop(self) -> None:
        """Terminate (then kill) the server and its process group: the warm interpreter and its programs too."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc.pid, "SIGTERM")
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, "SIGKILL")
                    proc.wait(timeout=15)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._errors is not None:
            self._errors.close()
            self._errors = None
        if self._plan_file is not None:
            os.unlink(self._plan_file)
            self._plan_file = None

    def __enter__(self) -> EmulatorProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(pid: int, name: str) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, getattr(signal, name))
