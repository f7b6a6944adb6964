"""One ASGI app that mounts the emulated services and the ``/_emulator`` control plane.

:class:`Emulator` holds the state every way of serving shares: the executor that runs code, the fault engine and
the journal. Its ``app`` is an ordinary ASGI application.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from emulator.daytona.config import DaytonaConfig
from emulator.daytona.report import SandboxReport, sandbox_report
from emulator.daytona.service import ROUTES as DAYTONA_ROUTES
from emulator.daytona.service import DaytonaService
from emulator.executor import Executor, ExecutorConfig
from emulator.executor.zygote import ZygoteLost
from emulator.faults import (
    Clock,
    FaultEngine,
    FaultPlan,
    FaultPlanError,
    RealClock,
    ReplayMissError,
    load_plan,
    profile_names,
)
from emulator.faults.plan import route_matches
from emulator.faults.replay import ReplayEngine
from emulator.faults.strict_load import DuplicateKeyError, json_loads_unique
from emulator.fd_limit import raise_open_file_limit
from emulator.gate import FaultGate
from emulator.journal import Journal
from emulator.sandbox_fusion.jupyter import JUPYTER_ENGINES, JupyterRunner
from emulator.sandbox_fusion.routes import (
    ROUTE_PING,
    ROUTE_RUN_CODE,
    ROUTE_RUN_JUPYTER,
    SandboxFusionService,
    json_response,
)
from emulator.sandbox_fusion.runners import CodeRunner

PlanSpec = FaultPlan | Mapping[str, Any] | str | Path | None


@dataclass(frozen=True)
class EmulatorConfig:
    """Everything that shapes an emulator; the defaults are the most faithful fast setup."""

    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    #: ``executor_pod_name`` in answers; the real server reads ``MY_POD_NAME`` (null when unset).
    pod_name: str | None = field(default_factory=lambda: os.environ.get("MY_POD_NAME"))
    #: The emulated Daytona (API key, quotas, throttlers, latencies); see ``emulator/daytona/config.py``.
    daytona: DaytonaConfig = field(default_factory=DaytonaConfig)
    #: How ``/run_jupyter`` runs cells: ``ipython`` (IPython's shell as ipykernel sets it up; a runtime Python
    #: without IPython fails as the real driver does without its kernel packages), ``python`` (plain Python, the
    #: last expression's ``repr``), ``auto`` (IPython where the runtime Python has it).
    jupyter_engine: str = "auto"

    def __post_init__(self) -> None:
        if self.jupyter_engine not in JUPYTER_ENGINES:
            raise ValueError(f"jupyter_engine must be one of {', '.join(JUPYTER_ENGINES)}, got {self.jupyter_engine!r}")


class Emulator:
    """The emulated services with their shared state: executor, fault engine, journal.

    ``clock`` is the time every part reads (injected latency, limits, quota windows, sandbox timers, journal
    timestamps); wall time by default. Tests that serve the emulator inside a virtual-time event loop pass a clock
    that reads that loop's time, so the emulator and its clients wait on one timeline.
    """

    def __init__(
        self, config: EmulatorConfig | None = None, *, faults: PlanSpec = None, clock: Clock | None = None
    ) -> None:
        if config is not None and not isinstance(config, EmulatorConfig):
            hint = " (a fault plan or profile goes in faults=...)" if isinstance(config, str | Mapping) else ""
            raise TypeError(f"Emulator's config must be an EmulatorConfig, got {type(config).__name__}{hint}")
        self.config = config or EmulatorConfig()
        raise_open_file_limit()  # every sandbox's processes hold descriptors of this one process (see fd_limit)
        self.clock: Clock = clock if clock is not None else RealClock()
        self.engine = FaultEngine(_to_plan(faults), clock=self.clock)
        self.journal = Journal(self.clock)
        self.gate = FaultGate(self.engine, self.journal)
        self._executor: Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._service: SandboxFusionService | None = None
        self._service_executor: Executor | None = None
        self.daytona = DaytonaService(
            self.config.daytona, self.gate, self.executor, self.clock.monotonic, self.config.executor.python
        )
        #: The FastAPI application with every route; ``app`` is what to serve.
        self.fastapi = self._build_app()
        self.app = HotRoutes(
            self.fastapi,
            {("POST", "/run_code"): self._run_code, ("POST", "/run_jupyter"): self._run_jupyter},
            _server_error,
        )

    # ------------------------------------------------------------------ state

    @property
    def python(self) -> str:
        return self.config.executor.python

    @property
    def replaying(self) -> bool:
        """Whether a decision log is replayed (a ``ReplayEngine`` in place of the fault engine): no plan then."""
        return isinstance(self.engine, ReplayEngine)

    def set_faults(self, faults: PlanSpec) -> FaultPlan:
        """Replace the fault plan. Attempts, arrival ordinals, the decision log, plan time and the state of the limits
        the new plan keeps unchanged go on (``reset`` clears them): a plan changed in the middle of a run goes on from
        where the run is, as the chaos searches that add a rule between calls need. During a replay there is no plan
        to replace: ``RuntimeError``."""
        if self.replaying:
            raise RuntimeError(_REPLAYING)
        plan = _to_plan(faults)
        self.engine.set_plan(plan)
        return plan

    def use_engine(self, engine: FaultEngine | ReplayEngine) -> None:
        """Decide with ``engine`` from the next request on: a ``ReplayEngine`` (built on this emulator's ``clock``) to
        replay a decision log, or a ``FaultEngine`` to go back to a plan. The gate holds the engine too; both are
        pointed at it here."""
        if not isinstance(engine, FaultEngine | ReplayEngine):
            raise TypeError(f"use_engine takes a FaultEngine or a ReplayEngine, got {type(engine).__name__}")
        self.engine = cast(FaultEngine, engine)  # a ReplayEngine has the decide/release/clock/log surface used
        self.gate.engine = cast(FaultEngine, engine)

    def reset(self) -> None:
        """Forget requests and counters; keep the plan. Called between tests."""
        self.engine.reset()
        self.journal.clear()
        self.daytona.reset()

    def daytona_report(self) -> SandboxReport:
        """Sandboxes seen by this emulator's journal: leaked ones, their labels, the most alive at once."""
        return sandbox_report(self.journal.entries("daytona.sandbox"))

    async def executor(self) -> Executor:
        """The executor bound to the running event loop, started on first use (ASGI transports skip lifespan)."""
        loop = asyncio.get_running_loop()
        if self._executor is not None and self._loop is loop:
            return self._executor
        # One lock per event loop, created before any await, so concurrent first requests start one executor.
        if self._start_lock is None or self._lock_loop is not loop:
            self._start_lock, self._lock_loop = asyncio.Lock(), loop
        async with self._start_lock:
            if self._executor is not None and self._loop is loop:
                return self._executor
            old = self._executor
            if old is not None:
                # An executor bound to a loop that is gone raises here; its processes were already reaped.
                with contextlib.suppress(RuntimeError):
                    await old.aclose()
            executor = Executor(self.config.executor)
            # Descriptors or processes out: the first run tries again, and its runner answers as the service
            # answers a failed spawn (Sandbox Fusion's SandboxError), not a traceback.
            with contextlib.suppress(OSError, ZygoteLost, asyncio.TimeoutError):
                await executor.start()
            self._executor, self._loop = executor, loop
            return executor

    async def aclose(self) -> None:
        self.gate.served()
        self.daytona.close()
        if self._executor is not None and self._loop is asyncio.get_running_loop():
            await self._executor.aclose()
        self._executor = None
        self._loop = None

    # ------------------------------------------------------------------ HTTP

    async def _sandbox_fusion(self) -> SandboxFusionService:
        executor = await self.executor()
        if self._service is None or self._service_executor is not executor:
            pod = self.config.pod_name
            self._service = SandboxFusionService(
                CodeRunner(executor, self.python, pod),
                JupyterRunner(executor, self.python, pod, self.config.jupyter_engine),
            )
            self._service_executor = executor
        return self._service

    async def _run_code(self, request: Request) -> Response:
        ctype = request.headers.get("content-type")

        async def answer(body: bytes) -> tuple[Response, dict[str, Any]]:
            return await (await self._sandbox_fusion()).run_code(body, ctype)

        return await self.gate.handle(ROUTE_RUN_CODE, request, answer, ready_in_latency=True)

    async def _run_jupyter(self, request: Request) -> Response:
        ctype = request.headers.get("content-type")

        async def answer(body: bytes) -> tuple[Response, dict[str, Any]]:
            return await (await self._sandbox_fusion()).run_jupyter(body, ctype)

        return await self.gate.handle(ROUTE_RUN_JUPYTER, request, answer)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="sandbox-emulator", docs_url="/docs", redoc_url="/redoc")
        gate = self.gate

        async def ping(request: Request) -> Response:
            async def answer(_: bytes) -> tuple[Response, dict[str, Any]]:
                return SandboxFusionService.ping(), {}

            return await gate.handle(ROUTE_PING, request, answer)

        async def index(request: Request) -> Response:
            # The real server's root is a redirect page to its docs.
            return HTMLResponse('<meta http-equiv="refresh" content="0; url=./SandboxFusion">')

        async def unhandled(request: Request, exc: Exception) -> Response:
            return _server_error(exc)

        app.add_exception_handler(Exception, unhandled)
        # Served by HotRoutes in front of FastAPI; registered here too so FastAPI answers 405 for other methods.
        app.router.add_route("/run_code", self._run_code, methods=["POST"])
        app.router.add_route("/run_jupyter", self._run_jupyter, methods=["POST"])
        app.router.routes.append(GetOnlyRoute("/v1/ping", ping))
        app.router.routes.append(GetOnlyRoute("/", index))
        self.daytona.mount(app)
        self._add_control_plane(app)
        return app

    def _add_control_plane(self, app: FastAPI) -> None:
        """``/_emulator``: health, reset, fault plan, journal, stats, decision log."""

        async def health(request: Request) -> Response:
            return json_response({"status": "ok", "python": self.python, "mode": self.config.executor.python_mode})

        async def reset(request: Request) -> Response:
            self.reset()
            return json_response({"reset": True})

        async def get_faults(request: Request) -> Response:
            if self.replaying:
                return json_response({"error": _REPLAYING}, status=409)
            return json_response(self.engine.plan.to_dict())

        async def put_faults(request: Request) -> Response:
            if self.replaying:
                return json_response({"error": _REPLAYING}, status=409)
            raw = await request.body()
            try:
                data = json_loads_unique(raw) if raw.strip() else None
            except json.JSONDecodeError as exc:
                return json_response({"error": f"fault plan is not valid JSON: {exc}"}, status=400)
            except DuplicateKeyError as exc:  # json.loads would keep the last of the two silently
                return json_response({"error": f"fault plan has a {exc}"}, status=400)
            spec: PlanSpec = data["profile"] if isinstance(data, dict) and set(data) == {"profile"} else data
            if spec is None:  # an empty body, null: more likely a mistake than a wish to drop every fault
                return json_response(
                    {
                        "error": "no fault plan in the request (an empty body, or null); {} is a plan without faults, "
                        '{"profile": "calm"} the calm profile'
                    },
                    status=400,
                )
            if isinstance(spec, str) and spec not in profile_names():  # a name, never a path on this machine
                names = ", ".join(profile_names())
                return json_response({"error": f"unknown fault profile {spec!r}; profiles: {names}"}, status=400)
            try:
                plan = self.set_faults(spec)
            except (FaultPlanError, ValueError, TypeError, OSError) as exc:
                return json_response({"error": str(exc)}, status=400)
            return json_response(plan.to_dict())

        async def journal(request: Request) -> Response:
            route = request.query_params.get("route")
            raw_since = request.query_params.get("since", "0")
            if not (raw_since.isascii() and raw_since.isdigit()):
                return json_response({"error": f"since must be a sequence number (0 or more), got {raw_since!r}"}, 400)
            entries = [e.to_dict() for e in self.journal.entries(route, int(raw_since))]
            return json_response(entries)

        async def stats(request: Request) -> Response:
            return json_response(self.journal.stats())

        async def decisions(request: Request) -> Response:
            return json_response(self.engine.log.records)

        app.router.add_route("/_emulator/health", health, methods=["GET"])
        app.router.add_route("/_emulator/reset", reset, methods=["POST"])
        app.router.add_route("/_emulator/faults", get_faults, methods=["GET"])
        app.router.add_route("/_emulator/faults", put_faults, methods=["PUT", "POST"])
        app.router.add_route("/_emulator/journal", journal, methods=["GET"])
        app.router.add_route("/_emulator/stats", stats, methods=["GET"])
        app.router.add_route("/_emulator/decisions", decisions, methods=["GET"])


_REPLAYING = "the emulator replays a decision log: its faults come from the log, there is no fault plan"


class GetOnlyRoute(Route):
    """A GET route without the HEAD that Starlette adds: the real Sandbox Fusion declares its GET routes with FastAPI's
    ``@app.get``, which adds none, so ``HEAD`` is a 405 there and a 405's ``allow`` is ``GET``."""

    def __init__(self, path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        super().__init__(path, endpoint, methods=["GET"])
        self.methods = {"GET"}


def _server_error(exc: Exception) -> Response:
    """The real server's global handler: HTTP 500 with the message and the formatted traceback, split at its newlines
    (``traceback.format_exc().split('\\n')``: one line per item, an empty one last)."""
    if isinstance(exc, ReplayMissError):  # the emulator's own refusal, not a server bug: the message is all of it
        return json_response({"detail": str(exc)}, status=500)
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).split("\n")
    return json_response({"detail": str(exc), "traceback": lines}, status=500)


HotHandler = Callable[[Request], Awaitable[Response]]


class HotRoutes:
    """An ASGI front that sends the hot routes (``POST /run_code``, ``/run_jupyter``) straight to their handlers.

    Under load the framework's middleware stack was about a sixth of the server's CPU per request; these routes need
    none of it. Everything else, including other methods on the same paths (405), goes to the FastAPI app.
    """

    def __init__(
        self, app: FastAPI, routes: dict[tuple[str, str], HotHandler], on_error: Callable[[Exception], Response]
    ) -> None:
        self.app = app
        self.routes = routes
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self.routes.get((scope["method"], scope["path"]))
            if handler is not None:
                request = Request(scope, receive)
                try:
                    response = await handler(request)
                except Exception as exc:
                    await self.on_error(exc)(scope, receive, send)
                    raise
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: Every route name the gate journals: what a plan's rules and limits can match.
ROUTE_NAMES: tuple[str, ...] = (ROUTE_RUN_CODE, ROUTE_RUN_JUPYTER, ROUTE_PING, *DAYTONA_ROUTES)


def _to_plan(spec: PlanSpec) -> FaultPlan:
    plan = spec if isinstance(spec, FaultPlan) else load_plan(spec)
    _check_routes(plan)
    return plan


def _check_routes(plan: FaultPlan) -> None:
    """Refuse a route glob that matches none of this emulator's routes: a typo (``run_code`` for
    ``sandbox_fusion.run_code``) would otherwise make its rule or limit a silent no-op; so would a ``null_stdout``
    rule on routes whose answers have no ``run_result``."""
    for kind, items in (("rules", plan.rules), ("limits", plan.limits)):
        for index, item in enumerate(items):
            for glob in item.route.split("|"):
                if not any(fnmatchcase(route, glob) for route in ROUTE_NAMES):
                    families = "sandbox_fusion.run_code, sandbox_fusion.run_jupyter, sandbox_fusion.ping, daytona.*"
                    raise FaultPlanError(f"{kind}[{index}].route", f"{glob!r} matches no route (routes: {families})")
    for index, rule in enumerate(plan.rules):
        fault = rule.fault
        if (
            fault is not None
            and fault.kind == "null_stdout"
            and not any(route_matches(route, rule.route) for route in ROUTES_WITH_RUN_RESULT)
        ):
            raise FaultPlanError(
                f"rules[{index}].fault",
                f"null_stdout empties run_result.stdout, which only {', '.join(ROUTES_WITH_RUN_RESULT)} answers carry; "
                f"{rule.route!r} matches none of them",
            )


#: The routes whose answers have a ``run_result`` for a ``null_stdout`` fault to change.
ROUTES_WITH_RUN_RESULT: tuple[str, ...] = (ROUTE_RUN_CODE,)
