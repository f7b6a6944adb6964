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
    dangling = client.get(prefix + "/files/info", params={"path": "d/dangling"})
    assert dangling.status_code == 404
    assert (dangling.json()["code"], dangling.json()["message"]) == (
        "FILE_NOT_FOUND",
        "stat d/dangling: no such file or directory",
    )
    unnamed = client.get(prefix + "/files/info", params={"path": ""})
    assert (unnamed.status_code, unnamed.json()["message"]) == (400, "path is required")


def test_times_to_the_nanosecond_as_go_writes_them(tb: tuple[httpx.Client, str]) -> None:
    _run(tb, "touch -d '2026-01-02 03:04:05.120000000 UTC' a && touch -d '2026-01-02 03:04:05 UTC' b")
    a, b = _info(tb, "a"), _info(tb, "b")
    assert (a["modTime"], a["modifiedAt"]) == ("2026-01-02 03:04:05.12 +0000 UTC", "2026-01-02T03:04:05.12Z")
    assert (b["modTime"], b["modifiedAt"]) == ("2026-01-02 03:04:05 +0000 UTC", "2026-01-02T03:04:05Z")


def test_a_listing_is_in_the_order_of_the_names_bytes(tb: tuple[httpx.Client, str]) -> None:
    """Go's ``os.ReadDir`` sorts by bytes: a name with a byte that is no UTF-8 (0x80) before one with ``é`` (0xc3
    0xa9), where Python's order of the decoded names puts it last (U+DC80)."""
    client, prefix = tb
    _run(tb, "mkdir d && touch d/$'\\x80' d/$'\\xc3\\xa9' d/z")
    names = [entry["name"] for entry in client.get(prefix + "/files", params={"path": "d"}).json()]
    assert names == ["z", "\ufffd", "\u00e9"]


def test_the_sdk_raises_its_precise_class_for_the_daemons_codes(api_url: str, api_key: str) -> None:
    """The daemon's envelopes carry ``source: DAYTONA_DAEMON`` and ``code``, so the SDK maps ``FILE_NOT_FOUND`` to
    ``DaytonaFileNotFoundError`` (a subclass of ``DaytonaNotFoundError``) for each route of a missing file, the
    single-path routes and the bulk download under ``download_file`` alike; ``BAD_REQUEST`` is the status class."""
    from daytona import Daytona, DaytonaConfig
    from daytona.common.errors import DaytonaBadRequestError, DaytonaFileNotFoundError

    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        with pytest.raises(DaytonaFileNotFoundError) as missing:
            sandbox.fs.get_file_info("no-such-file")
        assert (missing.value.status_code, missing.value.code, missing.value.source) == (
            404,
            "FILE_NOT_FOUND",
            "DAYTONA_DAEMON",
        )
        assert missing.value.message == "Failed to get file info: stat no-such-file: no such file or directory"
        with pytest.raises(DaytonaFileNotFoundError):
            sandbox.fs.delete_file("no-such-file")
        with pytest.raises(DaytonaFileNotFoundError):
            sandbox.fs.download_file("no-such-file")
        with pytest.raises(DaytonaFileNotFoundError):
            sandbox.fs.list_files("no-such-dir")
        with pytest.raises(DaytonaBadRequestError) as refused:
            sandbox.fs.create_folder("d", "rwx")
        assert refused.value.message == "Failed to create folder: invalid mode format"
    finally:
        daytona.delete(sandbox)


def test_a_single_download_carries_the_handlers_headers(tb: tuple[httpx.Client, str]) -> None:
    """``DownloadFile`` names an attachment after the path's last element (Latin-1 in ``filename``, RFC 5987 in
    ``filename*``) and sets its transfer headers; ``http.ServeFile`` adds ``Last-Modified``."""
    client, prefix = tb
    _run(tb, "mkdir d && printf abc > 'd/a+b é.txt' && touch -d '2026-01-02 03:04:05 UTC' 'd/a+b é.txt'")
    answer = client.get(prefix + "/files/download", params={"path": "d/a+b é.txt"})
    assert answer.status_code == 200 and answer.content == b"abc"
    headers = answer.headers
    assert headers["content-type"] == "application/octet-stream"
    disposition = next(value for name, value in headers.raw if name.lower() == b"content-disposition")
    assert disposition == b"attachment; filename=\"a+b \xe9.txt\"; filename*=utf-8''a+b%20%C3%A9.txt"
    assert (headers["content-description"], headers["content-transfer-encoding"]) == ("File Transfer", "binary")
    assert (headers["expires"], headers["cache-control"], headers["pragma"]) == ("0", "must-revalidate", "public")
    assert headers["last-modified"] == "Fri, 02 Jan 2026 03:04:05 GMT"


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        ("700", "drwx------"),
        ("777", "drwxr-xr-x"),  # less the daemon's umask 022
        ("1777", "drwxr-xr-x"),  # 0o1000 is no Go file mode bit: FileMode.Perm() drops it
        ("4000777", "dtrwxr-xr-x"),  # Go's ModeSticky (1 << 20) is the sticky bit
    ],
)
def test_a_folder_and_its_parents_take_the_mode_as_go_mkdir_all_gives_it(
    tb: tuple[httpx.Client, str], mode: str, shown: str
) -> None:
    """``os.MkdirAll(path, mode)`` makes every missing parent with the same mode, not only the last folder."""
    client, prefix = tb
    assert client.post(prefix + "/files/folder", params={"path": "p/q/r", "mode": mode}).status_code == 201
    assert [_info(tb, path)["mode"] for path in ("p", "p/q", "p/q/r")] == [shown] * 3
    assert client.post(prefix + "/files/folder", params={"path": "p/q", "mode": "700"}).status_code == 201
    assert _info(tb, "p/q")["mode"] == shown  # a folder that is there is left as it is


def test_a_file_info_is_gos_json_of_the_daemons_struct(tb: tuple[httpx.Client, str]) -> None:
    """``FileInfo`` of the daemon that pairs with the SDK 0.226: its struct's fields in their order, ``path``
    (``omitempty``, after ``name``) set for a listing's entries (``filepath.Join`` of the path listed and the name),
    never for ``/files/info``; gin's JSON."""
    client, prefix = tb
    _run(tb, "mkdir d && printf abc > d/f")
    fields = ["name", "size", "mode", "modTime", "modifiedAt", "isDir", "owner", "group", "permissions"]
    info = client.get(prefix + "/files/info", params={"path": "d/f"})
    assert info.headers["content-type"] == "application/json; charset=utf-8"
    assert list(info.json()) == fields
    for listed, path in (("d", "d/f"), ("./d/", "d/f"), ("", "d"), (".", "d")):
        answer = client.get(prefix + "/files/", params={"path": listed} if listed else None)
        assert answer.headers["content-type"] == "application/json; charset=utf-8"
        (entry,) = answer.json()
        assert list(entry) == ["name", "path", *fields[1:]] and entry["path"] == path, listed
