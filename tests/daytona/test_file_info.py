"""``FileInfo`` as the daemon's ``getFileInfo`` (v0.190) makes it: ``os.Stat``, so a link shows what it leads to
(and a listing leaves out a link that leads nowhere); ``mode`` as Go's ``FileMode.String()``; ``permissions`` the
nine permission bits; ``owner`` and ``group`` the numeric ids of the sandbox user (1000); ``modTime`` as Go's
``time.String()`` and ``modifiedAt`` as RFC 3339, both to the nanosecond with trailing zeros dropped."""

from __future__ import annotations

import stat
from typing import Any

import httpx
import pytest

from emulator.daytona.files import go_file_mode


def _run(tb: tuple[httpx.Client, str], command: str) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": command})
    assert answer.json()["exitCode"] == 0, answer.text


def _info(tb: tuple[httpx.Client, str], path: str) -> dict[str, Any]:
    client, prefix = tb
    answer = client.get(prefix + "/files/info", params={"path": path})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        (stat.S_IFREG | 0o644, "-rw-r--r--"),
        (stat.S_IFDIR | 0o755, "drwxr-xr-x"),
        (stat.S_IFDIR | 0o1777, "dtrwxrwxrwx"),
        (stat.S_IFDIR | 0o2775, "dgrwxrwxr-x"),
        (stat.S_IFREG | 0o4755, "urwxr-xr-x"),
        (stat.S_IFLNK | 0o777, "Lrwxrwxrwx"),
        (stat.S_IFIFO | 0o600, "prw-------"),
        (stat.S_IFSOCK | 0o755, "Srwxr-xr-x"),
        (stat.S_IFCHR | 0o666, "Dcrw-rw-rw-"),
        (stat.S_IFBLK | 0o660, "Drw-rw----"),
    ],
)
def test_a_mode_reads_as_gos_file_mode_string(mode: int, shown: str) -> None:
    assert go_file_mode(mode) == shown


def test_info_of_files_dirs_and_flags(tb: tuple[httpx.Client, str]) -> None:
    _run(tb, "mkdir shared && chmod 1777 shared && mkdir group && chmod 2775 group && printf abc > f && mkfifo pipe")
    assert {k: _info(tb, "shared")[k] for k in ("mode", "permissions", "isDir")} == {
        "mode": "dtrwxrwxrwx",
        "permissions": "0777",  # the permission bits alone, as Go's Perm()
        "isDir": True,
    }
    assert (_info(tb, "group")["mode"], _info(tb, "group")["permissions"]) == ("dgrwxrwxr-x", "0775")
    f = _info(tb, "f")
    assert (f["mode"], f["permissions"], f["size"], f["owner"], f["group"]) == ("-rw-r--r--", "0644", 3, "1000", "1000")
    assert _info(tb, "pipe")["mode"] == "prw-r--r--"


def test_a_link_shows_what_it_leads_to_and_one_that_leads_nowhere_is_left_out(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    _run(tb, "mkdir d && printf hello > d/target && ln -s target d/link && ln -s missing d/dangling")
    link = _info(tb, "d/link")
    assert (link["name"], link["size"], link["mode"], link["isDir"]) == ("link", 5, "-rw-r--r--", False)
    listed = client.get(prefix + "/files", params={"path": "d"}).json()
    assert [entry["name"] for entry in listed] == ["link", "target"]
    assert client.get(prefix + "/files/info", params={"path": "d/dangling"}).status_code == 404
    assert client.get(prefix + "/files/info", params={"path": ""}).json()["message"] == "path is required"


def test_times_to_the_nanosecond_as_go_writes_them(tb: tuple[httpx.Client, str]) -> None:
    _run(tb, "touch -d '2026-01-02 03:04:05.120000000 UTC' a && touch -d '2026-01-02 03:04:05 UTC' b")
    a, b = _info(tb, "a"), _info(tb, "b")
    assert (a["modTime"], a["modifiedAt"]) == ("2026-01-02 03:04:05.12 +0000 UTC", "2026-01-02T03:04:05.12Z")
    assert (b["modTime"], b["modifiedAt"]) == ("2026-01-02 03:04:05 +0000 UTC", "2026-01-02T03:04:05Z")
