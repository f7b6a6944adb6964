"""Sandbox paths and the file API's wire formats (multipart bulk upload/download, FileInfo).

Relative paths resolve against the sandbox's home; ``/home/<user>/...`` and the home's real path also land in the
home; any other absolute path lands under the sandbox's private ``fs/`` tree. Nothing resolves outside the sandbox.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
import uuid
from datetime import datetime, timezone
from typing import Any

from emulator.executor.workdir import write_all

from .errors import ApiError
from .sandboxes import Sandbox


def _bases(sandbox: Sandbox) -> list[str]:
    return [os.path.realpath(base) for base in (sandbox.home, sandbox.root)]


def _inside(bases: list[str], real: str) -> bool:
    return any(real == base or real.startswith(base + os.sep) for base in bases)


def resolve(sandbox: Sandbox, path: str) -> str:
    """Host path for a sandbox path; raises 400 on an escape or a bad path."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ApiError(400, "invalid path")
    home = sandbox.home
    user_home = f"/home/{sandbox.user}"
    if not os.path.isabs(path):
        target = os.path.join(home, path)
    elif path == home or path.startswith(home + "/"):
        target = path
    elif path == user_home or path.startswith(user_home + "/"):
        target = home + path[len(user_home) :]
    elif path in ("/root", "~") or path.startswith("~/"):
        target = os.path.join(home, path[2:]) if path.startswith("~/") else home
    else:
        target = sandbox.fs_root + os.path.normpath(path)
    # Resolved as the kernel would: each symbolic link followed where it stands, and a ".." after it taken from where
    # the link led (a lexical normpath would drop "link/.." before following the link, and so act on a path other than
    # the one checked). The last component is kept as a name (deleting a link removes the link), but where it leads
    # must be inside the sandbox too, since reads and writes follow it.
    bases = _bases(sandbox)

    def inside(real: str) -> bool:
        return _inside(bases, real)

    raw = target.rstrip("/") or "/"
    parent, name = os.path.split(raw)
    if name in (".", ".."):
        result = os.path.realpath(raw)
    else:
        result = os.path.join(os.path.realpath(parent), name)
        if not inside(os.path.dirname(result)) and result not in bases:
            raise ApiError(400, f"path escapes the sandbox: {path}")
    if not inside(os.path.realpath(result)):
        raise ApiError(400, f"path escapes the sandbox: {path}")
    return result


def parse_multipart(body: bytes, content_type: str | None) -> list[tuple[dict[str, str], bytes]]:
    """Parts of a ``multipart/form-data`` body as (content-disposition params + headers, payload).

    A delimiter is the boundary at the start of a line (RFC 2046), followed by the end of that line or by ``--`` (the
    close): the same bytes inside a part's payload are payload. A body without its close delimiter (cut short) is a
    400, as Go's ``mime/multipart`` refuses it, never a truncated file written."""
    boundary = None
    for piece in (content_type or "").split(";"):
        key, _, value = piece.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip().strip('"')
    if not boundary:
        raise ApiError(400, "multipart boundary missing")
    marker = b"\r\n--" + boundary.encode("latin-1")
    text = b"\r\n" + body  # the first delimiter may open the body without a line break before it
    parts: list[tuple[dict[str, str], bytes]] = []
    start: int | None = None  # where the current part's headers begin
    at = text.find(marker)
    while at >= 0:
        after = at + len(marker)
        if text.startswith(b"--", after):
            if start is not None:
                parts.append(_part(text[start:at]))
            return parts
        line_end = text.find(b"\r\n", after)
        if line_end >= 0 and not text[after:line_end].strip(b" \t"):
            if start is not None:
                parts.append(_part(text[start:at]))
            start = line_end + 2
            at = text.find(marker, start)
        else:
            at = text.find(marker, after)  # the boundary's bytes inside a payload, not a delimiter
    raise ApiError(400, "multipart: NextPart: EOF")


def _part(raw: bytes) -> tuple[dict[str, str], bytes]:
    head, sep, payload = raw.partition(b"\r\n\r\n")
    if not sep:
        if raw.endswith(b"\r\n") or not raw:  # headers only, no payload
            head, payload = raw, b""
        else:
            raise ApiError(400, "multipart: malformed part headers")
    info: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n"):
        if not line:
            continue
        name, _, value = line.partition(":")
        info[name.strip().lower()] = value.strip()
        if name.strip().lower() == "content-disposition":
            for param in value.split(";")[1:]:
                pkey, _, pval = param.strip().partition("=")
                info[pkey.strip().lower()] = pval.strip().strip('"')
    return info, payload


def multipart_body(parts: list[tuple[str, str, str, bytes]], boundary: str | None = None) -> tuple[bytes, str]:
    """Build a ``multipart/form-data`` answer from (field name, filename, content type, payload)."""
    boundary = boundary or uuid.uuid4().hex
    out = bytearray()
    for name, filename, ctype, payload in parts:
        quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
        extended = urllib.parse.quote(filename, safe="")
        out += f"--{boundary}\r\n".encode()
        out += (
            f'Content-Disposition: form-data; name="{name}"; filename="{quoted}"; filename*=utf-8\'\'{extended}\r\n'
        ).encode()
        out += f"Content-Type: {ctype}\r\n\r\n".encode()
        out += payload + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


#: The owner and group the daemon shows for a sandbox's files: its ``FileInfo`` holds the numeric ids, and the
#: sandbox image's user (``useradd -m daytona``, the first user) is 1000. Here a file belongs to the uid of the run
#: that holds the home, or to root between runs (see ``emulator.executor.holders``), which the service never shows.
SANDBOX_UID = "1000"

# Go's FileMode.String(): one letter per type or flag bit set, in this order, then rwx for the permission bits.
_GO_MODE_LETTERS = "dalTLDpSugct?"


def go_file_mode(mode: int) -> str:
    """``mode`` (an ``st_mode``) as Go's ``FileMode.String()`` writes it (``dtrwxrwxrwx`` for a sticky directory,
    ``urwxr-xr-x`` for a setuid file, ``Dcrw-rw-rw-`` for a character device)."""
    flags = {
        "d": stat.S_ISDIR(mode),
        "L": stat.S_ISLNK(mode),
        "D": stat.S_ISBLK(mode) or stat.S_ISCHR(mode),
        "p": stat.S_ISFIFO(mode),
        "S": stat.S_ISSOCK(mode),
        "u": bool(mode & stat.S_ISUID),
        "g": bool(mode & stat.S_ISGID),
        "c": stat.S_ISCHR(mode),
        "t": bool(mode & stat.S_ISVTX),
    }
    head = "".join(letter for letter in _GO_MODE_LETTERS if flags.get(letter)) or "-"
    return head + "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


def _go_times(mtime_ns: int) -> tuple[str, str]:
    """A modification time as Go writes it: ``time.String()`` (``2026-06-01 15:16:34.12 +0000 UTC``) and JSON's
    RFC 3339 (``2026-06-01T15:16:34.12Z``), nanoseconds with their trailing zeros dropped (and the dot with none)."""
    seconds, nanos = divmod(mtime_ns, 1_000_000_000)
    when = datetime.fromtimestamp(seconds, tz=timezone.utc)
    digits = f"{nanos:09d}".rstrip("0")
    fraction = f".{digits}" if digits else ""
    return (
        when.strftime("%Y-%m-%d %H:%M:%S") + fraction + " +0000 UTC",
        when.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z",
    )


def file_info(path: str, shown_path: str) -> dict[str, Any]:
    """FileInfo JSON, as the daemon's ``getFileInfo`` makes it: of what a link leads to (``os.Stat``), the mode as Go
    writes it, ``permissions`` the nine permission bits only, owner and group as numbers."""
    st = os.stat(path)
    mod_time, modified_at = _go_times(st.st_mtime_ns)
    return {
        "name": os.path.basename(shown_path.rstrip("/")) or "/",
        "path": shown_path,
        "isDir": stat.S_ISDIR(st.st_mode),
        "size": int(st.st_size),
        "mode": go_file_mode(st.st_mode),
        "permissions": f"{st.st_mode & 0o777:04o}",
        "owner": SANDBOX_UID,
        "group": SANDBOX_UID,
        "modTime": mod_time,
        "modifiedAt": modified_at,
    }


def make_dirs(path: str, mode: int = 0o777) -> None:
    """``os.makedirs(path, mode, exist_ok=True)`` without recursion (``mode`` for the last directory, as there): a
    path of thousands of components (``a/a/.../a``, as deep as ``PATH_MAX`` allows) raised ``RecursionError`` there,
    not the ``OSError`` a caller answers."""
    missing: list[str] = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode if directory is missing[0] else 0o777)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise


def write_file(sandbox: Sandbox, target: str, data: bytes) -> None:
    """Write ``data`` at ``target`` (from :func:`resolve`) as the daemon's ``os.Create`` does: an existing file is
    truncated and written in place (its inode, mode and other links kept), through a link at the name; a new one is
    0644 (0666 under the daemon's umask 022); missing parents are made 0755.

    Where a link at the name leads is checked again here, and the file is opened without following a link, so a
    program that swaps the name for a link to a host file after :func:`resolve` makes this fail, not write there."""
    make_dirs(os.path.dirname(target), 0o755)
    final = os.path.realpath(target)
    if not _inside(_bases(sandbox), final):
        raise ApiError(400, f"path escapes the sandbox: {target}")
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(final, flags | os.O_CREAT | os.O_EXCL, 0o644)
        os.fchmod(fd, 0o644)  # whatever this process's umask
    except FileExistsError:
        fd = os.open(final, flags | os.O_TRUNC)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def read_file(target: str) -> bytes:
    with open(target, "rb") as f:
        return f.read()


def is_dir(target: str) -> bool:
    return os.path.isdir(target)


def not_a_dir_reason(target: str) -> str:
    """Why a process cannot start in ``target`` (no directory there), as the kernel's error reads."""
    return "not a directory" if os.path.exists(target) else "no such file or directory"
