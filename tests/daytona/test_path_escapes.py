"""No toolbox path reaches outside the sandbox, whatever links the sandbox's own programs made.

The file API runs as the emulator's user (root in CI), so a path that resolves outside the sandbox would let a
program read, write, delete or list host files. A program can make symbolic links in its home; ``link/..`` must then
mean what the kernel makes of it (the parent of where the link leads), in the check and in the operation alike.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from emulator.server import EmulatorServer


@pytest.fixture
def client(server: EmulatorServer, api_key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory next to nothing of the sandbox's, with a secret in it."""
    directory = tmp_path / "host"
    directory.mkdir()
    (directory / "secret.txt").write_text("host secret\n")
    return directory


def _sandbox_with_links(client: httpx.Client, outside: Path) -> tuple[str, str]:
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    tb = f"/toolbox/{sid}"
    # a link three levels down, whose ".." the kernel takes from b/c/d; and one that points straight out
    made = client.post(
        tb + "/process/execute", json={"command": f"mkdir -p b/c/d && ln -s b/c/d a && ln -s {outside} out && pwd"}
    )
    assert made.status_code == 200 and made.json()["exitCode"] == 0, made.text
    home = made.json()["result"].strip()
    # Read lexically, "a/../../.." is the home's grandparent (the temp root: the home lies in a directory of its
    # own there); followed as the kernel does, it is the home itself (a is b/c/d).
    return tb, "a/../../../" + os.path.relpath(outside, os.path.dirname(os.path.dirname(home)))


def test_a_link_followed_by_dotdot_reaches_nothing_outside(
    client: httpx.Client, outside: Path, server: EmulatorServer
) -> None:
    tb, sneaky = _sandbox_with_links(client, outside)
    answers = [
        client.get(tb + "/files/download", params={"path": sneaky + "/secret.txt"}),
        client.get(tb + "/files/info", params={"path": sneaky + "/secret.txt"}),
        client.get(tb + "/files", params={"path": sneaky}),
        client.post(tb + "/files/bulk-download", json={"paths": [sneaky + "/secret.txt"]}),
        client.delete(tb + "/files/", params={"path": sneaky + "/secret.txt"}),
        client.post(tb + "/files/folder", params={"path": sneaky + "/made", "mode": "755"}),
        client.post(
            tb + "/files/bulk-upload",
            files={"files[0].path": (None, sneaky + "/pwned.txt"), "files[0].file": ("f", b"PWNED")},
        ),
        client.post(tb + "/process/execute", json={"command": "pwd", "cwd": sneaky + "/made"}),
    ]
    for answer in answers:
        assert answer.status_code < 500 and "host secret" not in answer.text, (answer.request.url, answer.text)
    assert [a.status_code for a in answers[:2]] == [404, 404]  # the path names a file in the home: none there
    # What was made was made where the kernel resolves the path: inside the home, never in the host directory.
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host secret\n"
    inner = os.path.relpath(sneaky, "a/../../..")  # the same path, from the home
    assert client.get(tb + "/files/download", params={"path": inner + "/pwned.txt"}).content == b"PWNED"
    assert answers[-1].json()["result"].strip().endswith(inner + "/made")


def test_a_link_pointing_out_is_not_followed_but_inner_links_work(client: httpx.Client, outside: Path) -> None:
    tb, _ = _sandbox_with_links(client, outside)
    assert client.get(tb + "/files/download", params={"path": "out/secret.txt"}).status_code == 400
    written = client.post(
        tb + "/files/bulk-upload", files={"files[0].path": (None, "a/x.txt"), "files[0].file": ("f", b"inner")}
    )
    assert written.status_code == 200, written.text
    assert client.get(tb + "/files/download", params={"path": "b/c/d/x.txt"}).content == b"inner"
    assert client.get(tb + "/files/download", params={"path": "a/../d/x.txt"}).content == b"inner"  # b/c/d/.. is b/c
    # The daemon looks the path up following the link: a directory, so it wants the recursive flag; then it removes
    # the link itself (Go's RemoveAll), never what the link leads to.
    refused = client.delete(tb + "/files/", params={"path": "a"})
    assert (refused.status_code, refused.json()["message"]) == (400, "cannot delete directory without recursive flag")
    assert client.delete(tb + "/files/", params={"path": "a", "recursive": "true"}).status_code == 204
    assert client.get(tb + "/files/info", params={"path": "a"}).status_code == 404
    assert client.get(tb + "/files/download", params={"path": "b/c/d/x.txt"}).content == b"inner"


@pytest.mark.skipif(os.geteuid() != 0, reason="without root, programs run as the emulator's own user")
def test_a_program_cannot_put_a_link_in_its_homes_place(client: httpx.Client, outside: Path) -> None:
    """The home lies in a directory only root may change: its program, which owns the home, can no longer rename it
    and leave a link to a host directory in its place for the file API (root) to follow. In the world-writable temp
    root it could, and the file API then listed and served the host directory's files."""
    created = client.post("/api/sandbox", json={})
    tb = f"/toolbox/{created.json()['id']}"
    swap = f'h="$PWD"; cd /; mv "$h" "$h.moved" && ln -s {outside} "$h" && echo swapped'
    answer = client.post(tb + "/process/execute", json={"command": swap})
    assert answer.status_code == 200 and "swapped" not in answer.json()["result"], answer.text
    assert "Permission denied" in answer.json()["result"]
    assert client.get(tb + "/files/download", params={"path": "secret.txt"}).status_code == 404
    assert "secret.txt" not in client.get(tb + "/files", params={"path": "."}).text
