"""The reference suite: a fixed list of requests per service, read from ``fixtures/reference/suite.yaml``, and the
code that sends them, in order, to one target (a real service or the emulator).

The suite is data so that the same requests go to the real service when recording and to the emulator when
checking; only the answers' run-to-run noise is normalised afterwards (see ``normalize.py``).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import yaml

from harness.paths import FIXTURES
from harness.reference.normalize import NORMALIZERS
from harness.urls import without_userinfo

SERVICES = ("sandbox-fusion", "daytona")
BASES = ("api", "toolbox")
#: Statuses that mean the service refused the caller, not the request: never an answer worth recording.
AUTH_STATUSES = (401, 403)
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYS = {"id", "method", "path", "json", "data", "headers", "base", "save", "normalize"}
_TOP_KEYS = ("version", *SERVICES)


class SuiteError(ValueError):
    """The suite file is missing or malformed (a user error: reported as a message, never a traceback)."""


def default_fixtures_dir() -> Path:
    """``fixtures/reference`` (of the checkout, or the copy installed with the package)."""
    return FIXTURES / "reference"


def default_suite_path() -> Path:
    return default_fixtures_dir() / "suite.yaml"


@dataclass(frozen=True)
class Case:
    """One request of the suite."""

    id: str
    service: str
    method: str
    path: str
    json: Any = None
    has_json: bool = False
    data: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    base: str = "api"
    save: dict[str, str] = field(default_factory=dict)
    normalize: str = "generic"


@dataclass(frozen=True)
class Answer:
    """What a target answered to one case: the HTTP status and the body (parsed JSON, else text); ``error`` when
    no HTTP answer came at all (connection refused, a missing saved value)."""

    status: int | None
    body: Any = None
    error: str | None = None
    #: What the answer was, beyond status and body, to judge whether it is one worth recording (not stored).
    content_type: str = field(default="", compare=False)
    location: str | None = field(default=None, compare=False)
    is_json: bool = field(default=True, compare=False)
    #: No answer because none came in time (the service is hung or too slow), not because none could come.
    timed_out: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "body": self.body}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class Target:
    """Where to send a service's cases: the base URL (Sandbox Fusion: the server root; Daytona: the API URL, e.g.
    ``https://app.daytona.io/api``) and, for Daytona, the bearer key."""

    service: str
    url: str
    api_key: str | None = None

    @property
    def shown(self) -> str:
        """The URL as stored and printed: without a ``user:password@`` (the requests still carry it)."""
        return without_userinfo(self.url)


#: Per service, a request that any working instance answers with a 2xx, whatever the suite holds: it tells a wrong
#: base URL (the framework's 404) or a refused key apart from the answers worth recording.
PROBES = {
    "sandbox-fusion": ("GET", "/v1/ping"),
    "daytona": ("GET", "/sandbox?limit=1"),
}
_BASE_HINTS = {
    "sandbox-fusion": "Sandbox Fusion's base URL is the server root, e.g. http://host:8080",
    "daytona": "Daytona's base URL is its API URL, e.g. https://app.daytona.io/api",
}


#: An HTTP token (a method, a header name, RFC 9110) and a header value that can be sent as is.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


def base_url(service: str, url: str) -> str:
    """The URL a service's cases hang from: no trailing slash and, for Sandbox Fusion, no trailing ``/run_code``, so
    that the ``/run_code`` URL verl's ``sandbox_fusion_url`` takes names the same server as its root."""
    url = url.rstrip("/")
    if service == "sandbox-fusion":
        url = url.removesuffix("/run_code").rstrip("/")
    return url


def _case(path: Path, service: str, raw: Any, position: int) -> Case:
    where = f"{path}: {service} case #{position + 1}"
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _KEYS
    if unknown:
        raise SuiteError(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(_KEYS)})")
    for key in ("id", "method", "path"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SuiteError(f"{where}: '{key}' must be a non-empty string")
    if not raw["path"].startswith("/"):
        raise SuiteError(f"{where} ({raw['id']}): 'path' must start with '/', got {raw['path']!r}")
    if not _TOKEN.fullmatch(raw["method"]):
        raise SuiteError(f"{where} ({raw['id']}): 'method' must be an HTTP method such as GET, got {raw['method']!r}")
    if "json" in raw:
        try:  # as it will be sent: strict JSON, no NaN or infinity
            json.dumps(raw["json"], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SuiteError(f"{where} ({raw['id']}): 'json' cannot be sent as JSON: {exc}") from None
    if "json" in raw and "data" in raw:
        raise SuiteError(f"{where} ({raw['id']}): give 'json' or 'data', not both")
    if not isinstance(raw.get("data", ""), str):
        raise SuiteError(f"{where} ({raw['id']}): 'data' must be a string (the body sent as is)")
    normalize = raw.get("normalize", "generic")
    if not isinstance(normalize, str) or normalize not in NORMALIZERS:
        raise SuiteError(f"{where} ({raw['id']}): normalize must be one of {sorted(NORMALIZERS)}, got {normalize!r}")
    base = raw.get("base", "api")
    if base not in BASES:
        raise SuiteError(f"{where} ({raw['id']}): base must be one of {BASES}, got {base!r}")
    for key in ("headers", "save"):
        value = raw.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise SuiteError(f"{where} ({raw['id']}): '{key}' must map strings to strings")
    for name, value in raw.get("headers", {}).items():
        if not _TOKEN.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise SuiteError(f"{where} ({raw['id']}): header {name!r}: {value!r} cannot be sent as an HTTP header")
    return Case(
        id=raw["id"],
        service=service,
        method=raw["method"].upper(),
        path=raw["path"],
        json=raw.get("json"),
        has_json="json" in raw,
        data=raw.get("data"),
        headers=dict(raw.get("headers", {})),
        base=base,
        save=dict(raw.get("save", {})),
        normalize=normalize,
    )


def _parsed(path: Path) -> dict[str, Any]:
    """The suite file's top level, checked for its shape: a mapping of ``version: 1`` and lists of cases."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SuiteError(f"cannot read the suite {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise SuiteError(f"the suite {path} is not valid YAML: {exc}") from exc
    except ValueError as exc:  # not UTF-8, or a value YAML cannot build (a date such as 2024-13-45)
        raise SuiteError(f"the suite {path} cannot be read: {exc}") from exc
    if not isinstance(raw, dict):
        raise SuiteError(f"{path}: the suite must be a mapping with 'version: 1' and a list of cases per service")
    unknown = [key for key in raw if key not in _TOP_KEYS]
    if unknown:
        names, plural = ", ".join(repr(key) for key in unknown), "s" if len(unknown) > 1 else ""
        raise SuiteError(f"{path}: unknown key{plural} {names} (expected: {', '.join(_TOP_KEYS)})")
    if raw.get("version") != 1:
        raise SuiteError(f"{path}: 'version' must be 1, got {raw.get('version')!r}")
    for service in SERVICES:
        value = raw.get(service)
        if value is not None and not isinstance(value, list):
            raise SuiteError(f"{path}: {service} must be a list of cases, got {type(value).__name__}")
    return raw


def load_suite(path: Path | None = None) -> dict[str, list[Case]]:
    """Every service's cases, in order (a service the file leaves out, or leaves empty, has none)."""
    path = path or default_suite_path()
    raw = _parsed(path)
    suite: dict[str, list[Case]] = {}
    for service in SERVICES:
        cases = [_case(path, service, item, i) for i, item in enumerate(raw.get(service) or [])]
        ids = [c.id for c in cases]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise SuiteError(f"{path}: duplicate {service} case ids {duplicated}")
        suite[service] = cases
    return suite


def require_cases(
    suite: dict[str, list[Case]], services: list[str], patterns: list[str] | None, path: Path | None = None
) -> None:
    """Refuse a run that would send nothing, saying why: the suite has no case for ``services``, or ``--cases``
    matches none of them (a run of zero cases would otherwise pass, or record nothing, in silence)."""
    if not any(suite[service] for service in services):
        which = "" if not any(suite.values()) else f" {' or '.join(services)}"
        raise SuiteError(f"{path or default_suite_path()}: the suite has no{which} cases")
    if patterns and not any(select(suite[service], patterns) for service in services):
        raise SuiteError(f"no {' or '.join(services)} case matches --cases")


#: What a bearer key may hold: printable ASCII, no space (a pasted key's trailing newline is the usual fault).
_KEY = re.compile(r"[\x21-\x7e]+")


def key_problem(key: str | None) -> str | None:
    """Why ``key`` cannot be sent as a bearer key, said without the key (the HTTP client's own error quotes it,
    and would put it in the output), or None when it can."""
    if key is None or _KEY.fullmatch(key):
        return None
    return (
        "the API key holds whitespace, a control or a non-ASCII character, which an HTTP header cannot carry "
        "(a trailing newline pasted with it?)"
    )


def scrubbed(target: Target, text: str) -> str:
    """``text`` without ``target``'s key or URL credentials: exception texts can quote the request's headers."""
    key = target.api_key or ""
    # as sent, as quoted escaped (str or bytes repr: "\\r"), and its printable core (which the escapes surround)
    forms = {key, repr(key)[1:-1], repr(key.encode(errors="replace"))[2:-1], key.strip()}
    for form in sorted((f for f in forms if len(f) >= 4), key=len, reverse=True):
        text = text.replace(form, "<API key>")
    return text.replace(target.url, target.shown)


def _scrubbed_value(target: Target, value: Any) -> Any:
    """``value`` (a JSON body) with :func:`scrubbed` applied to every string in it, keys included."""
    if not target.api_key and target.url == target.shown:
        return value
    if isinstance(value, str):
        return scrubbed(target, value)
    if isinstance(value, list):
        return [_scrubbed_value(target, v) for v in value]
    if isinstance(value, dict):
        return {scrubbed(target, k): _scrubbed_value(target, v) for k, v in value.items()}
    return value


def _fill(path: str, saved: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in saved:
            raise KeyError(name)
        return saved[name]

    return _PLACEHOLDER.sub(one, path)


def _body(response: httpx.Response) -> tuple[Any, bool]:
    """The body parsed as JSON, else its text; and whether it was JSON (an empty body counts as such)."""
    try:
        return response.json(), True
    except ValueError:
        return response.text, not response.content.strip()


def run_case(client: httpx.Client, target: Target, case: Case, saved: dict[str, str]) -> Answer:
    """Send one case; fills ``saved`` from its answer when the case says ``save``."""
    base = target.url if case.base == "api" else saved.get("toolbox")
    try:
        if base is None:
            raise KeyError("toolbox")
        url = base.rstrip("/") + _fill(case.path, saved)
    except KeyError as exc:
        return Answer(None, error=f"needs {{{exc.args[0]}}}, which an earlier case did not save")
    headers = dict(case.headers)
    if target.api_key:
        headers.setdefault("Authorization", f"Bearer {target.api_key}")
    kwargs: dict[str, Any] = {"headers": headers}
    if case.has_json:
        kwargs["json"] = case.json
    elif case.data is not None:
        kwargs["content"] = case.data.encode()
    try:
        response = client.request(case.method, url, **kwargs)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # one case's trouble never ends the run
        error = scrubbed(target, f"{type(exc).__name__}: {exc}")
        return Answer(None, error=error, timed_out=isinstance(exc, httpx.TimeoutException))
    body, is_json = _body(response)
    body = _scrubbed_value(target, body)  # an error page or a debugging proxy may echo the request's headers
    content_type = response.headers.get("content-type", "")
    location = response.headers.get("location")
    if location is not None:  # printed when the answer is refused: a Location may carry credentials too
        location = without_userinfo(scrubbed(target, location))
    answer = Answer(response.status_code, body, None, content_type, location, is_json)
    if case.save and isinstance(answer.body, dict):
        for name, key in case.save.items():
            if isinstance(answer.body.get(key), str):
                saved[name] = answer.body[key]
    return answer


#: Called after each case with its position (from 1), the number of cases, the case and its answer.
Progress = Callable[[int, int, Case, Answer], None]


def run_suite(
    target: Target, cases: list[Case], timeout: float = 120.0, progress: Progress | None = None
) -> dict[str, Answer]:
    """Every case against ``target``, in order; one failing case never stops the others. Whatever ends the run (its
    last case, a ``--cases`` subset without ``delete``, Ctrl-C), the Daytona sandbox it created is deleted: one left
    running would hold the suite's fixed name, and the next run's ``create`` would get a 409."""
    saved: dict[str, str] = {}
    answers: dict[str, Answer] = {}
    with httpx.Client(timeout=timeout) as client:
        try:
            for position, case in enumerate(cases, 1):
                answers[case.id] = run_case(client, target, case, saved)
                if progress is not None:
                    progress(position, len(cases), case, answers[case.id])
        finally:
            _delete_sandbox(client, target, cases, answers, saved)
    return answers


#: The suite's Daytona cases that create and delete its sandbox.
_CREATE = ("POST", "/sandbox")
_DELETE = ("DELETE", "/sandbox/{sandbox}")


def _created_name(case: Case) -> str | None:
    """The sandbox name a Daytona ``create`` case sends, or None for any other case."""
    if case.service != "daytona" or (case.method, case.path) != _CREATE or not isinstance(case.json, dict):
        return None
    name = case.json.get("name")
    return name if isinstance(name, str) else None


def _delete_sandbox(
    client: httpx.Client, target: Target, cases: list[Case], answers: dict[str, Answer], saved: dict[str, str]
) -> None:
    """Delete the sandbox the run created, unless its own ``delete`` case did: by id when ``create`` answered, by
    name when the run stopped while ``create`` was in flight (the sandbox may exist, its id unknown)."""
    if target.service != "daytona":
        return
    if any(
        (c.method, c.path) == _DELETE and 200 <= (answers[c.id].status or 0) < 300 for c in cases if c.id in answers
    ):
        return
    which = saved.get("sandbox")
    if which is None:  # stopped while create was in flight, it is the first case with no answer
        pending = next((c for c in cases if c.id not in answers), None)
        which = _created_name(pending) if pending is not None else None
    if which is None:
        return
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    with contextlib.suppress(httpx.HTTPError, ValueError):  # best effort: else its auto-delete interval ends it
        client.request("DELETE", f"{target.url}/sandbox/{which}", headers=headers, timeout=30.0)


def leftover(target: Target, case: Case, answer: Answer) -> str | None:
    """Why a Daytona ``create`` answered 409: a sandbox of the suite's name exists already (an earlier run's, left
    running), so the answer says nothing of creating one. None for any other answer."""
    name = _created_name(case)
    if name is None or answer.status != 409:
        return None
    return (
        f"case {case.id} got 409 Conflict: a sandbox named {name!r} exists already (left by an earlier run); delete "
        f"it (DELETE {target.shown}/sandbox/{name}, with the key, or in Daytona's dashboard) and record again"
    )


def refused(case: Case, answer: Answer) -> int | None:
    """The status (401/403) with which the service refused the caller instead of answering ``case``, or None. A
    case that sends its own ``Authorization`` header is testing exactly that, so its 401 is an answer."""
    own_auth = any(name.lower() == "authorization" for name in case.headers)
    return answer.status if answer.status in AUTH_STATUSES and not own_auth else None


#: A server error no case expects: a gateway (proxy, load balancer) that did not reach the service.
GATEWAY_STATUSES = (502, 503, 504)


def unexpected(answer: Answer) -> str | None:
    """What ``answer`` is, when it is one the suite never expects and so no answer of the service to record: a
    redirect (a login or HTTPS redirect), a gateway's error or any other 5xx (no case expects the service to fail),
    an HTML page or another non-JSON body (every case, the 4xx ones included, answers JSON). None when it may be
    recorded, or got no HTTP answer at all."""
    status = answer.status
    if status is None:
        return None
    said = f"{status} {phrase(status)}"
    if 300 <= status < 400:
        return f"a redirect ({said}) to {answer.location or 'no Location'}"
    if status in GATEWAY_STATUSES:
        return f"a gateway's error ({said})"
    if status >= 500:
        return f"a server error ({said}): the service failed"
    if "html" in answer.content_type.lower():
        return f"an HTML page ({said}), not the service's JSON"
    if not answer.is_json:
        return f"a body that is not JSON ({said}, {answer.content_type or 'no Content-Type'})"
    return None


def refusal(target: Target, status: int, where: str) -> str:
    """The one line that says the service refused the caller (``status``: 401 or 403) at ``where``."""
    who = "the API key" if target.api_key else "a request without --api-key"
    return f"the service refused {who} ({status} {phrase(status)}) on {where}"


def phrase(status: int) -> str:
    """The status's reason phrase, for messages."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "(non-standard status)"


#: Seconds the probe waits for its answer: a working service answers it at once.
PROBE_TIMEOUT = 30.0


def probe(target: Target, timeout: float | None = None) -> str | None:
    """Why ``target`` is not a working instance of its service, judged by its probe (``PROBES``), which must answer
    2xx: a refused key, a wrong base URL (every case would be recorded as the framework's 404), or no answer in
    time (a hung service would hold every case for its whole timeout). None when the probe succeeds, or its
    connection fails at once (each case then says so itself)."""
    method, path = PROBES[target.service]
    timeout = PROBE_TIMEOUT if timeout is None else timeout
    with httpx.Client(timeout=timeout) as client:
        answer = run_case(client, target, Case("probe", target.service, method, path), {})
    if answer.timed_out:
        return f"its probe {method} {target.shown}{path} got no answer within {timeout:g} s: the service is hung"
    if answer.status is None or 200 <= answer.status < 300:
        return None
    if answer.status in AUTH_STATUSES:
        return refusal(target, answer.status, f"its probe {method} {path}")
    said = f"{method} {target.shown}{path} answered {answer.status} {phrase(answer.status)}"
    if 300 <= answer.status < 400:
        return f"{said}, a redirect to {answer.location or 'no Location'}: is {target.shown} the service's URL?"
    if answer.status in (404, 405):
        return f"{said}: is {target.shown} the base URL? ({_BASE_HINTS[target.service]})"
    return f"{said}, not 2xx: the service is not working"


def select(cases: list[Case], patterns: list[str] | None) -> list[Case]:
    """The cases whose id matches one of the glob ``patterns`` (all when none)."""
    if not patterns:
        return cases
    from fnmatch import fnmatchcase

    return [c for c in cases if any(fnmatchcase(c.id, p) for p in patterns)]
