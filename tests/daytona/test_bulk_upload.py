"""``/files/bulk-upload`` as the daemon's ``UploadFiles`` (v0.190): a file is written as ``os.Create`` writes it,
truncated in place (its inode, mode and other links kept), through a link at its name; a new one 0644; its path
trimmed; and the daemon's words for what it refuses."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from emulator.server import EmulatorServer


@pytest.fixture
def tb(server: EmulatorServer, api_key: str) -> tuple[httpx.Client, str, str]:
    client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    return client, f"/toolbox/{sid}", server.emulator.daytona.store.get(sid).home


def _upload(client: httpx.Client, prefix: str, fields: list[tuple[str, tuple[str | None, bytes]]]) -> httpx.Response:
    return client.post(prefix + "/files/bulk-upload", files=fields)


def test_an_existing_file_is_rewritten_in_place(tb: tuple[httpx.Client, str, str]) -> None:
    client, prefix, home = tb
    command = "printf old > run.sh && chmod 750 run.sh && ln run.sh other-name && ln -s run.sh link"
    assert client.post(prefix + "/process/execute", json={"command": command}).json()["exitCode"] == 0
    inode = os.stat(os.path.join(home, "run.sh")).st_ino
    fields = [("files[0].path", (None, b" run.sh \n")), ("files[0].file", ("run.sh", b"new"))]
    answer = _upload(client, prefix, fields)
    assert answer.json() == {"files": [{"path": "run.sh", "bytes": 3}]}
    st = os.stat(os.path.join(home, "run.sh"))
    assert (st.st_ino, stat.S_IMODE(st.st_mode)) == (inode, 0o750)
    with open(os.path.join(home, "other-name"), "rb") as f:
        assert f.read() == b"new"  # the other link to the same file
    through_link = [("files[0].path", (None, b"link")), ("files[0].file", ("link", b"via"))]
    assert _upload(client, prefix, through_link).status_code == 200
    assert os.path.islink(os.path.join(home, "link"))  # the link stays; the file it leads to was written
    with open(os.path.join(home, "run.sh"), "rb") as f:
        assert f.read() == b"via"


def test_a_new_file_is_0644_in_new_0755_directories(tb: tuple[httpx.Client, str, str]) -> None:
    client, prefix, home = tb
    fields = [("files[0].path", (None, b"a/b/new.txt")), ("files[0].file", ("new.txt", b"x"))]
    assert _upload(client, prefix, fields).status_code == 200
    assert stat.S_IMODE(os.stat(os.path.join(home, "a", "b", "new.txt")).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.join(home, "a", "b")).st_mode) == 0o755


def test_what_the_daemon_refuses(tb: tuple[httpx.Client, str, str]) -> None:
    client, prefix, _ = tb
    assert client.post(prefix + "/process/execute", json={"command": "mkdir d && touch f"}).json()["exitCode"] == 0
    fields = [
        ("files[0].path", (None, b"  ")),
        ("files[1].file", ("orphan", b"x")),
        ("files[2].path", (None, b"d")),
        ("files[2].file", ("d", b"x")),
        ("files[3].path", (None, b"f/x//y/z.txt")),  # its MkdirAll of f/x/y stops at the file f
        ("files[3].file", ("z.txt", b"x")),
        ("files[4].path", (None, b"ok.txt")),
        ("files[4].file", ("ok.txt", b"fine")),
    ]
    answer = _upload(client, prefix, fields)
    assert answer.status_code == 400
    assert answer.json() == {
        "errors": [
            "path[0]: empty path",
            "file[1]: missing .path metadata",
            "d: create: open d: is a directory",
            "f/x//y/z.txt: mkdir f/x/y: mkdir f: not a directory",
        ],
        "files": [{"path": "ok.txt", "bytes": 4}],
    }
