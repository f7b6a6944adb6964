"""``GET /sandbox`` as the API's search: the SDK's ``list`` pages, filters and order, and the query's 400s.

Activity times are set on the store's sandboxes (fixed past stamps, no sleeps), so the default order (the most
recently active first) is known before a request runs.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from daytona import (
    Daytona,
    DaytonaConfig,
    ListSandboxesQuery,
    SandboxListSortDirection,
    SandboxListSortField,
    SandboxState,
)

from emulator.daytona.sandboxes import Sandbox, SandboxStore
from emulator.daytona.search import QUERY_STATES
from emulator.server import EmulatorServer


@pytest.fixture
def client(server: EmulatorServer, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url + "/api", headers={"Authorization": f"Bearer {api_key}"}) as c:
        yield c


@pytest.fixture
def store(server: EmulatorServer) -> SandboxStore:
    return server.emulator.daytona.store


@pytest.fixture
def sdk(api_url: str, api_key: str) -> Daytona:
    return Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))


def _create(client: httpx.Client, **body: Any) -> str:
    created = client.post("/sandbox", json=body)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _stamp(second: int) -> str:
    return f"2020-01-01T00:00:{second:02d}.000Z"


def _group(client: httpx.Client, store: SandboxStore, activity: list[int], **body: Any) -> tuple[str, list[str]]:
    """Sandboxes labelled with a fresh group, the i-th last active at second ``activity[i]`` of 2020."""
    group = uuid.uuid4().hex[:8]
    ids = [_create(client, labels={"group": group}, **body) for _ in activity]
    for sid, second in zip(ids, activity, strict=True):
        _sandbox(store, sid).last_activity_at = _stamp(second)
    return group, ids


def _sandbox(store: SandboxStore, sid: str) -> Sandbox:
    found = store.find(sid)
    assert found is not None
    return found


def _by_activity(ids: list[str], activity: list[int]) -> list[str]:
    """The ids the most recently active first."""
    return [sid for _, sid in sorted(zip(activity, ids, strict=True), reverse=True)]


def _list(client: httpx.Client, params: Any) -> dict[str, Any]:
    answer = client.get("/sandbox", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _ids(client: httpx.Client, params: Any) -> list[str]:
    return [item["id"] for item in _list(client, params)["items"]]


def _decode(cursor: str) -> tuple[list[str], dict[str, Any]]:
    text = base64.b64decode(cursor).decode()
    return list(json.loads(text)), json.loads(text)


# ------------------------------------------------------------------------------------------------ through the SDK


def test_sdk_pages_most_recently_active_first(
    client: httpx.Client, store: SandboxStore, sdk: Daytona, server: EmulatorServer
) -> None:
    activity = [3, 9, 1, 7, 5]
    group, ids = _group(client, store, activity)
    since = server.emulator.journal.entries()[-1].seq
    listed = [s.id for s in sdk.list(ListSandboxesQuery(labels={"group": group}, limit=2))]
    assert listed == _by_activity(ids, activity)
    assert len(server.emulator.journal.entries("daytona.sandbox.list", since=since)) == 3  # 2 + 2 + 1

    # A command is activity: the least recently active sandbox comes first.
    least = ids[activity.index(min(activity))]
    assert sdk.get(least).process.exec("true").exit_code == 0
    listed = [s.id for s in sdk.list(ListSandboxesQuery(labels={"group": group}, limit=2))]
    assert listed[0] == least
    assert listed[1:] == [sid for sid in _by_activity(ids, activity) if sid != least]

    ascending = ListSandboxesQuery(labels={"group": group}, limit=3, order=SandboxListSortDirection.ASC)
    assert [s.id for s in sdk.list(ascending)] == listed[::-1]


def test_sdk_label_containment(client: httpx.Client, store: SandboxStore, sdk: Daytona) -> None:
    group = uuid.uuid4().hex[:8]
    both = _create(client, labels={"group": group, "a": "1", "b": "2"})
    only_a = _create(client, labels={"group": group, "a": "1"})
    other_a = _create(client, labels={"group": group, "a": "2"})
    for second, sid in enumerate((both, only_a, other_a)):
        _sandbox(store, sid).last_activity_at = _stamp(second)

    def listed(labels: dict[str, str]) -> list[str]:
        return [s.id for s in sdk.list(ListSandboxesQuery(labels={"group": group, **labels}))]

    assert listed({}) == [other_a, only_a, both]
    assert listed({"a": "1"}) == [only_a, both]
    assert listed({"a": "1", "b": "2"}) == [both]
    assert listed({"b": "1"}) == []
    # Postgres's containment: an empty object holds for every sandbox, an array or scalar for none.
    assert set(_ids(client, {"labels": "{}"})) == {both, only_a, other_a}
    assert _ids(client, {"labels": "[]"}) == []
    assert _ids(client, {"labels": '{"a": 1}'}) == []
    assert _ids(client, {"labels": "1"}) == []
    # The API filters only ``if (filters.labels)``: JSON that JavaScript takes for false filters nothing.
    for falsy in ("null", "false", "0", "-0.0", '""'):
        assert set(_ids(client, {"labels": falsy})) == {both, only_a, other_a}, falsy


def test_sdk_states_filter(client: httpx.Client, store: SandboxStore, sdk: Daytona) -> None:
    group, (started, stopped, other) = _group(client, store, [1, 2, 3])
    assert client.post(f"/sandbox/{stopped}/stop").status_code == 200
    store.fail_next_creates(1, "error", "emulated")
    errored = _create(client, labels={"group": group})
    _sandbox(store, stopped).last_activity_at = _stamp(2)
    _sandbox(store, errored).last_activity_at = _stamp(4)

    def listed(*states: SandboxState) -> list[str]:
        return [s.id for s in sdk.list(ListSandboxesQuery(labels={"group": group}, states=list(states)))]

    assert listed(SandboxState.STARTED) == [other, started]
    assert listed(SandboxState.STOPPED, SandboxState.ERROR) == [errored, stopped]
    assert listed() == [errored, other, stopped, started]

    # An errored sandbox whose deletion is pending shows only with includeErroredDeleted.
    _sandbox(store, errored).desired_state = "destroyed"
    assert listed() == [other, stopped, started]
    assert listed(SandboxState.ERROR) == []
    labels = json.dumps({"group": group})
    assert _ids(client, {"labels": labels, "includeErroredDeleted": "true"}) == [errored, other, stopped, started]
    assert _ids(client, {"labels": labels, "includeErroredDeleted": "1"}) == [other, stopped, started]
    # One state is a one-element array; a comma is part of the value, not a separator.
    assert _ids(client, {"labels": labels, "states": "stopped"}) == [stopped]
    assert client.get("/sandbox", params={"states": "started,stopped"}).status_code == 400


def test_sdk_resource_ranges(client: httpx.Client, store: SandboxStore, sdk: Daytona) -> None:
    group = uuid.uuid4().hex[:8]
    ids = [_create(client, labels={"group": group}, cpu=cpu, memory=cpu * 2, disk=cpu * 3) for cpu in (1, 2, 4)]
    for second, sid in enumerate(ids):
        _sandbox(store, sid).last_activity_at = _stamp(second)
    one, two, four = ids

    def listed(**ranges: int) -> list[str]:
        return [s.id for s in sdk.list(ListSandboxesQuery(labels={"group": group}, **ranges))]

    assert listed(min_cpu=2, max_cpu=3) == [two]
    assert listed(min_cpu=2) == [four, two]
    assert listed(max_cpu=2) == [two, one]  # inclusive
    assert listed(min_memory_gib=4, max_memory_gib=8) == [four, two]
    assert listed(min_disk_gib=3, max_disk_gib=3) == [one]
    labels = json.dumps({"group": group})
    assert _ids(client, {"labels": labels, "minGpu": "0", "maxGpu": "0"}) == [four, two, one]
    assert _ids(client, {"labels": labels, "minGpu": "1"}) == []
    by_cpu = ListSandboxesQuery(labels={"group": group}, sort=SandboxListSortField.CPU, limit=1)
    assert [s.id for s in sdk.list(by_cpu)] == [four, two, one]


# ------------------------------------------------------------------------------------------------ raw HTTP


def test_other_filters(client: httpx.Client, store: SandboxStore) -> None:
    group, (first, second, third) = _group(client, store, [1, 2, 3], snapshot="snap-a")
    _sandbox(store, second).public = True
    _sandbox(store, third).snapshot = "snap-b"
    _sandbox(store, first).created_at = "2021-06-01T00:00:00.000Z"
    _sandbox(store, second).created_at = "2021-06-02T00:00:00.000Z"
    labels = json.dumps({"group": group})

    def ids(**params: Any) -> list[str]:
        return _ids(client, {"labels": labels, **params})

    assert ids(isPublic="true") == [second]
    assert ids(isPublic="false") == [third, first]
    assert ids(isRecoverable="false") == [] and ids(isRecoverable="true") == []  # NULL for a sandbox not in error
    assert ids(snapshots=["snap-b", "nothing"]) == [third]
    assert ids(snapshots="snap-a") == [second, first]
    assert ids(regionIds="us") == [third, second, first]
    assert ids(regionIds="eu") == []
    assert ids(sandboxClasses=["container"]) == [third, second, first]
    assert ids(sandboxClasses="linux-vm") == []
    assert ids(createdAtAfter="2021-06-02T00:00:00Z") == [third, second]  # inclusive
    assert ids(createdAtBefore="2021-06-02T00:00:00.000000+0000") == [second, first]
    assert ids(createdAtAfter="2021-06-01T12:00:00+02:00", createdAtBefore="2021-06-30") == [second]
    assert ids(lastEventAfter=_stamp(2), lastEventBefore=_stamp(2)) == [second]
    assert ids(lastEventBefore="2019-12-31") == []
    assert ids(id=second[:6].upper()) == [second]
    _sandbox(store, first).name = "Alpha-" + group
    assert ids(name="alpha-") == [first]
    assert ids(autoDestroyAtAfter="not looked at") == [third, second, first]


def test_nulls_last_and_id_tie_break(client: httpx.Client, store: SandboxStore) -> None:
    group, ids = _group(client, store, [5, 5, 5])
    never = _create(client, labels={"group": group})
    _sandbox(store, never).last_activity_at = ""  # NULL
    labels = json.dumps({"group": group})
    assert _ids(client, {"labels": labels}) == [*sorted(ids, reverse=True), never]
    assert _ids(client, {"labels": labels, "order": "asc"}) == [*sorted(ids), never]
    names = ["b", "a", "c"]
    for sid, name in zip(ids, names, strict=True):
        _sandbox(store, sid).name = f"{name}-{group}"
    _sandbox(store, never).name = f"d-{group}"
    assert _ids(client, {"labels": labels, "sort": "name", "order": "asc"}) == [ids[1], ids[0], ids[2], never]


def test_cursor_shape_and_pages(client: httpx.Client, store: SandboxStore) -> None:
    group, ids = _group(client, store, [1, 2, 3])
    labels = json.dumps({"group": group})
    first = _list(client, {"labels": labels, "limit": "2"})
    assert [i["id"] for i in first["items"]] == [ids[2], ids[1]]
    keys, cursor = _decode(first["nextCursor"])
    assert keys == ["sortValue", "id"]
    assert cursor == {"sortValue": _stamp(2), "id": ids[1]}
    text = base64.b64decode(first["nextCursor"]).decode()
    assert text == json.dumps(cursor, separators=(",", ":"))
    rest = _list(client, {"labels": labels, "limit": "2", "cursor": first["nextCursor"]})
    assert [i["id"] for i in rest["items"]] == [ids[0]]
    assert rest["nextCursor"] is None
    # Decoded as leniently as Node: no padding, the URL-safe alphabet, stray characters.
    lenient = first["nextCursor"].rstrip("=").replace("+", "-").replace("/", "_")
    lenient = lenient[:4] + "*" + lenient[4:]
    assert _ids(client, {"labels": labels, "limit": "2", "cursor": lenient}) == [ids[0]]

    _sandbox(store, ids[0]).cpu, _sandbox(store, ids[1]).cpu, _sandbox(store, ids[2]).cpu = 4, 2, 2
    by_cpu = _list(client, {"labels": labels, "limit": "1", "sort": "cpu", "order": "asc"})
    low = sorted(ids[1:])[0]
    assert _decode(by_cpu["nextCursor"])[1] == {"sortValue": 2, "id": low}
    by_created = _list(client, {"labels": labels, "limit": "1", "sort": "createdAt"})
    newest = max(ids, key=lambda sid: (_sandbox(store, sid).created_at, sid))  # one millisecond may hold two
    assert _decode(by_created["nextCursor"])[1] == {"sortValue": _sandbox(store, newest).created_at, "id": newest}
    # A hand-made cursor: after every sandbox active at second 2 or later (descending), ties by id.
    made = base64.b64encode(json.dumps({"sortValue": _stamp(2), "id": ids[1]}).encode()).decode()
    assert _ids(client, {"labels": labels, "cursor": made}) == [ids[0]]


_STATES = ", ".join(QUERY_STATES)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"limit": "abc"},
            "limit must not be greater than 200, limit must not be less than 1, limit must be an integer number",
        ),
        ({"limit": "0"}, "limit must not be less than 1"),
        ({"limit": ""}, "limit must not be less than 1"),
        ({"limit": "201"}, "limit must not be greater than 200"),
        ({"limit": "1.5"}, "limit must be an integer number"),
        ({"minCpu": "x"}, "minCpu must not be less than 1, minCpu must be an integer number"),
        ({"maxDiskGiB": "0"}, "maxDiskGiB must not be less than 1"),
        ({"minMemoryGiB": "2.5"}, "minMemoryGiB must be an integer number"),
        ({"labels": "{not json"}, "Invalid labels JSON format"),
        ({"labels": "NaN"}, "Invalid labels JSON format"),
        ({"states": "destroyed"}, f"each value must be one of the following values: {_STATES}"),
        ({"states": "started,stopped"}, f"each value must be one of the following values: {_STATES}"),
        (
            {"sandboxClasses": "vm"},
            "each value in sandboxClasses must be one of the following values: linux-vm, container, windows",
        ),
        ({"createdAtAfter": "yesterday"}, "createdAtAfter must be a Date instance"),
        ({"lastEventBefore": "2024-13-01"}, "lastEventBefore must be a Date instance"),
        (
            {"sort": "id"},
            "sort must be one of the following values: name, cpu, memoryGib, diskGib, lastActivityAt, createdAt",
        ),
        ({"order": "up"}, "order must be one of the following values: asc, desc"),
        ({"cursor": "!!!"}, "Invalid cursor provided: !!!"),
        ({"cursor": "bm90IGpzb24"}, "Invalid cursor provided: bm90IGpzb24"),  # "not json"
        ({"id": ["a", "b"]}, "id must be a string"),
        (
            {"order": "up", "limit": "500", "createdAtBefore": "x", "minCpu": "0"},
            "limit must not be greater than 200, minCpu must not be less than 1, "
            "createdAtBefore must be a Date instance, order must be one of the following values: asc, desc",
        ),
    ],
)
def test_query_refusals(client: httpx.Client, params: dict[str, Any], message: str) -> None:
    answer = client.get("/sandbox", params=params)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["message"] == message
    assert (body["statusCode"], body["error"], body["path"]) == (400, "Bad Request", "/api/sandbox")
