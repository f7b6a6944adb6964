"""HTTP and WebSocket surface of the emulated Daytona, mounted on the emulator's app.

Control plane under ``""`` and ``/api`` (``/sandbox...``), toolbox under ``/toolbox/{sandboxId}/...`` (the
``toolboxProxyUrl`` every Sandbox carries). Every route goes through the fault gate with a ``daytona.*`` route name
(see :data:`ROUTES`); handlers then check the bearer key, apply the throttlers (control plane only, as the real
API), and annotate the journal entry with the sandbox id and labels. With the ``failed-auth`` throttler configured,
a blocked client is refused before its key is checked, and a wrong key counts against it, on the control plane and
through the toolbox proxy's check alike (see :mod:`emulator.daytona.failed_auth`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Container
from typing import Any, NoReturn, TypeVar

from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Router
from starlette.types import Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from emulator.executor import Executor, start_gate
from emulator.faults.bodies import now_iso
from emulator.gate import WS_TIMEOUT_CLOSE, FaultGate, current_entry
from emulator.journal import retry_after_detail

from . import file_routes, search, session_shell
from .config import AUTHENTICATED, FAILED_AUTH, SANDBOX_CREATE, SANDBOX_LIFECYCLE, DaytonaConfig
from .errors import ApiError, FileError, api_error, daemon_error, json_response, proxy_error
from .failed_auth import FailedAuth, ProxyTokenCache, client_ip
from .go_fields import string_field
from .go_json import go_text
from .interpreter import (
    DRIVER,
    Context,
    ContextClosed,
    Interpreters,
    InterpreterSettings,
    InterpreterTimeout,
    WorkerStartError,
    driver_setup,
    hand_over,
)
from .interpreter_client import ClientChannel
from .interpreter_request import CLOSE_POLICY_VIOLATION, Refusal, close_reason, parse_execute_request
from .intervals import js_number
from .report import code_digest
from .sandboxes import Sandbox, SandboxStore
from .session_logs import stream_log
from .sessions import SessionCommand, SessionShells, ShellStart
from .throttle import Throttlers, Verdict
from .toolbox import (
    ACCEPTED,
    COMMAND,
    CONTEXT_BODY,
    CommandTimeout,
    SandboxGone,
    Toolbox,
    chdir_refusal,
    process_dir,
    sandbox_env,
)

_log = logging.getLogger(__name__)

ExecutorGetter = Callable[[], Awaitable[Executor]]
Endpoint = Callable[[Request], Awaitable[Response]]

#: Gate route names of the control plane: (method, path, route name, throttlers). As the API's controller declares
#: them: creation and the lifecycle routes skip ``authenticated`` (``@SkipThrottle({authenticated: true})``) and
#: count against their own throttler alone.
CONTROL_ROUTES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("POST", "/sandbox", "daytona.sandbox.create", (SANDBOX_CREATE,)),
    ("GET", "/sandbox", "daytona.sandbox.list", (AUTHENTICATED,)),
    ("GET", "/sandbox/{sid}", "daytona.sandbox.get", (AUTHENTICATED,)),
    ("DELETE", "/sandbox/{sid}", "daytona.sandbox.delete", (SANDBOX_LIFECYCLE,)),
    ("POST", "/sandbox/{sid}/start", "daytona.sandbox.start", (SANDBOX_LIFECYCLE,)),
    ("POST", "/sandbox/{sid}/stop", "daytona.sandbox.stop", (SANDBOX_LIFECYCLE,)),
    ("GET", "/sandbox/{sid}/toolbox-proxy-url", "daytona.sandbox.toolbox_proxy_url", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/pause", "daytona.sandbox.pause", (SANDBOX_LIFECYCLE,)),
    ("POST", "/sandbox/{sid}/recover", "daytona.sandbox.recover", (SANDBOX_LIFECYCLE,)),
    ("PUT", "/sandbox/{sid}/labels", "daytona.sandbox.labels", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/public/{public}", "daytona.sandbox.public", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/last-activity", "daytona.sandbox.last_activity", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/autostop/{interval}", "daytona.sandbox.autostop", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/autodelete/{interval}", "daytona.sandbox.autodelete", (AUTHENTICATED,)),
    ("POST", "/sandbox/{sid}/autoarchive/{interval}", "daytona.sandbox.autoarchive", (AUTHENTICATED,)),
)

#: Gate route names of the toolbox, relative to ``/toolbox/{sid}``.
TOOLBOX_ROUTES: tuple[tuple[str, str, str], ...] = (
    ("POST", "/process/execute", "daytona.toolbox.execute"),
    ("POST", "/process/code-run", "daytona.toolbox.code_run"),
    ("POST", "/process/session", "daytona.toolbox.session.create"),
    ("GET", "/process/session", "daytona.toolbox.session.list"),
    ("GET", "/process/session/{session}", "daytona.toolbox.session.get"),
    ("DELETE", "/process/session/{session}", "daytona.toolbox.session.delete"),
    ("POST", "/process/session/{session}/exec", "daytona.toolbox.session.exec"),
    ("GET", "/process/session/{session}/command/{command}", "daytona.toolbox.session.command"),
    ("GET", "/process/session/{session}/command/{command}/logs", "daytona.toolbox.session.logs"),
    ("POST", "/process/session/{session}/command/{command}/input", "daytona.toolbox.session.input"),
    ("POST", "/process/interpreter/context", "daytona.interpreter.context.create"),
    ("GET", "/process/interpreter/context", "daytona.interpreter.context.list"),
    ("DELETE", "/process/interpreter/context/{context}", "daytona.interpreter.context.delete"),
    ("POST", "/files/bulk-upload", "daytona.toolbox.files.upload"),
    ("POST", "/files/bulk-download", "daytona.toolbox.files.download"),
    ("GET", "/files/download", "daytona.toolbox.files.download_one"),
    ("GET", "/files", "daytona.toolbox.files.list"),
    ("GET", "/files/", "daytona.toolbox.files.list"),
    ("DELETE", "/files", "daytona.toolbox.files.delete"),
    ("DELETE", "/files/", "daytona.toolbox.files.delete"),
    ("GET", "/files/info", "daytona.toolbox.files.info"),
    ("POST", "/files/folder", "daytona.toolbox.files.folder"),
    ("GET", "/files/find", "daytona.toolbox.files.find"),
    ("GET", "/files/search", "daytona.toolbox.files.search"),
    ("POST", "/files/replace", "daytona.toolbox.files.replace"),
    ("POST", "/files/move", "daytona.toolbox.files.move"),
    ("POST", "/files/permissions", "daytona.toolbox.files.permissions"),
    ("GET", "/user-home-dir", "daytona.toolbox.info"),
    ("GET", "/work-dir", "daytona.toolbox.info"),
    ("GET", "/version", "daytona.toolbox.info"),
)

ROUTE_INTERPRETER = "daytona.interpreter.execute"

#: Gate route names of what the emulator does not serve: a path under one of :data:`API_ROOTS` on the control plane,
#: any path under ``/toolbox/{sandboxId}`` that no toolbox route serves. Both answer 501 in their envelope: a 404
#: would reach the SDK as ``DaytonaNotFoundError``, which reads as "sandbox not found".
ROUTE_NOT_EMULATED = "daytona.not_emulated"
ROUTE_TOOLBOX_NOT_EMULATED = "daytona.toolbox.not_emulated"

#: The first segments of the paths the SDK's API client (0.226.1) calls.
API_ROOTS: tuple[str, ...] = (
    "api-keys",
    "audit",
    "config",
    "docker-registry",
    "health",
    "jobs",
    "object-storage",
    "organizations",
    "preview",
    "regions",
    "runners",
    "sandbox",
    "secret",
    "shared-regions",
    "snapshots",
    "users",
    "volumes",
    "warm-pools",
    "webhooks",
)

#: ``GET`` routes the API declares before ``/sandbox/{sandboxIdOrName}``, so that they never name a sandbox.
FIXED_SANDBOX_PATHS: tuple[str, ...] = ("/sandbox/paginated", "/sandbox/for-runner")

_ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

#: Every gate route name this service uses (for docs and fault plans).
ROUTES: tuple[str, ...] = tuple(
    dict.fromkeys(
        [r[2] for r in CONTROL_ROUTES]
        + [r[2] for r in TOOLBOX_ROUTES]
        + [ROUTE_INTERPRETER, ROUTE_NOT_EMULATED, ROUTE_TOOLBOX_NOT_EMULATED]
    )
)


def _json_body(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def _note(sandbox: Sandbox) -> None:
    entry = current_entry()
    if entry is not None:
        entry.detail["sandbox_id"] = sandbox.id
        entry.detail["labels"] = dict(sandbox.labels)


class DaytonaService:
    """State and routes of the emulated Daytona for one emulator."""

    def __init__(
        self,
        config: DaytonaConfig,
        gate: FaultGate,
        executor: ExecutorGetter,
        now: Callable[[], float],
        python: str,
    ) -> None:
        frames, wait = config.interpreter_client_frames, config.interpreter_slow_client_wait
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise ValueError(f"interpreter_client_frames must be a whole number >= 1, not {frames!r}")
        if isinstance(wait, bool) or not (isinstance(wait, (int, float)) and 0 <= wait < math.inf):  # NaN too
            raise ValueError(f"interpreter_slow_client_wait must be a number of seconds >= 0, not {wait!r}")
        self.config = config
        self.gate = gate
        self._executor = executor
        self.python = python
        self.store = SandboxStore(config, now)
        self.throttlers = Throttlers(config.throttlers, now)
        self.failed_auth = FailedAuth(next((s for s in config.throttlers if s.name == FAILED_AUTH), None), now)
        self.proxy_tokens = ProxyTokenCache(now)
        self._listing = None if config.listing_seed is None else random.Random(config.listing_seed)
        uid_base = config.interpreter_uid_base if os.geteuid() == 0 else None
        settings = InterpreterSettings(python, uid_base, config.interpreter_uid_count, grace=config.interpreter_grace)
        self.interpreters = Interpreters(settings)
        interpreters = self.interpreters
        start = ShellStart(
            python, DRIVER, interpreters.limits, interpreters.lease, interpreters.release, driver_setup, hand_over
        )
        shells = SessionShells(start, config.session_termination_grace, config.session_log_limit)
        self.toolbox = Toolbox(executor, config.default_command_timeout, shells)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.store.on_destroy.append(self._halt)

    # ------------------------------------------------------------------ lifecycle

    def _halt(self, sandbox: Sandbox) -> None:
        """Stop a sandbox's processes (stop or delete); safe from any thread."""
        loop = self._loop
        if loop is not None and loop.is_running() and not _in_loop(loop):
            loop.call_soon_threadsafe(self._halt_now, sandbox.id)
        else:
            self._halt_now(sandbox.id)

    def _halt_now(self, sandbox_id: str) -> None:
        self.interpreters.drop_sandbox(sandbox_id)
        self.toolbox.drop_sandbox(sandbox_id)

    def reset(self) -> None:
        """Destroy every sandbox, restart the throttler windows and the listings' order (between tests)."""
        self.store.clear()
        self.throttlers.reset()
        self.failed_auth.reset()
        self.proxy_tokens.reset()
        if self.config.listing_seed is not None:
            self.reseed_listings(self.config.listing_seed)

    def reseed_listings(self, seed: int) -> None:
        """Start the shuffled order of the listings afresh from ``seed`` (the pytest plugin gives each test its own,
        so a test's orders do not depend on the tests before it); nothing changes where listings keep creation
        order (``listing_seed=None``)."""
        if self._listing is not None:
            self._listing.seed(seed)

    def close(self) -> None:
        self.store.close()

    async def _ensure_home(self, sandbox: Sandbox) -> None:
        """Give the sandbox a home that the current executor hands to each execution's uid."""
        executor = await self._executor()
        if sandbox.home_owner is not executor:
            _adopt_home(sandbox, executor)

    # ------------------------------------------------------------------ helpers

    def _authorized(self, headers: Any) -> bool:
        return _bearer_token(headers) == self.config.api_key

    def _proxy_refusal(self, headers: Any, client: Any, sandbox_id: str) -> str | None:
        """Why the toolbox proxy refuses a request's bearer key (its 401's message), or None when it lets it through.
        With the failed-auth throttler on, the proxy's own check: an answer it keeps for the (sandbox, key), else
        the API's, which counts a wrong key against the client's IP and refuses a blocked client whatever its key
        (see :mod:`emulator.daytona.failed_auth`)."""
        token = _bearer_token(headers)
        if token is None:  # the proxy tries its other ways (no bearer key there: none emulated) and asks no API
            return PROXY_MISSING_AUTH
        if not self.failed_auth.enabled:
            return None if token == self.config.api_key else PROXY_INVALID_BEARER
        known = self.proxy_tokens.get(sandbox_id, token)
        if known is not None:
            return None if known else PROXY_INVALID_BEARER
        ip = client_ip(headers, client)
        if self.failed_auth.blocked(ip) is not None:  # the API's 429: no answer to keep, the proxy refuses
            return PROXY_CHECK_REFUSED
        if token == self.config.api_key:
            self.proxy_tokens.put(sandbox_id, token, True)
            return None
        refused, _ = self.failed_auth.failed(ip)
        if refused:  # the 429 of the failure that starts a block is no answer to keep
            return PROXY_CHECK_REFUSED
        self.proxy_tokens.put(sandbox_id, token, False)
        return PROXY_INVALID_BEARER

    def _failed_auth_refusal(self, path: str, headers: list[tuple[str, str]]) -> Response:
        """The 429 of the failed-auth throttler, as the API's exception filter answers its ``ThrottlerException``."""
        entry = current_entry()
        if entry is not None:
            entry.detail["throttler"] = FAILED_AUTH
            entry.detail["retry_after"] = retry_after_detail(headers)
        return api_error(429, "ThrottlerException: Too Many Requests", path, headers=dict(headers))

    @staticmethod
    def _toolbox_url(request: Request) -> str:
        return f"{request.url.scheme}://{request.url.netloc}/toolbox"

    def _sandbox_json(self, sandbox: Sandbox, request: Request, *, list_item: bool = False) -> dict[str, Any]:
        return sandbox.to_json(self._toolbox_url(request), list_item=list_item)

    # ------------------------------------------------------------------ mounting

    def mount(self, app: Any) -> None:
        router: Router = app.router
        unserved: list[Endpoint] = []
        for prefix in ("", "/api"):
            not_emulated = _keep_slash_redirects(
                self._control_endpoint(ROUTE_NOT_EMULATED, (AUTHENTICATED,)), router, unserved
            )
            for path in FIXED_SANDBOX_PATHS:
                router.add_route(prefix + path, not_emulated, methods=["GET"])
            for method, path, route, throttlers in CONTROL_ROUTES:
                router.add_route(prefix + path, self._control_endpoint(route, throttlers), methods=[method])
            for root in API_ROOTS:  # after the routes served, which come first where both match
                router.add_route(f"{prefix}/{root}", not_emulated, methods=_ANY_METHOD)
                router.add_route(f"{prefix}/{root}/{{rest:path}}", not_emulated, methods=_ANY_METHOD)
        for method, path, route in TOOLBOX_ROUTES:
            router.add_route("/toolbox/{sid}" + path, self._toolbox_endpoint(route), methods=[method])
        toolbox_not_emulated = self._toolbox_endpoint(ROUTE_TOOLBOX_NOT_EMULATED)
        router.add_route(
            "/toolbox/{sid}/{rest:path}",
            _keep_slash_redirects(toolbox_not_emulated, router, unserved),
            methods=_ANY_METHOD,
        )
        app.router.add_websocket_route("/toolbox/{sid}/process/interpreter/execute", self._interpreter_ws)
        app.router.add_websocket_route(
            "/toolbox/{sid}/process/session/{session}/command/{command}/logs", self._session_logs_ws
        )

    def _control_endpoint(self, route: str, throttlers: tuple[str, ...]) -> Endpoint:
        operation = getattr(self, "_op_" + route.rsplit(".", 1)[1])

        async def endpoint(request: Request) -> Response:
            async def answer(body: bytes) -> tuple[Response, dict[str, Any]]:
                self._loop = asyncio.get_running_loop()
                path = request.url.path
                ip = client_ip(request.headers, request.client)
                blocked = self.failed_auth.blocked(ip)
                if blocked is not None:  # the API's middleware, before authentication
                    return self._failed_auth_refusal(path, blocked), {}
                if not self._authorized(request.headers):
                    refused, headers = self.failed_auth.failed(ip)
                    if refused:
                        return self._failed_auth_refusal(path, headers), {}
                    return api_error(401, INVALID_CREDENTIALS, path, headers=dict(headers)), {}
                verdict: Verdict = self.throttlers.hit(throttlers, self.config.organization_id)
                if not verdict.allowed:
                    response = json_response(
                        {
                            "statusCode": 429,
                            "message": "ThrottlerException: Too Many Requests",
                            "error": "Too Many Requests",
                            "path": path,
                            "timestamp": now_iso(),
                        },
                        429,
                    )
                    entry = current_entry()
                    if entry is not None:
                        entry.detail["throttler"] = verdict.refused_by
                        # What the client was told to wait, per throttler: the compliance oracle checks it.
                        entry.detail["retry_after"] = retry_after_detail(verdict.headers)
                else:
                    try:
                        payload = await operation(request, _json_body(body) if body else {})
                        response = payload if isinstance(payload, Response) else json_response(payload)
                    except ApiError as exc:
                        response = api_error(exc.status, exc.message, path, code=exc.code)
                    except Exception:  # a bug of ours: the API's own answer to one (NestJS's filter), logged here
                        _log.exception("%s %s failed", request.method, path)
                        response = api_error(500, "Internal server error", path)
                for name, value in verdict.headers:
                    response.headers[name] = value
                return response, {}

            return await self.gate.handle(route, request, answer)

        return endpoint

    def _toolbox_endpoint(self, route: str) -> Endpoint:
        name = "_tb_" + route.removeprefix("daytona.").replace(".", "_")

        async def endpoint(request: Request) -> Response:
            operation = getattr(self, name, None) or self._tb_info_dispatch

            async def answer(body: bytes) -> tuple[Response, dict[str, Any]]:
                self._loop = asyncio.get_running_loop()
                path = request.url.path
                refusal = self._proxy_refusal(request.headers, request.client, request.path_params["sid"])
                if refusal is not None:
                    return proxy_error(401, refusal, path, request.method, "UNAUTHORIZED"), {}
                sandbox: Sandbox | None = None
                try:
                    sandbox = self._toolbox_sandbox(request)
                    await self._ensure_home(sandbox)
                    result = await operation(sandbox, request, body)
                except CommandTimeout:
                    return daemon_error(
                        408, "request timeout: command execution timeout", path, request.method, "REQUEST_TIMEOUT"
                    ), {}
                except (SandboxGone, ContextClosed):  # its processes went with it (a context starting as its
                    # sandbox is stopped or deleted, too): the toolbox proxy has no daemon left to ask
                    message = "the sandbox was stopped while the command ran"
                    return daemon_error(502, message, path, request.method, "BAD_GATEWAY"), {}
                except FileError as exc:  # the daemon's envelope; its words go to the journal too
                    entry = current_entry()
                    if entry is not None:
                        entry.detail["daemon_error"] = exc.message
                    message = go_text(exc.message)
                    return daemon_error(exc.status, message, path, request.method, exc.code), {}
                except ApiError as exc:
                    return daemon_error(exc.status, exc.message, path, request.method, exc.code), {}
                except FileNotFoundError as exc:
                    shown = _as_client_path(sandbox, exc.filename)
                    return daemon_error(404, f"file not found: {shown}", path, request.method, "FILE_NOT_FOUND"), {}
                except OSError as exc:  # a directory where a file was meant, a permission, descriptors run out: the
                    # daemon's file handlers answer each with a 400 (a download's http.ServeFile, a 500)
                    reason = exc.strerror or str(exc) or type(exc).__name__
                    said = reason if exc.filename is None else f"{reason}: {_as_client_path(sandbox, exc.filename)}"
                    return daemon_error(400, said, path, request.method, "BAD_REQUEST"), {}
                except Exception as exc:  # a bug of ours: the daemon's envelope for an error it did not expect, logged
                    _log.exception("%s %s failed", request.method, path)
                    message = str(exc) or type(exc).__name__
                    return daemon_error(500, message, path, request.method, "INTERNAL_SERVER_ERROR"), {}
                if isinstance(result, Response):
                    return result, {}
                return json_response(result), {}

            return await self.gate.handle(route, request, answer)

        return endpoint

    def _toolbox_sandbox(self, request: Request) -> Sandbox:
        sandbox = self.store.find(request.path_params["sid"])
        if sandbox is None:
            raise ApiError(404, f"Sandbox with ID {request.path_params['sid']} not found")
        _note(sandbox)
        if sandbox.state != "started":
            raise ApiError(400, f"Sandbox {sandbox.id} is not started (state: {sandbox.state})")
        self.store.mark_activity(sandbox)
        return sandbox

    # ------------------------------------------------------------------ control plane operations

    async def _op_create(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.create(body)
        try:
            await self._ensure_home(sandbox)
        except BaseException:
            self.store.discard(sandbox.id)
            raise
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_get(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.get(request.path_params["sid"])
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_list(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """The API's search (``emulator/daytona/search.py``): validated query, filters, order, cursor pages."""
        query = search.validate(search.parse_query(request.query_params.multi_items()))
        page = search.search(self.store.list(), query)
        items = [self._sandbox_json(s, request, list_item=True) for s in page.items]
        return {"items": items, "nextCursor": page.next_cursor}

    async def _op_delete(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.delete(request.path_params["sid"])
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_start(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.start(request.path_params["sid"])
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_stop(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.stop(request.path_params["sid"])
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_toolbox_proxy_url(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        sandbox = self.store.get(request.path_params["sid"])
        _note(sandbox)
        return {"url": self._toolbox_url(request)}

    async def _op_labels(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """The labels replaced, answered with the whole Sandbox, as the API's controller answers (its OpenAPI says
        ``SandboxLabels``, which the SDK reads from it). The API validates nothing here (a JSON value of any kind is
        stored); the emulator keeps labels as strings and refuses anything else (docs/daytona.md)."""
        labels = body.get("labels")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ApiError(400, "labels must be an object of strings")
        sandbox = self.store.set_labels(request.path_params["sid"], labels)
        _note(sandbox)
        return self._sandbox_json(sandbox, request)

    async def _op_public(self, request: Request, body: dict[str, Any]) -> Response:
        """201 with the Sandbox (a NestJS ``@Post`` without ``@HttpCode``); ``isPublic`` is a boolean as the API's
        global ``ValidationPipe`` converts one from the path: ``true`` alone is true, anything else false."""
        public = request.path_params["public"] == "true"
        sandbox = self.store.set_public(request.path_params["sid"], public)
        _note(sandbox)
        return json_response(self._sandbox_json(sandbox, request), 201)

    async def _op_last_activity(self, request: Request, body: dict[str, Any]) -> Response:
        """What ``Sandbox.refresh_activity`` calls: the auto-stop timer starts again; 201 with no body (the
        controller returns nothing)."""
        sandbox = self.store.refresh_activity(request.path_params["sid"])
        _note(sandbox)
        return Response(status_code=201)

    async def _op_pause(self, request: Request, body: dict[str, Any]) -> NoReturn:
        self.store.pause(request.path_params["sid"])

    async def _op_recover(self, request: Request, body: dict[str, Any]) -> NoReturn:
        sandbox = self.store.get(request.path_params["sid"])  # the API's access guard, before its pipes
        _note(sandbox)
        _bool_query(request, "skipStart")
        self.store.recover(sandbox.id)

    async def _op_not_emulated(self, request: Request, body: dict[str, Any]) -> NoReturn:
        raise ApiError(501, _not_emulated(request))

    async def _interval(self, request: Request, which: str) -> Response:
        """201 with the Sandbox: the routes have no ``@HttpCode``, so NestJS answers their POST 201 (their OpenAPI
        says 200, which the SDK's client maps to the model; it reads nothing from the answer)."""
        value = js_number(request.path_params["interval"])  # the API's ValidationPipe: ``+raw``, never a 400
        sandbox = self.store.set_interval(request.path_params["sid"], which, value)
        _note(sandbox)
        return json_response(self._sandbox_json(sandbox, request), 201)

    async def _op_autostop(self, request: Request, body: dict[str, Any]) -> Response:
        return await self._interval(request, "autostop")

    async def _op_autodelete(self, request: Request, body: dict[str, Any]) -> Response:
        return await self._interval(request, "autodelete")

    async def _op_autoarchive(self, request: Request, body: dict[str, Any]) -> Response:
        return await self._interval(request, "autoarchive")

    # ------------------------------------------------------------------ toolbox operations

    def _listed(self, items: list[_T]) -> list[_T]:
        """``items`` in the order the daemon lists them: a Go map's, different on each call (shuffled here from the
        config's ``listing_seed``), or as they were made when the seed is ``None``."""
        if self._listing is not None:
            self._listing.shuffle(items)
        return items

    async def _tb_toolbox_execute(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return await self.toolbox.execute(sandbox, body)

    async def _tb_toolbox_code_run(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return await self.toolbox.code_run(sandbox, body, self.python)

    async def _tb_toolbox_session_create(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        await self.toolbox.create_session(sandbox, body)
        return Response(status_code=201)

    async def _tb_toolbox_session_list(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        sessions = self._listed(list(self.toolbox.sessions(sandbox).values()))
        return [s.read(self._listed) for s in sessions]

    async def _tb_toolbox_session_get(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return self.toolbox.session(sandbox, request.path_params["session"]).read(self._listed)

    async def _tb_toolbox_session_delete(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        await self.toolbox.delete_session(sandbox, request.path_params["session"])
        return Response(status_code=204)

    async def _tb_toolbox_session_exec(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        """``SessionExecuteResponse`` as the daemon's encoder writes it: every field there, null when unset (an
        asynchronous command's answer, 202, holds its ``cmdId`` alone)."""
        answer = await self.toolbox.session_exec(sandbox, request.path_params["session"], body)
        empty = {"output": None, "stdout": None, "stderr": None, "exitCode": None}
        if answer.pop(ACCEPTED, False):
            return json_response({"cmdId": answer["cmdId"], **empty}, 202)
        command: SessionCommand = answer.pop(COMMAND)
        shape = session_shell.output_shape(request.headers)
        return {"cmdId": answer["cmdId"], **session_shell.answer(shape, command.text()), "exitCode": command.exit_code}

    async def _tb_toolbox_session_command(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.path_params
        return self.toolbox.command(sandbox, params["session"], params["command"]).read()

    async def _tb_toolbox_session_input(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.path_params
        await self.toolbox.send_input(sandbox, params["session"], params["command"], body)
        return Response(status_code=204)

    async def _tb_toolbox_session_logs(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        """The command's log so far, as the daemon answers it: JSON ``{output, stdout, stderr}`` to an SDK that has
        the daemon take the streams apart, the log as text otherwise (without its markers when combined)."""
        params = request.path_params
        command = self.toolbox.command(sandbox, params["session"], params["command"])
        shape = session_shell.output_shape(request.headers)
        fields = session_shell.answer(shape, command.text())
        if shape == "split":
            return fields
        return Response(fields["output"], media_type="text/plain; charset=utf-8")

    async def _tb_interpreter_context_create(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        """As the daemon's ``CreateContext``: the context's process starts now (``active: true``), in ``cwd``; one
        it cannot start in is a 500, as the worker's start fails there."""
        data = CONTEXT_BODY.bind(body)
        prefix = CONTEXT_BODY.prefix
        cwd = string_field(data, "cwd", "CreateContextRequest", prefix)
        language = string_field(data, "language", "CreateContextRequest", prefix)
        language = "python" if language is None else language
        if language != "python":
            raise ApiError(400, f"unsupported language: {language} (only 'python' is supported currently)")
        target = process_dir(sandbox, cwd) if cwd else sandbox.home
        refusal = chdir_refusal(target)
        if refusal is not None:  # Go's check of the worker's directory before its start (os.StartProcess)
            raise ApiError(500, f"failed to start context: failed to start Python worker: chdir {cwd}: {refusal}")
        await self._ensure_home(sandbox)
        # Its answer names the directory as the client gave it (the home, as /work-dir reports it, when none).
        shown = cwd or sandbox.home
        context = self.interpreters.create(sandbox.id, sandbox.home, sandbox_env(sandbox), target, language, shown)
        try:
            await self.interpreters.start(context)
        except WorkerStartError as failed:  # the daemon keeps no context whose worker did not start
            self.interpreters.delete(sandbox.id, context.id)
            raise ApiError(500, f"failed to start context: {failed.cause}") from None
        return context.to_json()

    async def _tb_interpreter_context_list(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        contexts = self.interpreters.contexts(sandbox.id)
        return {"contexts": [c.to_json() for c in self._listed(list(contexts.values())) if c.id != "default"]}

    async def _tb_interpreter_context_delete(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        context_id = request.path_params["context"]
        if context_id == "default":
            raise ApiError(400, "cannot delete default context")
        if not self.interpreters.delete(sandbox.id, context_id):
            raise ApiError(404, f"not found: context with ID '{context_id}' not found")
        return {"message": "Context deleted successfully"}

    async def _tb_toolbox_files_upload(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return file_routes.bulk_upload(sandbox, body, request.headers.get("content-type"))

    async def _tb_toolbox_files_download(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return file_routes.bulk_download(sandbox, body)

    async def _tb_toolbox_files_download_one(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return file_routes.download_one(sandbox, request.query_params.get("path", ""))

    async def _tb_toolbox_files_list(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        depth = request.query_params.getlist("depth")  # gin's ``c.Query``: the first of the key's values
        listing = await _off_loop(
            file_routes.list_files, sandbox, request.query_params.get("path", ""), depth[0] if depth else None
        )
        return file_routes.gin_json(listing)

    async def _tb_toolbox_files_info(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return file_routes.gin_json(file_routes.info(sandbox, request.query_params.get("path", "")))

    async def _tb_toolbox_files_delete(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        """The daemon registers ``DELETE /files/`` alone (``fsController.DELETE("/", ...)``): gin answers
        ``DELETE /files`` with its trailing-slash redirect, a 307 (the method kept) to ``/files/`` with the query,
        which the toolbox proxy prefixes with ``/toolbox/<id>``. The SDK's client follows it."""
        if not request.url.path.endswith("/"):
            query = request.url.query
            location = request.url.path + "/" + ("?" + query if query else "")
            return Response(status_code=307, headers={"Location": location})
        recursive = request.query_params.get("recursive") == "true"  # the daemon compares the string as given
        await _off_loop(file_routes.delete, sandbox, request.query_params.get("path", ""), recursive)
        return Response(status_code=204)

    async def _tb_toolbox_files_folder(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.query_params
        file_routes.create_folder(sandbox, params.get("path", ""), params.get("mode"))
        return Response(status_code=201)

    async def _tb_toolbox_files_find(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.query_params
        found = await _off_loop(file_routes.find_in_files, sandbox, params.get("path", ""), params.get("pattern", ""))
        return file_routes.gin_json(found)

    async def _tb_toolbox_files_search(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.query_params
        found = await _off_loop(file_routes.search_files, sandbox, params.get("path", ""), params.get("pattern", ""))
        return file_routes.gin_json(found)

    async def _tb_toolbox_files_replace(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        return file_routes.gin_json(await _off_loop(file_routes.replace_in_files, sandbox, body))

    async def _tb_toolbox_files_move(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.query_params
        await _off_loop(file_routes.move, sandbox, params.get("source", ""), params.get("destination", ""))
        return Response(status_code=200)

    async def _tb_toolbox_files_permissions(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        params = request.query_params
        path, mode, owner, group = (params.get(name) for name in ("path", "mode", "owner", "group"))
        file_routes.set_permissions(sandbox, path or "", mode, owner, group)
        return Response(status_code=200)

    async def _tb_toolbox_not_emulated(self, sandbox: Sandbox, request: Request, body: bytes) -> NoReturn:
        """A daemon route the emulator does not serve (``/env``, ``/system/metrics``, git, LSP, PTY, computer use):
        501 in the daemon's envelope, once the proxy has found the sandbox started."""
        raise ApiError(501, _not_emulated(request))

    async def _tb_info_dispatch(self, sandbox: Sandbox, request: Request, body: bytes) -> Any:
        tail = request.url.path.rsplit("/", 1)[-1]
        if tail == "version":
            return {"version": "0.226.1"}
        return {"dir": sandbox.home}

    # ------------------------------------------------------------------ session logs WebSocket

    async def _session_logs_ws(self, websocket: WebSocket) -> None:
        """``GET .../logs`` upgraded, as the daemon's ``ReadLog``: the log from its start in binary messages (its
        markers kept for an SDK from 0.27, taken out for an older one), then, with ``follow=true``, what comes while
        the command runs; closed 1000 once the command has ended and the log is sent (the daemon looks for the
        command's end each time its reader has found nothing new for a second), or when the session is deleted."""

        async def serve() -> str:
            self._loop = asyncio.get_running_loop()
            path = websocket.url.path
            refusal = self._proxy_refusal(websocket.headers, websocket.client, websocket.path_params["sid"])
            if refusal is not None:
                await websocket.send_denial_response(proxy_error(401, refusal, path, "GET", "UNAUTHORIZED"))
                return "invalid"
            sandbox = self.store.find(websocket.path_params["sid"])
            if sandbox is None or sandbox.state != "started":
                message = "Sandbox not found" if sandbox is None else "Sandbox is not started"
                await websocket.send_denial_response(
                    daemon_error(404 if sandbox is None else 400, message, path, "GET")
                )
                return "invalid"
            params = websocket.path_params
            try:
                session = self.toolbox.session(sandbox, params["session"])
                command = self.toolbox.command(sandbox, params["session"], params["command"])
            except ApiError as refused:
                await websocket.send_denial_response(daemon_error(refused.status, refused.message, path, "GET"))
                return "invalid"
            self.store.mark_activity(sandbox)
            await websocket.accept()
            combined = session_shell.output_shape(websocket.headers) == "combined"
            follow = websocket.query_params.get("follow") == "true"
            return await stream_log(websocket, session, command, follow, combined)

        await self.gate.handle_ws(
            "daytona.toolbox.session.logs", websocket, serve, identity=self.ws_identity(websocket)
        )

    # ------------------------------------------------------------------ interpreter WebSocket

    async def _interpreter_ws(self, websocket: WebSocket) -> None:
        async def serve() -> str:
            self._loop = asyncio.get_running_loop()
            path = websocket.url.path
            refusal = self._proxy_refusal(websocket.headers, websocket.client, websocket.path_params["sid"])
            if refusal is not None:
                await start_gate.wait_out()
                await websocket.send_denial_response(proxy_error(401, refusal, path, "GET", "UNAUTHORIZED"))
                return "invalid"
            sandbox = self.store.find(websocket.path_params["sid"])
            if sandbox is None or sandbox.state != "started":
                message = "Sandbox not found" if sandbox is None else "Sandbox is not started"
                await start_gate.wait_out()
                await websocket.send_denial_response(
                    daemon_error(404 if sandbox is None else 400, message, path, "GET")
                )
                return "invalid"
            _note(sandbox)
            self.store.mark_activity(sandbox)
            await self._ensure_home(sandbox)
            await websocket.accept()
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                return "cancelled"
            # The daemon reads any frame and unmarshals it: a binary one holding JSON runs too.
            text = frame.get("text")
            raw: str | bytes = text if isinstance(text, str) else frame.get("bytes") or b""
            contexts = self.interpreters.contexts(sandbox.id)
            request = parse_execute_request(raw, contexts.__contains__)
            if isinstance(request, Refusal):
                await start_gate.wait_out()
                await websocket.close(request.code, request.reason)
                return "invalid"
            entry = current_entry()
            if entry is not None:  # which program ran: a pool's "each completion once" is checked against this
                entry.detail["code_digest"] = code_digest(request.code)
            if request.context_id is None or request.context_id == "default":
                context = self.interpreters.default(sandbox.id, sandbox.home, sandbox_env(sandbox))
            else:
                context = contexts[request.context_id]
            timeout = self.config.interpreter_timeout if request.timeout is None else float(request.timeout)
            return await self._interpret(websocket, context, request.code, request.envs, timeout)

        # An injected latency: the handshake is answered and the request read during the wait; the code starts at
        # its end (see _interpret).
        identity = self.ws_identity(websocket)
        await self.gate.handle_ws(ROUTE_INTERPRETER, websocket, serve, ready_in_latency=True, identity=identity)

    def ws_identity(self, websocket: WebSocket) -> str:
        """The WebSocket's path with the random ids this emulator made replaced by stable ones, for its fault key.

        The sandbox's id (a uuid4) becomes ``#n``, its creation ordinal since the last reset, and a session command's
        id (a uuid4 too) ``#n``, its place in the session. Two runs that create their sandboxes and commands in the
        same order then give the same request the same key, so the same plan and seed decide alike and a decision log
        replays. Not the sandbox's name: clients make names unique with random parts (DaytonaTool does), and a name
        used again after a delete would carry one sandbox's attempts to the next. Ids that name nothing stay."""
        params = websocket.path_params
        sid = params["sid"]
        parts = websocket.url.path.split("/")
        sandbox = self.store.find(sid)
        if sandbox is None:
            return websocket.url.path
        stable = f"#{sandbox.ordinal}"
        parts = [stable if part == sid else part for part in parts]
        command = params.get("command")
        if command is not None:
            session = self.toolbox.sessions(sandbox).get(params.get("session", ""))
            ids = list(session.commands) if session is not None else []
            if command in ids:
                parts = [f"#{ids.index(command) + 1}" if part == command else part for part in parts]
        return "/".join(parts)

    async def _interpret(
        self, websocket: WebSocket, context: Context, code: str, envs: dict[str, str], timeout: float
    ) -> str:
        start_at: float | None = None
        abandoned: Callable[[], Awaitable[bool]] | None = None
        gate = start_gate.take()
        if gate is not None and not gate.over():
            if gate.deadline is None:  # a virtual clock's wait: out first, unless the client leaves during it
                if await _leaves_during(websocket, gate.until_over()):
                    return "cancelled"
            else:  # the interpreter waits until the deadline itself, and skips the code if the client leaves first
                start_at = deadline = gate.deadline

                async def abandoned_before_start() -> bool:
                    return await _leaves_before(websocket, deadline)

                abandoned = abandoned_before_start
        config = self.config
        client = ClientChannel(websocket, config.interpreter_client_frames, config.interpreter_slow_client_wait)
        try:
            return await self._answer_run(client, context, code, envs, timeout, start_at, abandoned)
        finally:
            client.abandon()  # a writer left by an error of ours, or by a server that stops, must not linger

    async def _answer_run(
        self,
        client: ClientChannel,
        context: Context,
        code: str,
        envs: dict[str, str],
        timeout: float,
        start_at: float | None,
        abandoned: Callable[[], Awaitable[bool]] | None,
    ) -> str:
        try:
            outcome = await self.interpreters.run(context, code, envs, timeout, client.send, start_at, abandoned)
        except WorkerStartError as failed:
            await client.close(*_start_failure_close(context.id, failed))
            return "error"
        except InterpreterTimeout as killed:  # the code did not end when interrupted: killed, with no last message
            for frame in killed.unsent:
                await client.send(frame)
            await client.close(WS_TIMEOUT_CLOSE, "")
            return _left(client, "timeout")
        except (WebSocketDisconnect, RuntimeError):
            await client.close(1000)
            return "cancelled"
        if outcome.cancelled:
            await client.close(1000)
            return "cancelled"
        for frame in outcome.unsent:  # the last output, with the end: one write
            await client.send(frame)
        if outcome.exited:  # the daemon's process monitor closes the socket when its worker ends
            await client.close(1001, "worker process ended")
            return _left(client, "error")
        if outcome.interrupted:  # KeyboardInterrupt, a timeout's or the code's own: the daemon's timeout close
            await client.send({"type": "control", "text": "interrupted"})
            await client.close(WS_TIMEOUT_CLOSE, "")
            return _left(client, "timeout")
        if outcome.error is not None:
            await client.send({"type": "error", **outcome.error})
        await client.send({"type": "control", "text": "completed"})
        await client.close(1000)
        return _left(client, "ok")


def _left(client: ClientChannel, outcome: str) -> str:
    """The journal's outcome of an execution whose client may have gone (it left: cancelled) or been dropped (a
    slow consumer, or a connection closed with frames still queued after the five seconds: an error, noted in the
    entry)."""
    if client.slow or client.cut:
        entry = current_entry()
        if entry is not None:
            entry.detail["closed"] = "slow consumer" if client.slow else "frames left unsent"
        return "error"
    return "cancelled" if client.gone else outcome


def _start_failure_close(context_id: str, failed: WorkerStartError) -> tuple[int, str]:
    """The daemon's close when a context's worker cannot start for an execution: for the default context, 1011 with
    its error chain; for a named one, whose restart fails in ``GetContext``, the controller's 1008 ``context not
    found`` (it says that for any error of ``GetContext``)."""
    if context_id != "default":
        return CLOSE_POLICY_VIOLATION, close_reason(f"context not found: {context_id}")
    step = "failed to restart default context" if failed.restart else "failed to start context"
    return 1011, close_reason(f"failed to get default context: {step}: {failed.cause}")


async def _leaves_during(websocket: WebSocket, wait: Awaitable[None]) -> bool:
    """Whether the client disconnects before ``wait`` is over; what it sends meanwhile is dropped."""

    async def disconnected() -> None:
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass

    leaving = asyncio.ensure_future(disconnected())
    waiting = asyncio.ensure_future(wait)
    try:
        await asyncio.wait({leaving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        waiting.cancel()
    if leaving.done() and not leaving.cancelled():
        leaving.exception()  # a receive that failed: the connection is gone too
        return True
    return False


async def _leaves_before(websocket: WebSocket, deadline: float) -> bool:
    """Whether the client disconnects before ``deadline`` (``time.monotonic()``)."""
    return await _leaves_during(websocket, asyncio.sleep(max(deadline - time.monotonic(), 0.0)))


#: The API's 401 (its GlobalAuthGuard, since 2026-03: passport's bare ``Unauthorized`` before).
INVALID_CREDENTIALS = "Invalid credentials"
#: The toolbox proxy's 401s (its ``Authenticate``): a bearer key the API does not accept for the sandbox, no key at
#: all, and a check the API answered with an error (its failed-auth 429; the Go client's error text); each after the
#: ``unauthorized: `` of common-go's ``NewUnauthorizedError``, whose message the error middleware sends as it is.
PROXY_INVALID_BEARER = "unauthorized: authentication failed: Bearer token is invalid"
PROXY_MISSING_AUTH = (
    "unauthorized: missing authentication: provide a preview access token (via header, query parameter, or cookie) "
    "or use an API key or JWT"
)
PROXY_CHECK_REFUSED = "unauthorized: authentication failed: Bearer token validation error: 429 Too Many Requests"


_T = TypeVar("_T")


async def _off_loop(work: Callable[..., _T], *args: Any) -> _T:
    """Run a file route's walk of a tree (a listing, a find or search, a replace, a recursive delete, a move) in a
    worker thread: a big tree would otherwise hold up every other request the server is answering."""
    return await asyncio.to_thread(work, *args)


def _not_emulated(request: Request) -> str:
    return f"{request.method} {request.url.path} is not emulated by sandbox-emulator"


def _keep_slash_redirects(endpoint: Endpoint, router: Router, unserved: list[Endpoint]) -> Endpoint:
    """``endpoint`` for a catch-all route, after what Starlette's router answered before the catch-all took its
    paths: the 405 of a route served at the path for other methods (``PUT /files``), else a 307 to the path with its
    trailing slash added or taken away when a route other than a catch-all serves that for this method
    (``GET /files/info/``), or the 405 that redirect would have met."""

    async def answer(request: Request) -> Response:
        path: str = request.scope["path"]
        _refuse_other_method(request.scope, router, unserved)
        if path != "/":
            twin = {**request.scope, "path": path.rstrip("/") if path.endswith("/") else path + "/"}
            if _served_match(twin, router, unserved, Match.FULL) is not None:
                return RedirectResponse(str(URL(scope=twin)))
            _refuse_other_method(twin, router, unserved)
        return await endpoint(request)

    unserved.append(answer)
    return answer


def _served_match(scope: Scope, router: Router, skip: Container[object], wanted: Match) -> BaseRoute | None:
    """The first route other than a catch-all that matches ``scope`` as ``wanted`` (FULL: path and method; PARTIAL:
    the path alone), as Starlette's router picks them."""
    for route in router.routes:
        if getattr(route, "endpoint", None) not in skip and route.matches(scope)[0] == wanted:
            return route
    return None


def _refuse_other_method(scope: Scope, router: Router, skip: Container[object]) -> None:
    """Starlette's 405 (with its ``Allow``) where a served route has ``scope``'s path but not its method: neither
    "not emulated" (the route is) nor a redirect (its twin would send the client back, a loop)."""
    if _served_match(scope, router, skip, Match.FULL) is not None:
        return  # a catch-all placed before a route served on purpose (``GET /sandbox/paginated``)
    route = _served_match(scope, router, skip, Match.PARTIAL)
    methods = getattr(route, "methods", None)
    if route is not None and methods:
        raise HTTPException(status_code=405, headers={"Allow": ", ".join(methods)})


def _bool_query(request: Request, name: str) -> bool | None:
    """A query parameter through NestJS's optional ``ParseBoolPipe``: absent is None, ``true`` or ``false`` the
    boolean, anything else (an empty value, a repeated name) its 400."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) == 1 and values[0] in ("true", "false"):
        return values[0] == "true"
    raise ApiError(400, "Validation failed (boolean string is expected)")


def _bearer_token(headers: Any) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _adopt_home(sandbox: Sandbox, executor: Executor) -> None:
    """Make the sandbox's home one of ``executor``'s work dirs, moving the old home's contents there."""
    fresh = executor.workdir(nested=True)  # its program owns it: never where it could rename it
    old = sandbox.home_dir
    if old is not None and os.path.isdir(old.path):
        os.rmdir(fresh.path)
        os.rename(old.path, fresh.path)
        old.cleanup()
    sandbox.home_dir, sandbox.home_owner = fresh, executor


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


__all__ = ["ROUTES", "DaytonaService"]


def _as_client_path(sandbox: Sandbox | None, filename: object) -> str:
    """A host path in an error message as the client named it: under the sandbox's private tree, the absolute path
    it stands for (``/tmp/a.txt``), never the emulator's own directory; the home is the path ``/user-home-dir``
    reports, so it stays."""
    text = str(filename)
    if sandbox is not None:
        root = sandbox.fs_root.rstrip("/")
        if text == root or text.startswith(root + "/"):
            return text[len(root) :] or "/"
    return text
