"""The API's sandbox search: what ``GET /sandbox`` answers, one page of the live sandboxes.

Why a module of its own: none of this is the store's. The query is the API's DTO (express's "extended" query parser,
class-transformer's conversions, class-validator's messages in the DTO's property order), the filters and the order
are the API's SQL (Postgres's jsonb containment, ``NULLS LAST``, comparisons with NULL that hold for nothing), and the
cursor is the API's encoding (base64 of ``{"sortValue", "id"}``, decoded as leniently as Node decodes base64). The
store keeps :meth:`SandboxStore.list` (every live sandbox, timers applied); :func:`search` turns it into a page.

Read from the API's source (daytonaio/daytona at 8b6f9b14a, 2026-06-30): the list query DTO, the ``ToArray`` and
``PageLimit`` decorators and the repository's search. What the emulator cannot know it answers as documented in
``docs/daytona.md`` (an unparsable sortValue in a well-formed cursor, V8's non-ISO date forms).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import ApiError
from .sandboxes import Sandbox

#: The API's SandboxState values in its order, less ``destroyed``: what a ``states`` filter may name.
QUERY_STATES: tuple[str, ...] = (
    "creating",
    "restoring",
    "destroying",
    "started",
    "stopped",
    "starting",
    "stopping",
    "error",
    "build_failed",
    "pending_build",
    "building_snapshot",
    "unknown",
    "pulling_snapshot",
    "archived",
    "archiving",
    "resizing",
    "snapshotting",
    "forking",
    "pausing",
    "paused",
    "resuming",
)
#: The API's SandboxClass values, and the one every emulated sandbox has (its JSON's ``sandboxClass``).
SANDBOX_CLASSES: tuple[str, ...] = ("linux-vm", "container", "windows")
SANDBOX_CLASS = "container"
SORT_FIELDS: tuple[str, ...] = ("name", "cpu", "memoryGib", "diskGib", "lastActivityAt", "createdAt")
ORDERS: tuple[str, ...] = ("asc", "desc")
#: The states that, with ``desiredState`` destroyed, only ``includeErroredDeleted`` shows.
_ERRORED = frozenset({"error", "build_failed"})

#: A query parameter as express's extended parser gives it: a string, or an array (repeated or ``key[]``).
QueryValue = str | list[str]
SortValue = str | int | float | datetime


@dataclass(frozen=True)
class SearchQuery:
    """The query after the DTO's conversions and validation; None where the parameter was absent."""

    cursor: str | None = None
    limit: int = 100
    id: str | None = None
    name: str | None = None
    labels: str | None = None
    include_errored_deleted: bool = False
    states: tuple[str, ...] | None = None
    snapshots: tuple[str, ...] | None = None
    region_ids: tuple[str, ...] | None = None
    sandbox_classes: tuple[str, ...] | None = None
    min_cpu: int | None = None
    max_cpu: int | None = None
    min_memory: int | None = None
    max_memory: int | None = None
    min_disk: int | None = None
    max_disk: int | None = None
    min_gpu: int | None = None
    max_gpu: int | None = None
    is_public: bool | None = None
    is_recoverable: bool | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    activity_after: datetime | None = None
    activity_before: datetime | None = None
    sort: str = "lastActivityAt"
    order: str = "desc"


@dataclass(frozen=True)
class Page:
    items: list[Sandbox]
    next_cursor: str | None


# ---------------------------------------------------------------------------------------------------- query parsing

_BRACKETS = re.compile(r"^(.+?)\[(\d*)\]$")


def parse_query(pairs: Iterable[tuple[str, str]]) -> dict[str, QueryValue]:
    """Decoded ``(key, value)`` pairs as express's extended parser (qs) groups them: a key given once is a string,
    one repeated (``a=1&a=2``) or written ``a[]``/``a[0]`` an array, in order. No comma splitting."""
    grouped: dict[str, QueryValue] = {}
    for raw_key, value in pairs:
        match = _BRACKETS.match(raw_key)
        key = match.group(1) if match else raw_key
        if not key:
            continue
        held = grouped.get(key)
        if held is None:
            grouped[key] = [value] if match else value
        elif isinstance(held, list):
            held.append(value)
        else:
            grouped[key] = [held, value]
    return grouped


#: JavaScript's white space and line terminators, which ``Number(string)`` trims.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(map(chr, range(0x2000, 0x200B)))
_JS_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_JS_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def js_number(value: QueryValue) -> float:
    """``Number(value)`` as class-transformer's ``@Type(() => Number)`` converts a query string; an array (a repeated
    parameter) is NaN to every numeric check."""
    if isinstance(value, list):
        return math.nan
    text = value.strip(_JS_SPACE)
    if not text:
        return 0.0
    if text in ("Infinity", "+Infinity", "-Infinity"):
        return -math.inf if text.startswith("-") else math.inf
    if _JS_DECIMAL.fullmatch(text):
        return float(text)
    if _JS_RADIX.fullmatch(text):
        return float(int(text[2:], {"x": 16, "o": 8, "b": 2}[text[1].lower()]))
    return math.nan


_JS_DATE = re.compile(
    r"([+-]\d{6}|\d{4})(?:-(\d{2})(?:-(\d{2}))?)?"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?"
    r"\s*([Zz]|[+-]\d{2}:?\d{2})?"
)
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def js_date(value: QueryValue, *, ms: bool = True) -> datetime | None:
    """``new Date(value)`` for the ISO 8601 forms (what the SDK sends: ``%Y-%m-%dT%H:%M:%S.%f%z``), as an aware UTC
    datetime truncated to milliseconds (a JavaScript Date's precision; ``ms=False`` keeps microseconds, as Postgres
    reads a cursor's timestamp); None for an Invalid Date. A date-time without an offset is taken as UTC (JavaScript
    takes the server's local time). V8's other, non-ISO forms are not parsed here."""
    if isinstance(value, list):
        return None
    match = _JS_DATE.fullmatch(value.strip(_JS_SPACE))
    if match is None:
        return None
    year_s, month_s, day_s, hour_s, minute_s, second_s, fraction, offset = match.groups()
    if year_s == "-000000":
        return None
    year = int(year_s)
    month, day = int(month_s or 1), int(day_s or 1)
    hour, minute, second = int(hour_s or 0), int(minute_s or 0), int(second_s or 0)
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    if ms:
        micros -= micros % 1000
    extra = timedelta()
    if hour == 24 and minute == second == micros == 0:  # ISO's end of day
        hour, extra = 0, timedelta(days=1)
    shift = timedelta()
    if offset and offset not in ("Z", "z"):
        digits = offset[1:].replace(":", "")
        if int(digits[:2]) > 23 or int(digits[2:]) > 59:
            return None
        shift = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        if offset[0] == "-":
            shift = -shift
    if not (1 <= month <= 12 and hour <= 23 and minute <= 59 and second <= 59):
        return None
    if not 1 <= year <= 9999:  # a Date Python cannot hold (JavaScript's reach ±275,760 years): before or after all
        return _EARLIEST if year < 1 else _LATEST
    try:
        stamp = datetime(year, month, day, hour, minute, second, micros, tzinfo=timezone.utc)
        return stamp + extra - shift
    except (ValueError, OverflowError):
        return None


def _each_value(prop: str, allowed: Sequence[str]) -> str:
    return f"each value in {prop} must be one of the following values: {', '.join(allowed)}"


def validate(params: dict[str, QueryValue]) -> SearchQuery:
    """The DTO: convert each parameter, check it, and answer 400 with every failing constraint's message (the DTO's
    property order; a property's messages last decorator first, as class-validator lists them) joined by ", "."""
    errors: list[str] = []
    values: dict[str, Any] = {}

    def string(prop: str, field: str) -> None:
        value = params.get(prop)
        if value is None:
            return
        if isinstance(value, list):
            errors.append(f"{prop} must be a string")
        else:
            values[field] = value

    def integer(prop: str, field: str, least: int, most: int | None = None) -> None:
        if prop not in params:
            return
        number = js_number(params[prop])
        failed = []
        if most is not None and not number <= most:
            failed.append(f"{prop} must not be greater than {most}")
        if not number >= least:
            failed.append(f"{prop} must not be less than {least}")
        if not (math.isfinite(number) and number.is_integer()):
            failed.append(f"{prop} must be an integer number")
        errors.extend(failed)
        if not failed:
            values[field] = int(number)

    def boolean(prop: str, field: str) -> None:
        if prop in params:
            values[field] = params[prop] == "true"

    def array(prop: str, field: str, allowed: Sequence[str] | None = None, message: str | None = None) -> None:
        value = params.get(prop)
        if not value:  # ToArray: an empty value is no filter
            return
        items = value if isinstance(value, list) else [value]
        if allowed is not None and any(item not in allowed for item in items):
            errors.append(message or _each_value(prop, allowed))
        else:
            values[field] = tuple(items)

    def date(prop: str, field: str) -> None:
        if prop not in params:
            return
        stamp = js_date(params[prop])
        if stamp is None:
            errors.append(f"{prop} must be a Date instance")
        else:
            values[field] = stamp

    def choice(prop: str, allowed: Sequence[str]) -> None:
        value = params.get(prop)
        if value is None:
            return
        if isinstance(value, list) or value not in allowed:
            errors.append(f"{prop} must be one of the following values: {', '.join(allowed)}")
        else:
            values[prop] = value

    string("cursor", "cursor")
    integer("limit", "limit", 1, 200)
    string("id", "id")
    string("name", "name")
    string("labels", "labels")
    boolean("includeErroredDeleted", "include_errored_deleted")
    states_message = f"each value must be one of the following values: {', '.join(QUERY_STATES)}"
    array("states", "states", QUERY_STATES, states_message)
    array("snapshots", "snapshots")
    array("regionIds", "region_ids")
    array("sandboxClasses", "sandbox_classes", SANDBOX_CLASSES)
    integer("minCpu", "min_cpu", 1)
    integer("maxCpu", "max_cpu", 1)
    integer("minMemoryGiB", "min_memory", 1)
    integer("maxMemoryGiB", "max_memory", 1)
    integer("minDiskGiB", "min_disk", 1)
    integer("maxDiskGiB", "max_disk", 1)
    integer("minGpu", "min_gpu", 0)
    integer("maxGpu", "max_gpu", 0)
    boolean("isPublic", "is_public")
    boolean("isRecoverable", "is_recoverable")
    date("createdAtAfter", "created_after")
    date("createdAtBefore", "created_before")
    date("lastEventAfter", "activity_after")
    date("lastEventBefore", "activity_before")
    choice("sort", SORT_FIELDS)
    choice("order", ORDERS)
    if errors:
        raise ApiError(400, ", ".join(errors))
    return SearchQuery(**values)


# ---------------------------------------------------------------------------------------------------- the search


def _recoverable(sandbox: Sandbox) -> bool | None:
    """What the sandbox's JSON says of ``recoverable`` (see :meth:`Sandbox.to_json`)."""
    return False if sandbox.state == "error" else None


def _stamp(text: str) -> datetime | None:
    return js_date(text, ms=False) if text else None


def sort_value(sandbox: Sandbox, field: str) -> SortValue | None:
    """The sandbox's value of a sort field; None is SQL's NULL (a sandbox with no ``lastActivityAt``)."""
    if field == "name":
        return sandbox.name
    if field == "cpu":
        return sandbox.cpu
    if field == "memoryGib":
        return sandbox.memory
    if field == "diskGib":
        return sandbox.disk
    return _stamp(sandbox.created_at if field == "createdAt" else sandbox.last_activity_at)


def _labels_filter(raw: str) -> Any:
    """The ``labels`` query's JSON, or None where the API filters nothing: its search parses the query and both its
    adapters filter only ``if (filters.labels)``, so a value JavaScript takes for false (``null``, ``false``, ``0``,
    ``""``) lists every sandbox; ``{}`` and ``[]`` are true there."""

    def refuse(constant: str) -> Any:
        raise ValueError(constant)  # JSON.parse knows no NaN or Infinity

    try:
        wanted = json.loads(raw, parse_constant=refuse)
    except (ValueError, RecursionError):
        raise ApiError(400, "Invalid labels JSON format") from None
    return wanted if _js_truthy(wanted) else None


def _js_truthy(value: Any) -> bool:
    """Whether JavaScript takes a parsed JSON value for true (an empty object or array is)."""
    if value is None or value is False or value == "":
        return False
    return not (isinstance(value, int | float) and not isinstance(value, bool) and value == 0)


def _contains(labels: dict[str, str], wanted: Any) -> bool:
    """Postgres's ``labels @> wanted`` for a labels object of strings: every key of an object present with an equal
    value (``{}`` holds for all); an array, scalar or null is contained by no object."""
    if not isinstance(wanted, dict):
        return False
    return all(isinstance(value, str) and labels.get(key) == value for key, value in wanted.items())


def _nodes_base64(text: str) -> bytes:
    """``Buffer.from(text, 'base64')``: either alphabet, anything else (padding included) skipped."""
    kept = "".join(c for c in text if c.isascii() and (c.isalnum() or c in "+/-_"))
    kept = kept.translate(str.maketrans("-_", "+/"))
    if len(kept) % 4 == 1:  # a lone sextet makes no byte
        kept = kept[:-1]
    try:
        return base64.b64decode(kept + "=" * (-len(kept) % 4))
    except (binascii.Error, ValueError):
        return b""


def _cursor_after(raw: str, field: str) -> tuple[SortValue | None, str]:
    """The cursor's ``(sortValue, id)``, sortValue read as the sort field's type; 400 when it is not base64 of a JSON
    object holding both (for a wrong type the API would hand the value to Postgres; here it is the same 400)."""
    invalid = ApiError(400, f"Invalid cursor provided: {raw}")

    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        decoded = json.loads(_nodes_base64(raw).decode("utf-8", errors="replace"), parse_constant=refuse)
    except (ValueError, RecursionError):
        raise invalid from None
    if not isinstance(decoded, dict) or "sortValue" not in decoded or not isinstance(decoded.get("id"), str):
        raise invalid
    value = decoded["sortValue"]
    if value is None:
        return None, decoded["id"]
    if field in ("createdAt", "lastActivityAt"):
        stamp = js_date(value, ms=False) if isinstance(value, str) else None
        if stamp is None:
            raise invalid
        return stamp, decoded["id"]
    if field == "name":
        if not isinstance(value, str):
            raise invalid
        return value, decoded["id"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid
    return value, decoded["id"]


def _iso(stamp: datetime) -> str:
    """``Date.prototype.toISOString``."""
    return stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_cursor(value: SortValue | None, sandbox_id: str) -> str:
    """Base64 of ``JSON.stringify({sortValue, id})``: compact, keys in that order, dates as ISO strings."""
    if isinstance(value, datetime):
        value = _iso(value)
    text = json.dumps({"sortValue": value, "id": sandbox_id}, ensure_ascii=False, separators=(",", ":"))
    text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _in_range(value: int, least: int | None, most: int | None) -> bool:
    return (least is None or value >= least) and (most is None or value <= most)


def _between(stamp: datetime | None, after: datetime | None, before: datetime | None) -> bool:
    if after is None and before is None:
        return True
    if stamp is None:  # NULL compares to nothing
        return False
    return (after is None or stamp >= after) and (before is None or stamp <= before)


def _matches(sandbox: Sandbox, query: SearchQuery, labels: Any) -> bool:
    state = sandbox.state
    if state == "destroyed":
        return False
    if query.states is not None and state not in query.states:
        return False
    if not query.include_errored_deleted and state in _ERRORED and sandbox.desired_state == "destroyed":
        return False
    if query.id and not sandbox.id.lower().startswith(query.id.lower()):
        return False
    if query.name and not sandbox.name.lower().startswith(query.name.lower()):
        return False
    if labels is not None and not _contains(sandbox.labels, labels):
        return False
    if query.snapshots is not None and sandbox.snapshot not in query.snapshots:
        return False
    if query.region_ids is not None and sandbox.target not in query.region_ids:
        return False
    if query.sandbox_classes is not None and SANDBOX_CLASS not in query.sandbox_classes:
        return False
    resources = (
        (sandbox.cpu, query.min_cpu, query.max_cpu),
        (sandbox.memory, query.min_memory, query.max_memory),
        (sandbox.disk, query.min_disk, query.max_disk),
        (sandbox.gpu, query.min_gpu, query.max_gpu),
    )
    if not all(_in_range(value, least, most) for value, least, most in resources):
        return False
    if query.is_public is not None and sandbox.public != query.is_public:
        return False
    if query.is_recoverable is not None and _recoverable(sandbox) != query.is_recoverable:  # NULL = x holds for none
        return False
    if not _between(_stamp(sandbox.created_at), query.created_after, query.created_before):
        return False
    return _between(_stamp(sandbox.last_activity_at), query.activity_after, query.activity_before)


def _after_cursor(value: SortValue | None, sandbox_id: str, cursor: tuple[SortValue | None, str], asc: bool) -> bool:
    """``field op :v OR (field = :v AND id op :id)``, op ``>`` ascending, ``<`` descending; false where a NULL is
    compared (an item without the field, or a cursor whose sortValue is null)."""
    bound, bound_id = cursor
    if value is None or bound is None:
        return False
    try:
        if value == bound:
            return sandbox_id > bound_id if asc else sandbox_id < bound_id
        return bool(value > bound) if asc else bool(value < bound)  # type: ignore[operator]
    except TypeError:
        return False


def search(sandboxes: Iterable[Sandbox], query: SearchQuery) -> Page:
    """One page: the matching sandboxes sorted by the field (``NULLS LAST``, the id breaking ties the same way), from
    after the cursor, ``limit`` of them, and the cursor of the next page when one more was found."""
    labels = _labels_filter(query.labels) if query.labels else None
    cursor = _cursor_after(query.cursor, query.sort) if query.cursor else None
    asc = query.order == "asc"
    keyed = [(sort_value(s, query.sort), s) for s in sandboxes if _matches(s, query, labels)]
    if cursor is not None:
        keyed = [(value, s) for value, s in keyed if _after_cursor(value, s.id, cursor, asc)]
    present = sorted(((v, s) for v, s in keyed if v is not None), key=lambda vs: (vs[0], vs[1].id), reverse=not asc)
    absent = sorted((s for v, s in keyed if v is None), key=lambda s: s.id, reverse=not asc)
    ordered = [s for _, s in present] + absent
    if len(ordered) <= query.limit:
        return Page(ordered, None)
    items = ordered[: query.limit]
    last = items[-1]
    return Page(items, encode_cursor(sort_value(last, query.sort), last.id))
