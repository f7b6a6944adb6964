"""The fault gate: every emulated route passes through it, so faults, limits and the journal apply uniformly.

For each request it derives the logical key (the ``X-Emulator-Key`` header, else a hash of the body), asks the
fault engine for a decision keyed by (route, key, attempt), journals the request, waits the injected latency on the
engine's clock, and then either answers with the injected fault or lets the real handler answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from emulator import transport
from emulator.executor import start_gate
from emulator.faults import Decision, FaultAction, FaultEngine, RealClock
from emulator.faults.bodies import with_request_fields
from emulator.journal import Journal, JournalEntry

#: Header a client (or a test) may send to name the logical request, instead of the body hash.
KEY_HEADER = "x-emulator-key"

#: A route's real handler: body in, (response, JSON payload or {}) out.
Handler = Callable[[bytes], Awaitable[tuple[Response, dict[str, Any]]]]

#: The journal entry of the request being handled, so handlers can add ``detail`` (e.g. a sandbox id).
_CURRENT_ENTRY: ContextVar[JournalEntry | None] = ContextVar("emulator_gate_entry", default=None)


#: A WebSocket route's real handler: accepts, serves and closes the socket; returns the outcome for the journal.
WsHandler = Callable[[], Awaitable[str]]

#: WebSocket close code the Daytona interpreter uses for a timeout.
WS_TIMEOUT_CLOSE = 4008


def current_entry() -> JournalEntry | None:
    """The journal entry of the request the calling handler serves (None outside the gate)."""
    return _CURRENT_ENTRY.get()


def request_key(headers: Any, body: bytes) -> str:
    """Logical identity of a request: explicit header, else a short hash of the body."""
    explicit = headers.get(KEY_HEADER)
    if explicit:
        return str(explicit)
    return hashlib.blake2b(body, digest_size=8).hexdigest()


class ResetResponse(Response):
    """Drops the connection instead of answering."""

    def __init__(self) -> None:
        super().__init__(b"")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport.reset(dict(scope))


class TruncatedResponse(Response):
    """Announces the full Content-Length but sends only part of the body, then closes.

    Its head is written by hand (the server would not send a body shorter than its length) and is that of any other
    answer: the status's own reason phrase, ``date`` and ``server`` as uvicorn sends them, the fault's headers and
    whatever is added to ``headers`` afterwards (the gate's rate-limit headers)."""

    def __init__(self, status: int, body: bytes, keep_fraction: float, headers: dict[str, str]) -> None:
        super().__init__(b"", status_code=status, headers=headers)
        self._full = body
        self._keep = int(len(body) * keep_fraction)
        if body and self._keep >= len(body):
            self._keep = len(body) - 1

    def head(self) -> bytes:
        """The status line and headers, as sent."""
        try:
            reason = HTTPStatus(self.status_code).phrase
        except ValueError:  # a code without a name: uvicorn sends no phrase either
            reason = ""
        lines = [f"HTTP/1.1 {self.status_code} {reason}", f"date: {formatdate(usegmt=True)}", "server: uvicorn"]
        lines.append(f"content-length: {len(self._full)}")
        lines += [
            f"{k.decode('latin-1')}: {v.decode('latin-1')}" for k, v in self.raw_headers if k != b"content-length"
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport.write_then_close(dict(scope), self.head() + self._full[: self._keep])


def _action_response(action: FaultAction, extra_headers: dict[str, str], where: tuple[str, str, str]) -> Response:
    """The answer of a fault that does not run the request; ``where`` is (route, path, method) of the request.

    Its Content-Type goes out exactly as the fault declares it (or a plan's ``headers`` override it): given as the
    framework's ``media_type`` it would get ``; charset=utf-8`` added to a ``text/`` type."""
    headers = action.header_dict()
    if not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    headers.update(extra_headers)
    status = action.status or 500
    body = with_request_fields(action.body or "", status, *where).encode()
    return Response(body, status_code=status, headers=headers)


def _stopping_answer() -> Response:
    """The answer to a request whose hang the server stopping cut short."""
    body = b'{"error": "the emulator is stopping"}'
    return Response(body, status_code=503, media_type="application/json", headers={"Connection": "close"})


class FaultGate:
    """Applies an engine's decisions to HTTP requests and records them in a journal."""

    def __init__(self, engine: FaultEngine, journal: Journal) -> None:
        self.engine = engine
        self.journal = journal
        self._hangs: set[asyncio.Task[Any]] = set()  # the requests waiting out a hang
        self._ended: set[asyncio.Task[Any]] = set()  # those of them cancelled by end_hangs, not by anything else
        self._stopping: asyncio.AbstractEventLoop | None = None  # the loop of a server that is stopping

    def end_hangs(self) -> list[asyncio.Task[Any]]:
        """End the hangs waited out on the running loop now, and any that begin on it later: its server is stopping.
        Returns the requests ended, for the server to let them answer before it closes their connections.

        A hang lasts up to a day; a stopping server would wait its graceful timeout for them and then cancel them,
        logging each as an error of the application. Ended here, each is answered as a server going away answers
        (503 with ``Connection: close``; a WebSocket is closed with 1001) and journalled ``cancelled``."""
        loop = asyncio.get_running_loop()
        self._stopping = loop
        hangs = list(self._hangs)  # one step under the GIL: a server of this emulator on another thread may add one
        ended = [task for task in hangs if task.get_loop() is loop and task not in self._ended]
        for task in ended:
            self._ended.add(task)
            task.cancel()
        return ended

    def served(self) -> None:
        """The server that called :meth:`end_hangs` has stopped: a later one, on its own loop, hangs in full."""
        self._stopping = None

    async def _hang(self, seconds: float) -> bool:
        """Wait out a hang on the engine's clock; False when the server stopping ended it first.

        The wait is the request's own (no task of its own, so a virtual clock wakes it as it wakes any sleeper);
        :meth:`end_hangs` cancels it, and only that cancellation is taken back here."""
        if self._stopping is asyncio.get_running_loop():
            return False
        task = asyncio.current_task()
        assert task is not None  # a coroutine awaited on a loop runs in a task
        self._hangs.add(task)
        try:
            await self.engine.clock.sleep(seconds)
        except asyncio.CancelledError:
            if task not in self._ended:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the task is no longer being cancelled
            if uncancel is not None:
                uncancel()
            return False
        finally:
            self._hangs.discard(task)
            self._ended.discard(task)
        return True

    async def handle(
        self, route: str, request: Request, handler: Handler, *, ready_in_latency: bool = False
    ) -> Response:
        """Answer one request through the fault engine's decision.

        ``ready_in_latency``: the handler's only effect is running programs (Sandbox Fusion's ``/run_code``), so
        during an injected latency the first program's sandbox may get ready, forked and held, and start when the
        latency is over (see :mod:`emulator.executor.start_gate`); its answer never comes before the latency ends.

        On the real clock a latency runs from the request's arrival (as the server saw its first bytes): reading and
        deciding on it happen during the latency, as they would behind a slow network.
        """
        arrived = transport.arrived_at(request.scope)
        body = await request.body()
        key = request_key(request.headers, body)
        decision = self._decide(route, key, request.method, request.scope["path"])
        entry = self.journal.begin(route, request.method, request.scope["path"], key, decision.attempt)
        entry.injected_latency = decision.latency
        entry.arrived = arrived if isinstance(self.engine.clock, RealClock) else None
        if decision.action is not None:
            entry.fault = decision.action.kind
            entry.detail["rule"] = decision.rule_id or decision.limit
        token = _CURRENT_ENTRY.set(entry)
        try:
            where = (route, request.scope["path"], request.method)
            response, outcome = await self._answer(decision, body, handler, where, ready_in_latency, arrived)
        except Exception:
            self.journal.end(entry, 500, "error")
            raise
        except BaseException:  # cancelled: the client went away or the server is stopping
            self.journal.end(entry, None, "cancelled")
            raise
        finally:
            _CURRENT_ENTRY.reset(token)
            self.engine.release(decision)
        for name, value in decision.limit_headers:
            response.headers[name] = value
        status = None if isinstance(response, ResetResponse | TruncatedResponse) else response.status_code
        self.journal.end(entry, status, outcome)
        return response

    async def handle_ws(
        self,
        route: str,
        websocket: WebSocket,
        handler: WsHandler,
        ready_in_latency: bool = False,
        identity: str | None = None,
    ) -> None:
        """The gate for a WebSocket route. Faults map onto the handshake and close codes:

        ``hang`` accepts, waits, then closes with 4008 (timeout; 1011 with ``then: reset``); ``reset`` refuses the
        handshake; a 408 status (the daemon's own request timeout) accepts and closes with 4008; any other status (a
        gateway's 504, a 429 from a limit) is answered as an HTTP denial of the handshake with that status, headers and
        body, as a proxy in front of the daemon would answer the upgrade request.

        A latency is waited out before the handshake is answered, except with ``ready_in_latency`` and no fault: then
        the handler accepts and reads the request during the wait, and the program it runs takes the start gate (see
        :mod:`emulator.executor.start_gate`); an answer without a program waits for the end first
        (:func:`~emulator.executor.start_gate.wait_out`).

        An upgrade request has no body: its key (without ``X-Emulator-Key``) is a hash of ``identity``, the URL path
        with what the emulator made up at random (a sandbox's id) replaced by what the client did the same way in
        every run (see :meth:`~emulator.daytona.service.DaytonaService.ws_identity`), else of the path itself.
        """
        key = request_key(websocket.headers, (websocket.url.path if identity is None else identity).encode())
        decision = self._decide(route, key, "GET", websocket.url.path)
        entry = self.journal.begin(route, "GET", websocket.url.path, key, decision.attempt)
        entry.injected_latency = decision.latency
        arrived = transport.arrived_at(websocket.scope)
        entry.arrived = arrived if isinstance(self.engine.clock, RealClock) else None
        action = decision.action
        if action is not None and action.kind == "null_stdout":
            action = None  # a WebSocket's answer has no run_result: nothing to change, and nothing injected
        if action is not None:
            entry.fault = action.kind
            entry.detail["rule"] = decision.rule_id or decision.limit
        token = _CURRENT_ENTRY.set(entry)
        status: int | None = 101
        try:
            if decision.latency > 0 and action is None and ready_in_latency:
                wait, deadline = self._latency(decision, arrived)
                waiting = None if deadline is not None else self.engine.clock.sleep(wait)
                with start_gate.offered(waiting, deadline) as latency:
                    outcome = await handler()
                    if outcome != "cancelled":  # a client that left is sent nothing, so nothing waits for it
                        await latency.finish()
            elif action is None:
                if decision.latency > 0:
                    await self.engine.clock.sleep(decision.latency)
                outcome = await handler()
            else:
                if decision.latency > 0:
                    await self.engine.clock.sleep(decision.latency)
                status, outcome = await self._ws_fault(websocket, decision, action, route)
        except Exception:
            self.journal.end(entry, 500, "error")
            raise
        except BaseException:
            self.journal.end(entry, None, "cancelled")
            raise
        finally:
            _CURRENT_ENTRY.reset(token)
            self.engine.release(decision)
        self.journal.end(entry, status, outcome)

    async def _ws_fault(
        self, websocket: WebSocket, decision: Decision, action: FaultAction, route: str
    ) -> tuple[int | None, str]:
        """A fault on a WebSocket route: (the handshake's status, None for a reset; the journal's outcome)."""
        if action.kind == "hang":
            await websocket.accept()
            if not await self._hang(action.hang_seconds):
                await websocket.close(1001)  # going away: the server is stopping
                return 101, "cancelled"
            await websocket.close(1011 if action.then_reset else WS_TIMEOUT_CLOSE)
            return 101, "fault"
        if action.kind == "reset":
            await websocket.close()
            return None, "reset"
        if action.status == 408:
            await websocket.accept()
            await websocket.close(WS_TIMEOUT_CLOSE, "")  # the daemon's timeout close has no reason
            return 101, "fault"
        response = _action_response(action, dict(decision.limit_headers), (route, websocket.url.path, "GET"))
        await websocket.send_denial_response(response)
        return response.status_code, "limited" if action.kind == "limited" else "fault"

    def _decide(self, route: str, key: str, method: str, path: str) -> Decision:
        """The engine's decision; a request whose decision failed (a replay's miss, a bug) is journalled as an error
        answered 500, as the server answers it, so the journal still holds every request."""
        try:
            return self.engine.decide(route, key)
        except Exception:
            self.journal.end(
                self.journal.begin(route, method, path, key, self.engine.attempts(route, key)), 500, "error"
            )
            raise

    def _latency(self, decision: Decision, arrived: float | None) -> tuple[float, float | None]:
        """What is left of the decision's latency to wait, and (real clock only) the instant it ends."""
        clock = self.engine.clock
        if not isinstance(clock, RealClock):
            return decision.latency, None
        now = clock.monotonic()
        deadline = (arrived if arrived is not None and arrived <= now else now) + decision.latency
        return deadline - now, deadline

    async def _answer(
        self,
        decision: Decision,
        body: bytes,
        handler: Handler,
        where: tuple[str, str, str],
        ready_in_latency: bool = False,
        arrived: float | None = None,
    ) -> tuple[Response, str]:
        action = decision.action
        if decision.latency > 0:
            wait, deadline = self._latency(decision, arrived)
            if action is None and ready_in_latency:
                # The server's own sleep to the deadline is not needed on the real clock (the program's process wakes
                # at it by itself, and the deadline says when the wait is over), but it pays: the server wakes then,
                # and handles the program's result some 0.1 ms sooner at concurrency 1 (measured; its caches and its
                # core are warm again).
                with start_gate.offered(self.engine.clock.sleep(wait), deadline) as latency:
                    response, _ = await handler(body)
                    await latency.finish()
                return response, "ok" if response.status_code < 400 else "invalid"
            await self.engine.clock.sleep(wait)
        if action is None:
            response, _ = await handler(body)
            return response, "ok" if response.status_code < 400 else "invalid"
        if action.kind == "null_stdout":
            response, payload = await handler(body)
            run_result = payload.get("run_result")
            if isinstance(run_result, dict):
                run_result["stdout"] = None
                response = _json(payload, response.status_code)
                return response, "fault"
            # No run_result (another route, a refused request): the answer is the real one, and the journal says so.
            entry = _CURRENT_ENTRY.get()
            if entry is not None:
                entry.fault = None
                entry.detail.pop("rule", None)
            return response, "ok" if response.status_code < 400 else "invalid"
        if action.kind == "hang":
            if not await self._hang(action.hang_seconds):
                return _stopping_answer(), "cancelled"
            if action.then_reset:
                return ResetResponse(), "reset"
            return _action_response(action, {}, where), "fault"
        if action.kind == "reset":
            return ResetResponse(), "reset"
        if action.kind == "truncate":
            if action.body is None:
                real, _ = await handler(body)
                full, status = bytes(real.body), real.status_code
            else:
                full, status = action.body.encode(), action.status or 200
            headers = action.header_dict()
            return TruncatedResponse(status, full, action.keep_fraction, headers), "fault"
        # status, limited, malformed, sandbox_error: answered without running anything
        return _action_response(action, {}, where), "limited" if action.kind == "limited" else "fault"


def _json(payload: dict[str, Any], status: int) -> Response:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(data, status_code=status, media_type="application/json")
