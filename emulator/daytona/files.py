"""Sandbox paths and the file API's wire formats (multipart bulk upload/download, FileInfo).

Relative paths resolve against the sandbox's home; ``/home/<user>/...`` and the home's real path also land in the
home; any other absolute path lands under the sandbox's private ``fs/`` tree (``/root`` too: root's home, not the
user's). Nothing resolves outside the sandbox. ``~`` is a name like any other, as the daemon's Go takes it.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from datetime import datetime, timezone
from typing import Any

from .errors import ApiError
from .go_json import go_string
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


def multipart_body(parts: list[tuple[dict[str, str], bytes]], boundary: str | None = None) -> tuple[bytes, str]:
    """A ``multipart/form-data`` answer from (headers, payload), written as Go's ``multipart.Writer`` writes it:
    each part's headers in the order of their names, the whole closed by the close delimiter."""
    boundary = boundary or uuid.uuid4().hex
    out = bytearray()
    for headers, payload in parts:
        out += f"--{boundary}\r\n".encode()
        for name in sorted(headers):
            out += f"{name}: {headers[name]}\r\n".encode("latin-1")
        out += b"\r\n" + payload + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


#: Go's ``mime`` package's own table (``builtinTypesLower``), what ``mime.TypeByExtension`` knows on a system
#: without a MIME database (an image's ``/etc/mime.types`` would add to it).
GO_MIME_TYPES = {
    ".avif": "image/avif",
    ".css": "text/css; charset=utf-8",
    ".gif": "image/gif",
    ".htm": "text/html; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".jpeg": "image/jpeg",
    ".jpg": "image/jpeg",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".mjs": "text/javascript; charset=utf-8",
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".wasm": "application/wasm",
    ".webp": "image/webp",
    ".xml": "text/xml; charset=utf-8",
}


def go_mime_type(path: str) -> str:
    """The type of a bulk download's file part: ``mime.TypeByExtension(filepath.Ext(path))`` (the last element's
    suffix from its last dot, matched as it is, then lower-cased), ``application/octet-stream`` for none."""
    name = path[path.rfind("/") + 1 :]
    dot = name.rfind(".")
    extension = name[dot:] if dot >= 0 else ""
    return GO_MIME_TYPES.get(extension) or GO_MIME_TYPES.get(extension.lower()) or "application/octet-stream"


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


def file_info(path: str, shown_path: str, full_path: str | None = None) -> dict[str, Any]:
    """FileInfo JSON, as the daemon that pairs with the SDK 0.226 makes it (its ``getFileInfo``, its struct's fields
    in their order): of what a link leads to (``os.Stat``), the mode as Go writes it, ``permissions`` the nine
    permission bits only, owner and group as numbers. ``path`` (``json:"path,omitempty"``, which the daemon at
    8b6f9b14a did not have) is there only where the caller gives ``full_path``: the listing sets it for each entry,
    ``/files/info`` leaves it empty, so out. A byte that is no UTF-8 is one U+FFFD, as Go's JSON encoder writes it
    (Python's surrogate for it would not encode)."""
    st = os.stat(path)
    mod_time, modified_at = _go_times(st.st_mtime_ns)
    info: dict[str, Any] = {"name": go_string(os.fsencode(os.path.basename(shown_path.rstrip("/")) or "/"))}
    if full_path:
        info["path"] = go_string(full_path.encode("utf-8", "surrogateescape"))
    info.update(
        {
            "size": int(st.st_size),
            "mode": go_file_mode(st.st_mode),
            "modTime": mod_time,
            "modifiedAt": modified_at,
            "isDir": stat.S_ISDIR(st.st_mode),
            "owner": SANDBOX_UID,
            "group": SANDBOX_UID,
            "permissions": f"{st.st_mode & 0o777:04o}",
        }
    )
    return info


#: The daemon's umask: a folder it makes with mode 0777 is 0755, a file it creates 0644.
DAEMON_UMASK = 0o022
#: Go's ``os.ModeSticky``: the bit of an ``os.FileMode`` that ``os.Mkdir`` turns into the sticky bit (0o1000 is not
#: it: ``FileMode.Perm()`` keeps the nine permission bits alone).
GO_MODE_STICKY = 1 << 20


class GoPathError(Exception):
    """A Go ``*os.PathError`` (``mkdir a/f: not a directory``), its path the sandbox path as the client named it."""

    def __init__(self, op: str, path: str, errno_value: int) -> None:
        super().__init__(f"{op} {path}: {os.strerror(errno_value).lower()}")
        self.op, self.path, self.errno = op, path, errno_value


def go_errno_text(error: OSError) -> str:
    """Go's words for the errno of ``error`` (``no such file or directory``): glibc's, lower-cased, which are Go's
    for every errno a file operation meets."""
    return os.strerror(error.errno).lower() if error.errno else str(error)


def go_clean(path: str) -> str:
    """Go's ``filepath.Clean``: ``.`` and empty elements dropped, ``..`` taken lexically, ``.`` for nothing (unlike
    ``posixpath.normpath``, a leading ``//`` becomes ``/``)."""
    rooted = path.startswith("/")
    kept: list[str] = []
    for element in path.split("/"):
        if element in ("", "."):
            continue
        if element == ".." and kept and kept[-1] != "..":
            kept.pop()
        elif element != ".." or not rooted:
            kept.append(element)
    joined = "/".join(kept)
    return "/" + joined if rooted else joined or "."


def go_dir(path: str) -> str:
    """Go's ``filepath.Dir``: all but the last element, cleaned (``.`` for a bare name)."""
    return go_clean(path[: path.rfind("/") + 1])


#: What Go's ``unicode.IsSpace`` calls space (``strings.TrimSpace`` trims it); Python's ``str.strip`` also trims
#: U+001C..U+001F, which Go keeps.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))


def go_trim_space(text: str) -> str:
    """Go's ``strings.TrimSpace``."""
    return text.strip(_GO_SPACE)


def _make_dir(host: str, perm: int) -> None:
    """One ``os.Mkdir(name, FileMode(perm))`` of the daemon: the permission bits and Go's sticky bit, less its
    umask, plus the set-group-ID bit a directory takes from its parent (mkdir(2) ignores the one asked for).
    Set with a chmod, so that the emulator's own umask does not show."""
    os.mkdir(host, 0o700)
    inherited = os.stat(host).st_mode & stat.S_ISGID
    sticky = stat.S_ISVTX if perm & GO_MODE_STICKY else 0
    os.chmod(host, (perm & 0o777 & ~DAEMON_UMASK) | sticky | inherited)


def _mkdir_chain(path: str) -> list[str]:
    """The paths Go's ``MkdirAll`` recursion visits, longest first: each the one before with its trailing slashes
    and its last element cut, down to the first element (never ``/``). Not cleaned: ``a/../b`` visits ``a/..``."""
    chain = [path]
    while True:
        last = chain[-1].rstrip("/")
        cut = last.rfind("/")
        if cut <= 0:
            return chain
        chain.append(last[:cut])


def _chain_hosts(sandbox: Sandbox, chain: list[str]) -> list[str]:
    """The host path of each path of ``chain``. Without ``.`` or ``..`` elements, each is the one before with its
    last element cut (one :func:`resolve`, so a path of thousands of elements costs no more than one); with them,
    each is resolved on its own (``a/..`` is where ``a`` leads, then up)."""
    if any(element in (".", "..") for element in chain[0].split("/")):
        return [resolve(sandbox, path) for path in chain]
    hosts = [resolve(sandbox, chain[0])]
    while len(hosts) < len(chain):
        hosts.append(os.path.dirname(hosts[-1]))
    return hosts


def mkdir_all(sandbox: Sandbox, path: str, perm: int) -> None:
    """Go's ``os.MkdirAll(path, FileMode(perm))`` on a sandbox path: every directory it makes gets ``perm`` (the
    parents too), a prefix that is something other than a directory is ``mkdir <prefix>: not a directory``, a
    failing mkdir ``mkdir <prefix>: <errno>``, both as :class:`GoPathError` naming the client's prefix; an escape
    is :func:`resolve`'s 400. Iterative, so a path of thousands of elements (as deep as ``PATH_MAX`` allows) is no
    ``RecursionError``. Each prefix is looked up as the kernel looks it up, links followed."""
    if "\0" in path:  # Go's syscalls refuse the name: EINVAL where the first element that holds one is made
        first = path.find("/", path.index("\0"))
        bad = path if first < 0 else path[:first]
        cut = bad.rfind("/")
        if cut > 0:
            mkdir_all(sandbox, bad[:cut], perm)
        raise GoPathError("mkdir", bad, errno.EINVAL)
    chain = _mkdir_chain(path)
    missing: list[tuple[str, str]] = []
    for shown, host in zip(chain, _chain_hosts(sandbox, chain), strict=True):
        try:
            info = os.stat(host)
        except OSError:
            missing.append((shown, host))
            continue
        if stat.S_ISDIR(info.st_mode):
            break
        raise GoPathError("mkdir", shown, errno.ENOTDIR)
    for shown, made in reversed(missing):
        try:
            _make_dir(made, perm)
        except OSError as error:
            if os.path.isdir(made) and not os.path.islink(made):  # made meanwhile: Go's Lstat check takes it
                continue
            raise GoPathError("mkdir", shown, error.errno or errno.EIO) from None


def create_file(sandbox: Sandbox, target: str, shown: str) -> int:
    """A descriptor to write ``target`` (from :func:`resolve`; ``shown``, the client's path) as the daemon's
    ``os.Create`` opens it: an existing file is truncated and written in place (its inode, mode and other links
    kept), through a link at the name; a new one is 0644 (0666 under the daemon's umask 022).

    Where a link at the name leads is checked again here, and the file is opened without following a link, so a
    program that swaps the name for a link to a host file after :func:`resolve` makes this fail, not write there.
    The parents are the caller's to make (:func:`mkdir_all`), as the daemon makes them first."""
    final = os.path.realpath(target)
    if not _inside(_bases(sandbox), final):
        raise ApiError(400, f"path escapes the sandbox: {shown}")
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(final, flags | os.O_CREAT | os.O_EXCL, 0o644)
        os.fchmod(fd, 0o644)  # whatever this process's umask
    except FileExistsError:
        fd = os.open(final, flags | os.O_TRUNC)
    return fd


def read_file(target: str) -> bytes:
    """The bytes of ``target``, opened without waiting: a FIFO with no writer reads as empty, where the daemon's
    ``os.Open`` would wait for one (the emulator's event loop must not)."""
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


#: RFC 5987's ``attr-char``: the bytes the daemon's ``encodeRFC5987`` leaves as they are.
_ATTR_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&+-.^_`|~")


def to_latin1(text: str) -> str:
    """The daemon's ``toLatin1`` for a quoted ``filename=``: ``\\`` and ``"`` escaped; CR, LF and NUL dropped; a
    control character, DEL or a character past U+00FF (a byte that is no UTF-8 too) as ``_``. What is left is one
    byte each on the wire (Latin-1: ``é`` is the byte 0xE9, not UTF-8's two)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "").replace("\0", "")
    return "".join("_" if ord(c) > 0xFF or ord(c) < 0x20 or c == "\x7f" else c for c in escaped)


def rfc5987(text: str) -> str:
    """The daemon's ``encodeRFC5987``: each UTF-8 byte that is no ``attr-char`` as ``%XX``."""
    raw = text.encode("utf-8", "surrogateescape")
    return "".join(chr(byte) if byte in _ATTR_CHARS else f"%{byte:02X}" for byte in raw)


def attachment_disposition(name: str) -> str:
    """``DownloadFile``'s ``Content-Disposition``."""
    return f"attachment; filename=\"{to_latin1(name)}\"; filename*=utf-8''{rfc5987(name)}"


def form_disposition(form_name: str, path: str) -> str:
    """A bulk download part's ``Content-Disposition`` (``multipartContentDisposition``)."""
    return f'form-data; name="{form_name}"; filename="{to_latin1(path)}"; filename*=utf-8\'\'{rfc5987(path)}'


def is_dir(target: str) -> bool:
    return os.path.isdir(target)
