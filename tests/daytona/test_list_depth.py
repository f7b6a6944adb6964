"""``GET /files?depth=N`` as the later daemon's ``ListFiles`` answers it (a public copy of its ``list_files.go``
from the branch that adds ``depth``): ``strconv.Atoi``, at least 1, else 400 ``depth must be an integer >= 1``;
above 1, ``filepath.WalkDir`` under the path: pre-order, each directory's names in byte order, down to ``depth``
levels, a link below the root listed (as what it leads to) but never entered, a directory that cannot be read
listed but not entered, ``path`` ``filepath.Join`` of the path listed and the entry's path below it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from daytona import Daytona, DaytonaConfig

from emulator.daytona import file_routes

TREE = (
    "mkdir -p d/b/e && printf aa > d/a.txt && printf c > d/b/c.txt && printf f > d/b/e/f.txt && : > d/z.txt"
    " && ln -s b d/link && ln -s missing d/dangling"
)


def _run(tb: tuple[httpx.Client, str], command: str) -> None:
    client, prefix = tb
    answer = client.post(prefix + "/process/execute", json={"command": command})
    assert answer.json()["exitCode"] == 0, answer.text


def _listed(tb: tuple[httpx.Client, str], **params: str) -> list[dict[str, Any]]:
    client, prefix = tb
    answer = client.get(prefix + "/files", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def test_the_sdk_lists_each_entry_before_its_own_down_to_the_depth(api_url: str, api_key: str) -> None:
    daytona = Daytona(DaytonaConfig(api_url=api_url, api_key=api_key))
    sandbox = daytona.create()
    try:
        sandbox.process.exec(TREE)
        two = sandbox.fs.list_files("d", depth=2)
        assert [(f.name, f.path, f.is_dir) for f in two] == [
            ("a.txt", "d/a.txt", False),
            ("b", "d/b", True),
            ("c.txt", "d/b/c.txt", False),
            ("e", "d/b/e", True),
            ("link", "d/link", True),  # what it leads to, but not entered
            ("z.txt", "d/z.txt", False),
        ]
        assert two[0].size == 2
        three = sandbox.fs.list_files("d", depth=3)
        assert [f.path for f in three] == [
            "d/a.txt",
            "d/b",
            "d/b/c.txt",
            "d/b/e",
            "d/b/e/f.txt",
            "d/link",
            "d/z.txt",
        ]
        top = ["d/a.txt", "d/b", "d/link", "d/z.txt"]
        assert [f.path for f in sandbox.fs.list_files("d", depth=1)] == top
        assert [f.path for f in sandbox.fs.list_files("d")] == top
    finally:
        daytona.delete(sandbox)


def test_paths_join_the_path_listed_and_a_linked_root_is_entered(tb: tuple[httpx.Client, str]) -> None:
    _run(tb, TREE + " && ln -s d dl")
    assert [e["path"] for e in _listed(tb, path="./d/", depth="2")][:3] == ["d/a.txt", "d/b", "d/b/c.txt"]
    via_link = _listed(tb, path="dl", depth="2")
    assert [(e["name"], e["path"]) for e in via_link][:3] == [
        ("a.txt", "dl/a.txt"),
        ("b", "dl/b"),
        ("c.txt", "dl/b/c.txt"),
    ]
    assert _listed(tb, path="d", depth="+2") == _listed(tb, path="d", depth="02")
    assert [e["path"] for e in _listed(tb, path="d", depth="1000")][-3:] == ["d/b/e/f.txt", "d/link", "d/z.txt"]
    assert _listed(tb, path="d", depth="") == _listed(tb, path="d")  # empty is the default


def test_nested_names_are_in_the_order_of_their_bytes(tb: tuple[httpx.Client, str]) -> None:
    _run(tb, "mkdir -p d/s && touch d/s/$'\\x80' d/s/$'\\xc3\\xa9' d/s/z")
    assert [e["name"] for e in _listed(tb, path="d", depth="2")] == ["s", "z", "\ufffd", "\u00e9"]


@pytest.mark.parametrize("depth", ["0", "abc", "-1", "-0", "2.0", " 2", "1_0", "+", "٢", "9223372036854775808"])
def test_a_depth_that_is_no_integer_of_at_least_one_is_a_400(tb: tuple[httpx.Client, str], depth: str) -> None:
    client, prefix = tb
    _run(tb, TREE)
    for path in ("d", "no-such-dir"):  # read before the path is looked at
        answer = client.get(prefix + "/files", params={"path": path, "depth": depth})
        assert answer.status_code == 400, answer.text
        body = answer.json()
        assert (body["statusCode"], body["code"], body["source"], body["message"]) == (
            400,
            "BAD_REQUEST",
            "DAYTONA_DAEMON",
            "depth must be an integer >= 1",
        )


def test_a_deep_listing_of_a_path_that_is_not_there_is_the_listings_404(tb: tuple[httpx.Client, str]) -> None:
    client, prefix = tb
    answer = client.get(prefix + "/files", params={"path": "no-such-dir", "depth": "2"})
    assert (answer.status_code, answer.json()["code"], answer.json()["message"]) == (
        404,
        "FILE_NOT_FOUND",
        "open no-such-dir: no such file or directory",
    )


def test_a_directory_that_cannot_be_read_is_listed_and_not_entered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``WalkDir`` hands the daemon the directory, then its read error, which it answers with ``SkipDir``. (Shown
    with a read that fails, since the tests may run as root, whom no mode keeps out.)"""
    for folder in ("a/x", "b"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "a/x/deep").write_text("")
    (tmp_path / "b/in").write_text("")
    real_scandir = os.scandir

    def scandir(path: str) -> Any:
        if os.path.basename(path) == "a":
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(file_routes.os, "scandir", scandir)
    listed = file_routes._walk_listing(str(tmp_path), "t", 3)
    assert [entry["path"] for entry in listed] == ["t/a", "t/b", "t/b/in"]
