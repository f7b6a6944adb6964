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


def _raw(client: httpx.Client, prefix: str, body: bytes, content_type: str | None) -> httpx.Response:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    return client.post(prefix + "/files/bulk-upload", content=body, headers=headers)


def _part(name: str, payload: bytes, boundary: str = "B") -> bytes:
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
    return head + payload + b"\r\n"


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "multipart/form-data; boundary="],
)
def test_a_body_that_is_no_multipart_form_is_the_daemons_own_400(
    tb: tuple[httpx.Client, str, str], content_type: str | None
) -> None:
    """``Request.MultipartReader`` fails (no content type, another one, no boundary, a boundary that does not parse):
    the daemon writes its own body, with no ``files`` and no envelope."""
    client, prefix, _ = tb
    answer = _raw(client, prefix, _part("files[0].path", b"a") + b"--B--\r\n", content_type)
    assert (answer.status_code, answer.headers["content-type"]) == (400, "application/json; charset=utf-8")
    assert answer.content == b'{"errors":["invalid multipart form"]}'


def test_no_file_written_is_files_null(tb: tuple[httpx.Client, str, str]) -> None:
    """``files`` is a Go nil slice until a file is written: ``null``, in the 200 and in the 400."""
    client, prefix, _ = tb
    form = "multipart/form-data; boundary=B"
    assert _raw(client, prefix, b"--B--\r\n", form).content == b'{"files":null}'
    only_paths = _raw(client, prefix, _part("files[0].path", b"a.txt") + b"--B--\r\n", form)
    assert (only_paths.status_code, only_paths.content) == (200, b'{"files":null}')
    refused = _upload(client, prefix, [("files[0].file", ("orphan", b"x"))])
    assert refused.content == b'{"errors":["file[0]: missing .path metadata"],"files":null}'


FORM = "multipart/form-data; boundary=B"


@pytest.mark.parametrize(
    ("body", "content_type", "error"),
    [
        (b"", FORM, "multipart: NextPart: EOF"),
        (b"--B--\r\n", 'multipart/form-data; boundary=""', "multipart: boundary is empty"),
        (b"--B\r\nno colon here\r\n\r\nx\r\n--B--\r\n", FORM, "malformed MIME header line: no colon here"),
        (
            _part("p", b"a") + b"--B trailing\r\n",
            FORM,
            'multipart: expecting a new Part; got line "--B trailing\\r\\n"',
        ),
        (b"x" * 5000 + b"\r\n--B--\r\n", FORM, "multipart: NextPart: bufio: buffer full"),
    ],
)
def test_a_malformed_body_ends_the_reading_with_gos_words(
    tb: tuple[httpx.Client, str, str], body: bytes, content_type: str, error: str
) -> None:
    """Go's ``multipart.Reader`` stops at the defect: ``reading part: <its error>`` is the last line of ``errors``."""
    client, prefix, _ = tb
    answer = _raw(client, prefix, body, content_type)
    assert answer.status_code == 400
    assert answer.json() == {"errors": [f"reading part: {error}"], "files": None}


def test_a_body_with_bare_line_feeds_is_read(tb: tuple[httpx.Client, str, str]) -> None:
    """Go's reader takes ``\\n`` line ends where the first delimiter has one (a violation it meets in practice)."""
    client, prefix, home = tb
    body = _part("files[0].path", b"lf.txt") + _part("files[0].file", b"x\r\ny") + b"--B--\r\n"
    answer = _raw(client, prefix, body.replace(b"\r\n", b"\n").replace(b"x\ny", b"x\r\ny"), FORM)
    assert answer.json() == {"files": [{"path": "lf.txt", "bytes": 4}]}
    with open(os.path.join(home, "lf.txt"), "rb") as f:
        assert f.read() == b"x\r\ny"


def test_the_sdk_gets_the_daemons_words_for_an_upload_of_no_files(api_url: str, api_key: str) -> None:
    """``upload_files([])`` sends an empty url-encoded form (aiohttp makes no multipart form of no fields): the
    daemon's ``invalid multipart form``, which the SDK quotes."""
    from daytona import Daytona, DaytonaConfig, DaytonaError

    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        with pytest.raises(DaytonaError) as refused:
            sandbox.fs.upload_files([])
        assert str(refused.value) == "Failed to upload files: 400: invalid multipart form"
    finally:
        daytona.delete(sandbox)
