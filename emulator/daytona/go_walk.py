"""Go's ``filepath.Walk`` and ``filepath.Match`` as the daemon's find and search handlers use them.

``Walk`` goes depth first in the order of the names' bytes, never follows a link (it looks each entry up with
``Lstat``), and hands each entry, the root first, to the handler's function; both handlers answer any error with
``SkipDir``, so an entry that cannot be looked up is passed over, and a directory that cannot be read is neither
matched nor entered. ``Match`` is Go's glob: ``*``, ``?``, ``[...]`` with ``^`` for a negated class, ``\\``
escaping; a malformed pattern matches nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from .files import go_clean, resolve
from .sandboxes import Sandbox


class BadPattern(Exception):
    """Go's ``filepath.ErrBadPattern``."""


def walk(sandbox: Sandbox, root: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(path as the handler sees it, host path, ``Lstat``) of each entry ``filepath.Walk(root, ...)`` hands on
    without an error: ``root`` as given, each entry below as ``filepath.Join`` makes it. Iterative, so a tree of
    thousands of levels is no ``RecursionError``. A root that escapes the sandbox is :func:`resolve`'s 400; one with
    a NUL is Go's EINVAL, nothing walked."""
    if "\0" in root:
        return
    host = resolve(sandbox, root)
    try:
        found = os.lstat(host)
    except OSError:
        return
    stack = [(root, host, found)]
    while stack:
        shown, host, found = stack.pop()
        if not stat.S_ISDIR(found.st_mode):
            yield shown, host, found
            continue
        try:
            names = sorted(os.listdir(host), key=os.fsencode)
        except OSError:
            continue
        yield shown, host, found
        below = []
        for name in names:
            try:
                below.append(
                    (go_clean(shown + "/" + name), os.path.join(host, name), os.lstat(os.path.join(host, name)))
                )
            except OSError:
                continue
        stack.extend(reversed(below))


def base_name(path: str) -> str:
    """``FileInfo.Name()`` of ``os.Lstat(path)``: the last element, trailing slashes cut (``/`` for ``/``)."""
    stripped = path.rstrip("/")
    return stripped[stripped.rfind("/") + 1 :] if stripped else "/"


def _scan_chunk(pattern: str) -> tuple[bool, str, str]:
    """Go's ``scanChunk``: leading stars, then the chunk up to the next star outside a class, then the rest."""
    star = False
    while pattern.startswith("*"):
        pattern, star = pattern[1:], True
    in_range = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            index += 1
        elif char == "[":
            in_range = True
        elif char == "]":
            in_range = False
        elif char == "*" and not in_range:
            break
        index += 1
    return star, pattern[:index], pattern[index:]


def _escaped(chunk: str) -> tuple[str, str]:
    """Go's ``getEsc``: one character of a class (``\\`` escaping it), and the chunk after it."""
    if not chunk or chunk[0] in "-]":
        raise BadPattern
    if chunk[0] == "\\":
        chunk = chunk[1:]
        if not chunk:
            raise BadPattern
    if len(chunk) < 2:
        raise BadPattern
    return chunk[0], chunk[1:]


def _class_matches(chunk: str, char: str | None) -> tuple[bool, str]:
    """A ``[...]`` class (``chunk`` after its ``[``) against ``char``: whether it matches, and the chunk after it."""
    negated = chunk.startswith("^")
    if negated:
        chunk = chunk[1:]
    matched = False
    ranges = 0
    while True:
        if chunk.startswith("]") and ranges > 0:
            return matched != negated, chunk[1:]
        low, chunk = _escaped(chunk)
        high = low
        if chunk.startswith("-"):
            high, chunk = _escaped(chunk[1:])
        if char is not None and low <= char <= high:
            matched = True
        ranges += 1


def _match_chunk(chunk: str, name: str) -> str | None:
    """Go's ``matchChunk``: what is left of ``name`` after ``chunk`` matched its start, or None."""
    failed = False
    while chunk:
        if not failed and not name:
            failed = True
        head = chunk[0]
        if head == "[":
            char = None if failed else name[0]
            if not failed:
                name = name[1:]
            ok, chunk = _class_matches(chunk[1:], char)
            failed = failed or not ok
            continue
        if head == "?":
            if not failed:
                failed = name[0] == "/"
                name = name[1:]
            chunk = chunk[1:]
            continue
        if head == "\\":
            chunk = chunk[1:]
            if not chunk:
                raise BadPattern
        if not failed:
            failed = chunk[0] != name[0]
            name = name[1:]
        chunk = chunk[1:]
    return None if failed else name


def _check_rest(pattern: str) -> None:
    """Go checks the rest of a pattern that failed to match, so that a malformed one is an error."""
    while pattern:
        _, chunk, pattern = _scan_chunk(pattern)
        _match_chunk(chunk, "")


def _match(pattern: str, name: str) -> bool:
    while pattern:
        star, chunk, pattern = _scan_chunk(pattern)
        if star and not chunk:
            return "/" not in name
        rest = _match_chunk(chunk, name)
        if rest is not None and (not rest or pattern):
            name = rest
            continue
        if star:
            found = None
            for index, char in enumerate(name):
                if char == "/":
                    break
                rest = _match_chunk(chunk, name[index + 1 :])
                if rest is not None and (pattern or not rest):
                    found = rest
                    break
            if found is not None:
                name = found
                continue
        _check_rest(pattern)
        return False
    return not name


def go_match(pattern: str, name: str) -> bool:
    """Go's ``filepath.Match(pattern, name)`` as the search handler reads it: a malformed pattern matches nothing."""
    try:
        return _match(pattern, name)
    except BadPattern:
        return False


__all__ = ["base_name", "go_match", "walk"]
