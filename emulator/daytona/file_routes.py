"""The toolbox's file routes, answered as the daemon's handlers answer them (``apps/daemon/pkg/toolbox/fs`` at
8b6f9b14a, 2026-06-30), except where the daemon that pairs with the SDK 0.226 answers otherwise.

That later daemon's errors are its envelope (:class:`~emulator.daytona.errors.FileError`, ``source:
DAYTONA_DAEMON``), where the one at 8b6f9b14a answered the status alone: a missing ``path`` or a bad ``mode`` is 400
``BAD_REQUEST``, a path that is not there 404 ``FILE_NOT_FOUND`` (Go's ``os.IsNotExist``: ENOENT), one the daemon
may not read 403 ``FILE_ACCESS_DENIED`` (``os.IsPermission``: EACCES, EPERM), any other error of the file system 400.
The message is Go's error, naming the path as the client gave it (``stat x: no such file or directory``). The bulk
routes write bodies of their own.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, NoReturn

from starlette.responses import Response

from emulator.executor.trees import remove_tree
from emulator.executor.workdir import write_all

from .errors import DAEMON_SOURCE, ApiError, FileError
from .files import (
    GoPathError,
    attachment_disposition,
    create_file,
    file_info,
    form_disposition,
    go_clean,
    go_dir,
    go_errno_text,
    go_mime_type,
    go_trim_space,
    is_dir,
    mkdir_all,
    multipart_body,
    read_file,
    resolve,
)
from .go_json import as_go_decodes, go_marshal, go_string, go_text
from .go_walk import base_name, go_match, walk
from .multipart import Part, multipart_boundary, read_parts
from .sandboxes import Sandbox


def required(path: str) -> str:
    """``path``, which the handler requires: an absent or empty one is 400 ``path is required``."""
    if not path:
        raise FileError(400, "path is required")
    return path


def target_of(sandbox: Sandbox, path: str, op: str) -> str:
    """The host path of ``path`` (:func:`resolve`), a NUL in it refused as Go's syscalls refuse one: EINVAL, which
    the handlers answer 400 (``resolve`` would say ``invalid path``)."""
    if "\0" in path:
        raise FileError(400, f"{op} {path}: invalid argument")
    return resolve(sandbox, path)


def fs_error(error: OSError, message: str) -> FileError:
    """The later daemon's classification of a file system error: 404 ``FILE_NOT_FOUND`` (``os.IsNotExist``), 403
    ``FILE_ACCESS_DENIED`` (``os.IsPermission``: EACCES, EPERM), else 400 ``BAD_REQUEST``."""
    status = 404 if isinstance(error, FileNotFoundError) else 403 if isinstance(error, PermissionError) else 400
    return FileError(status, message)


def stat_error(error: OSError, op: str, path: str) -> FileError:
    """The handlers' answer to a failed ``os.Stat`` or ``os.ReadDir``: Go's ``*PathError`` (``stat x: ...``),
    classified by :func:`fs_error`."""
    return fs_error(error, f"{op} {path}: {go_errno_text(error)}")


#: The later daemon's answer to a ``depth`` that is no integer (``strconv.Atoi``) or is below 1.
BAD_DEPTH = "depth must be an integer >= 1"
#: Go's ``int`` on a 64-bit machine: ``strconv.Atoi`` refuses a number outside it (``ErrRange``).
_GO_INT_MAX = (1 << 63) - 1


def list_depth(raw: str | None) -> int:
    """The listing's ``depth`` as the later daemon's ``ListFiles`` reads it: absent or empty, 1; else
    ``strconv.Atoi`` (an optional sign and ASCII digits, nothing else: no spaces, no ``_``, no other script's digits,
    within Go's ``int``), and at least 1. Anything else is 400 :data:`BAD_DEPTH`, before the path is looked at."""
    if not raw:
        return 1
    digits = raw[1:] if raw[0] in "+-" else raw
    if not digits or not all("0" <= char <= "9" for char in digits):
        raise FileError(400, BAD_DEPTH)
    significant = digits.lstrip("0")
    if len(significant) > len(str(_GO_INT_MAX)):  # past any int (and Python's limit on digits to convert)
        raise FileError(400, BAD_DEPTH)
    value = int(significant or "0") * (-1 if raw[0] == "-" else 1)
    if value < 1 or value > _GO_INT_MAX:
        raise FileError(400, BAD_DEPTH)
    return value


def list_files(sandbox: Sandbox, path: str, depth: str | None = None) -> list[dict[str, Any]]:
    """``GET /files`` (``ListFiles``): the entries of ``path`` (the working directory, the home, without one), each
    as ``getFileInfo`` makes it, in name order, with its ``path``, ``filepath.Join(path, name)`` (``a.txt`` for an
    entry of ``.``: Go cleans it); an entry it cannot stat (a link that leads nowhere) left out.

    With ``depth`` above 1 (:func:`list_depth`), the later daemon's ``filepath.WalkDir`` under ``path``: each entry
    followed at once by its own (pre-order, each directory's names in byte order), down to ``depth`` levels, flat;
    ``name`` the entry's base name, ``path`` ``filepath.Join`` of the path listed and the entry's path below it.
    :func:`_walk_listing` says what it enters."""
    levels = list_depth(depth)
    shown = path or "."
    target = sandbox.home if not path else target_of(sandbox, path, "open")
    try:
        names = sorted(os.listdir(target), key=os.fsencode)  # Go sorts the bytes (not Python's surrogates)
    except OSError as error:
        raise stat_error(error, "open", shown) from None
    if levels > 1:
        return _walk_listing(target, shown, levels)
    entries = []
    for name in names:
        try:
            joined = go_clean(shown + "/" + name)
            entries.append(file_info(os.path.join(target, name), shown.rstrip("/") + "/" + name, joined))
        except OSError:
            continue
    return entries


def _walk_listing(target: str, shown: str, levels: int) -> list[dict[str, Any]]:
    """The entries ``filepath.WalkDir`` hands the later daemon's ``listFilesRecursive`` under the directory
    ``target`` (``shown`` as the client named it), down to ``levels``. The root is entered where it leads (the daemon
    resolves a link there, so a link to a directory lists as the directory does at depth 1); below it a link is never
    entered (``WalkDir`` takes an entry's type from the directory, a link's own), though its ``FileInfo`` is of what
    it leads to (``isDir`` for a link to a directory; one that leads nowhere left out). A directory that cannot be
    read is listed and not entered (``WalkDir`` hands it on, then its read error, which the daemon answers with
    ``SkipDir``); one at the last level is not read at all. Iterative: a tree of thousands of levels is no
    ``RecursionError``."""
    entries: list[dict[str, Any]] = []
    # (host path, path as the client sees it, level: 1 for the root's entries), the next to hand on last
    stack = list(reversed(_entries_below(target, shown, 1)))
    while stack:
        host, joined, level, is_dir = stack.pop()
        with contextlib.suppress(OSError):
            entries.append(file_info(host, joined, joined))
        if is_dir and level < levels:
            stack.extend(reversed(_entries_below(host, joined, level + 1)))
    return entries


def _entries_below(host: str, shown: str, level: int) -> list[tuple[str, str, int, bool]]:
    """The entries of the directory ``host`` in the order of their names' bytes, as :func:`_walk_listing` stacks
    them: each with whether it is a directory itself (a link is not); none where the directory cannot be read."""
    try:
        with os.scandir(host) as found:
            below = sorted(found, key=lambda entry: os.fsencode(entry.name))
    except OSError:
        return []
    entries = []
    for entry in below:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        entries.append((entry.path, go_clean(shown + "/" + entry.name), level, is_dir))
    return entries


def info(sandbox: Sandbox, path: str) -> dict[str, Any]:
    """``GET /files/info`` (``GetFileInfo``)."""
    target = target_of(sandbox, required(path), "stat")
    try:
        return file_info(target, path)
    except OSError as error:
        raise stat_error(error, "stat", path) from None


def _ends_with_dot(path: str) -> bool:
    """Go's ``endsWithDot``: ``RemoveAll`` refuses such a path (EINVAL), as rmdir(2) refuses ``.``."""
    return path == "." or path.endswith("/.")


def _is_sandbox_root(sandbox: Sandbox, host: str) -> bool:
    """Whether ``host`` is the home or the private tree's root (``/``), which the daemon's user cannot remove or
    rename: their parents are not its to change. A link to either is a link (removed or renamed itself)."""
    if os.path.islink(host):
        return False
    return os.path.realpath(host) in (os.path.realpath(sandbox.home), os.path.realpath(sandbox.fs_root))


def _empty(directory: str) -> None:
    """What ``os.RemoveAll`` of the home or ``/`` does before its last rmdir fails: everything inside is removed."""
    for name in os.listdir(directory):
        inside = os.path.join(directory, name)
        if os.path.isdir(inside) and not os.path.islink(inside):
            remove_tree(inside)
        else:
            os.unlink(inside)


def delete(sandbox: Sandbox, path: str, recursive: bool) -> None:
    """``DELETE /files`` (``DeleteFile``): the path looked up following links; a directory (an empty one, a link to
    one) needs ``recursive``; then ``os.RemoveAll``, which removes a link itself and refuses a path that ends in
    ``.``, or ``os.Remove``. The home (or ``/``) is emptied and kept, as the daemon's last rmdir fails there: 400."""
    target = target_of(sandbox, required(path), "stat")
    try:
        found = os.stat(target)
    except OSError as error:
        raise stat_error(error, "stat", path) from None
    if stat.S_ISDIR(found.st_mode) and not recursive:
        raise FileError(400, "cannot delete directory without recursive flag")
    if recursive and _ends_with_dot(path):
        raise FileError(400, f"RemoveAll {path}: invalid argument")
    if recursive and _is_sandbox_root(sandbox, target):
        _empty(target)
        raise FileError(400, f"unlinkat {path}: permission denied")
    try:
        if recursive and os.path.isdir(target) and not os.path.islink(target):
            if not remove_tree(target):
                raise FileError(400, f"unlinkat {path}: directory not empty")
        else:
            os.unlink(target)
    except OSError as error:
        raise FileError(400, f"remove {path}: {go_errno_text(error)}") from None


def folder_mode(raw: str | None) -> int:
    """The ``mode`` of a folder creation as Go's ``os.FileMode``: octal digits, as the daemon parses them
    (``ParseUint(mode, 8, 32)``), or 0755 without one. Anything else is its 400 (Python's ``int(x, 8)`` also takes
    ``0o``, ``_`` and signs, which the daemon refuses)."""
    if not raw:
        return 0o755
    if not raw.isascii() or not raw.isdigit() or "8" in raw or "9" in raw or int(raw, 8) >= 1 << 32:
        raise FileError(400, "invalid mode format")
    return int(raw, 8)


def create_folder(sandbox: Sandbox, path: str, mode: str | None) -> None:
    """``POST /files/folder`` (``CreateFolder``): ``os.MkdirAll(path, mode)``; a folder that is there already is
    made again without a word (its mode unchanged), any error of it a 400."""
    required(path)
    perm = folder_mode(mode)
    try:
        mkdir_all(sandbox, path, perm)
    except GoPathError as error:
        raise FileError(400, str(error)) from None


def _download_headers(name: str) -> dict[str, str]:
    """The headers ``DownloadFile`` sets before it serves the file."""
    return {
        "Content-Description": "File Transfer",
        "Content-Type": "application/octet-stream",
        "Content-Disposition": attachment_disposition(name),
        "Content-Transfer-Encoding": "binary",
        "Expires": "0",
        "Cache-Control": "must-revalidate",
        "Pragma": "public",
    }


def _serve_error(error: OSError, headers: dict[str, str]) -> Response:
    """``http.ServeFile``'s answer to a file it cannot open (after the handler's checks passed): Go's
    ``toHTTPError`` text, as ``http.Error`` writes it, the handler's headers kept but ``Cache-Control``."""
    if isinstance(error, FileNotFoundError):
        status, text = 404, "404 page not found"
    elif isinstance(error, PermissionError):
        status, text = 403, "403 Forbidden"
    else:
        status, text = 500, "500 Internal Server Error"
    kept = {name: value for name, value in headers.items() if name not in ("Cache-Control", "Content-Type")}
    kept["X-Content-Type-Options"] = "nosniff"
    return Response((text + "\n").encode(), status, headers=kept, media_type="text/plain; charset=utf-8")


def download_one(sandbox: Sandbox, path: str) -> Response:
    """``GET /files/download`` (``DownloadFile``): a directory is 400; the file is served by ``http.ServeFile``
    with the handler's headers (an attachment named for the path's last element) and its ``Last-Modified``."""
    target = target_of(sandbox, required(path), "stat")
    try:
        found = os.stat(target)
    except OSError as error:
        raise stat_error(error, "stat", path) from None
    if stat.S_ISDIR(found.st_mode):
        raise FileError(400, "path must be a file")
    headers = _download_headers(go_clean(path).rsplit("/", 1)[-1] or "/")
    try:
        data = read_file(target)
    except OSError as error:
        return _serve_error(error, headers)
    if found.st_mtime:  # ServeFile leaves it out for the Unix epoch
        headers["Last-Modified"] = email.utils.formatdate(found.st_mtime, usegmt=True)
    return Response(data, headers=headers, media_type=None)


def gin_json(payload: Any, status: int = 200) -> Response:
    """An answer of gin's ``c.JSON``: Go's JSON, ``application/json; charset=utf-8``."""
    return Response(go_marshal(payload), status, media_type="application/json; charset=utf-8")


def upload_index(field_name: str) -> str:
    """``0`` of ``files[0].path`` or ``files[0].file``, as the daemon's ``extractIndex`` cuts it."""
    index = field_name.removeprefix("files[")
    return index.removesuffix("].path").removesuffix("].file")


def _upload_file(sandbox: Sandbox, dest: str, part: Part) -> str | None:
    """One ``files[i].file`` written as ``UploadFiles`` writes it: ``os.MkdirAll(filepath.Dir(dest), 0755)``, then
    ``os.Create(dest)`` and the part's bytes (a part the body ended inside: what came, then ``unexpected EOF``).
    The daemon's error line for it, or None."""
    parent = go_dir(dest)
    try:
        mkdir_all(sandbox, parent, 0o755)
    except GoPathError as error:
        return f"{dest}: mkdir {parent}: {error}"
    except ApiError:  # the parents, cleaned, lie outside the sandbox: made there, unseen; the file's own path,
        pass  # which the kernel resolves, decides
    if "\0" in dest:
        return f"{dest}: create: open {dest}: invalid argument"
    try:
        fd = create_file(sandbox, resolve(sandbox, dest), dest)
    except ApiError as error:
        return f"{dest}: create: {error.message}"
    except OSError as error:
        return f"{dest}: create: open {dest}: {go_errno_text(error)}"
    try:
        write_all(fd, part.data)
    except OSError as error:
        return f"{dest}: write: write {dest}: {go_errno_text(error)}"
    finally:
        os.close(fd)
    return f"{dest}: write: unexpected EOF" if part.cut else None


def bulk_upload(sandbox: Sandbox, body: bytes, content_type: str | None) -> Response:
    """``POST /files/bulk-upload`` (``UploadFiles``): a body that is no multipart form is 400 ``{"errors":
    ["invalid multipart form"]}``; otherwise each ``files[i].path`` (trimmed of Go's white space) names where the
    ``files[i].file`` after it goes, each file written as it comes. Every error is a line of ``errors`` (the
    reader's own last, ``reading part: ...``), answered 400 beside the ``files`` written; ``files`` is ``null``
    where none was (a Go nil slice), so an upload of no files is ``{"files": null}``."""
    boundary = multipart_boundary(content_type)
    if boundary is None:
        return gin_json({"errors": ["invalid multipart form"]}, 400)
    parts, failure = read_parts(body, boundary)
    destinations: dict[str, str] = {}
    errors: list[str] = []
    files: list[dict[str, Any]] | None = None
    for part in parts:
        name = part.form_name()
        index = upload_index(name)
        if name.endswith(".path"):
            dest = go_trim_space(part.data.decode("utf-8", "surrogateescape"))
            if part.cut:
                errors.append(f"path[{index}]: unexpected EOF")
            elif not dest:
                errors.append(f"path[{index}]: empty path")
            else:
                destinations[index] = dest
        elif name.endswith(".file"):
            if index not in destinations:
                errors.append(f"file[{index}]: missing .path metadata")
            elif problem := _upload_file(sandbox, destinations[index], part):
                errors.append(problem)
            else:
                files = files if files is not None else []
                files.append({"path": go_text(destinations[index]), "bytes": len(part.data)})
    if failure is not None:
        errors.append(f"reading part: {failure}")
    if errors:
        return gin_json({"errors": [go_text(line) for line in errors], "files": files}, 400)
    return gin_json({"files": files})


#: The daemon's fixed boundary for bulk downloads.
DOWNLOAD_BOUNDARY = "DAYTONA-FILE-BOUNDARY"
_NO_PATHS = 'request body must be {"paths": [ ... ]} and non-empty'


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is no JSON")  # Go's decoder refuses NaN and Infinity, Python's takes them


def download_paths(body: bytes) -> list[str] | None:
    """The ``paths`` of a bulk download as ``c.BindJSON`` fills ``FilesDownloadRequest``: from the body's first JSON
    value (what follows it is never read), the field found without regard to case (the last of several wins), a
    null element an empty path, a byte that is no UTF-8 (or a lone surrogate escape) U+FFFD; None where Go's
    decoding fails (a JSON ``null`` body, or one without the field, is no paths)."""
    text = body.decode("utf-8", "surrogateescape").lstrip(" \t\r\n")
    try:
        value, _ = json.JSONDecoder(parse_constant=_no_constant).raw_decode(text)
    except ValueError:
        return None
    if value is None:
        return []
    if not isinstance(value, dict):
        return None
    paths = _field(value, "paths")
    if paths is None:
        return []
    if not isinstance(paths, list) or not all(item is None or isinstance(item, str) for item in paths):
        return None
    return [as_go_decodes(item or "") for item in paths]


def _go_now() -> str:
    """``time.Now().UTC()`` as Go's JSON writes it (RFC 3339 with the fraction's trailing zeros dropped)."""
    now = datetime.now(timezone.utc)
    fraction = f"{now.microsecond:06d}".rstrip("0")
    return now.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


class _Refused(Exception):
    """A path ``openDownloadFile`` refuses: the status, code and message of its ``ErrorResponse``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _open_refusal(error: OSError, path: str) -> _Refused:
    """``classifyOpenFileError``: ENOENT 404 ``FILE_NOT_FOUND``, EACCES or EPERM 403 ``FILE_ACCESS_DENIED``, any
    other 500 ``FILE_READ_FAILED`` with Go's ``open`` error (``os.ErrInvalid`` never comes of a syscall)."""
    if isinstance(error, FileNotFoundError):
        return _Refused(404, "FILE_NOT_FOUND", f"file not found: {path}")
    if isinstance(error, PermissionError):
        return _Refused(403, "FILE_ACCESS_DENIED", f"permission denied: {path}")
    return _Refused(500, "FILE_READ_FAILED", f"failed to open file: open {path}: {go_errno_text(error)}")


def _download(sandbox: Sandbox, path: str) -> bytes:
    """``openDownloadFile`` and the copy: the bytes of ``path``, or why not."""
    if not path:
        raise _Refused(400, "INVALID_FILE_PATH", "invalid file path: path is empty")
    if "\0" in path:  # Go's open refuses the name: EINVAL, none of the classes it names
        raise _Refused(500, "FILE_READ_FAILED", f"failed to open file: open {path}: invalid argument")
    try:
        target = resolve(sandbox, path)
    except ApiError:  # a path the emulator keeps out of the sandbox
        raise _Refused(400, "INVALID_FILE_PATH", f"invalid file path: {path}") from None
    try:
        if is_dir(target):
            raise _Refused(400, "INVALID_FILE_PATH", f"invalid file path: path points to a directory: {path}")
        return read_file(target)
    except OSError as error:
        raise _open_refusal(error, path) from None


def bulk_download(sandbox: Sandbox, body: bytes) -> Response:
    """``POST /files/bulk-download`` (``DownloadFiles``): a body that is not ``{"paths": [...]}`` with a path is 400
    in the daemon's envelope (the SDK 0.226's client declares ``ErrorResponse`` for it; the daemon at 8b6f9b14a
    answered its own ``{"error": ...}``); otherwise a multipart answer under its fixed boundary, each path in order
    a ``file`` part (typed by ``mime.TypeByExtension``, with its ``Content-Length``) or an ``error`` part holding the
    daemon's ``ErrorResponse`` (``statusCode``, ``message``, ``source``, ``code``, ``timestamp``, ``path``,
    ``method``, in the later daemon's struct's order: its ``source``, which the daemon at 8b6f9b14a did not write,
    lets the SDK raise ``DaytonaFileNotFoundError``), each named for the path in ``filename`` (Latin-1) and
    ``filename*`` (RFC 5987)."""
    paths = download_paths(body)
    if not paths:
        raise FileError(400, _NO_PATHS)
    parts: list[tuple[dict[str, str], bytes]] = []
    for path in paths:
        try:
            data = _download(sandbox, path)
        except _Refused as refused:
            error = {
                "statusCode": refused.status,
                "message": go_text(refused.message),
                "source": DAEMON_SOURCE,
                "code": refused.code,
                "timestamp": _go_now(),
                "path": go_text(path),
                "method": "POST",
            }
            headers = {"Content-Disposition": form_disposition("error", path)}
            headers["Content-Type"] = "application/json; charset=utf-8"
            parts.append((headers, go_marshal(error)))
            continue
        headers = {"Content-Disposition": form_disposition("file", path), "Content-Length": str(len(data))}
        headers["Content-Type"] = go_mime_type(path)
        parts.append((headers, data))
    payload, content_type = multipart_body(parts, DOWNLOAD_BOUNDARY)
    return Response(payload, headers={"Content-Type": content_type}, media_type=None)


def _pair(first: str, second: str, message: str) -> None:
    """The two query parameters a handler requires: either missing or empty is 400 with ``message``."""
    if not first or not second:
        raise FileError(400, message)


#: ``bufio.Scanner``'s ``MaxScanTokenSize``: a line this long stops the scan of its file (``ErrTooLong``, unread).
_MAX_LINE = 64 * 1024


def _scanned_lines(content: bytes) -> Iterator[bytes]:
    """The lines ``bufio.Scanner`` with ``ScanLines`` yields: split at ``\\n``, a ``\\r`` at a line's end dropped
    (the last line's too, which needs no ``\\n``); a line past the scanner's buffer ends the scan (the handler
    ignores the error)."""
    start = 0
    while start < len(content):
        end = content.find(b"\n", start)
        stop = len(content) if end < 0 else end
        if stop - start >= _MAX_LINE:
            return
        yield content[start:stop].removesuffix(b"\r")
        start = stop + 1


def _text_of(host: str) -> bytes | None:
    """A regular file's bytes as ``FindInFiles`` reads it, or None where it passes the file over: it cannot open
    it, its first read gives nothing (an empty file), or the first 512 bytes hold a NUL (a binary file)."""
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            content = file.read()
        except OSError:
            return None
    head = content[:512]
    return None if not head or b"\0" in head else content


def find_in_files(sandbox: Sandbox, path: str, pattern: str) -> list[dict[str, Any]]:
    """``GET /files/find`` (``FindInFiles``): each line of each regular, non-binary file under ``path`` (walked as
    Go walks it, links not followed) that holds ``pattern``, as ``{file, line, content}``; a path that is not
    there, nothing."""
    _pair(path, pattern, "path and pattern are required")
    wanted = pattern.encode("utf-8", "surrogateescape")
    matches = []
    for shown, host, found in walk(sandbox, path):
        if not stat.S_ISREG(found.st_mode) or (content := _text_of(host)) is None:
            continue
        for number, line in enumerate(_scanned_lines(content), start=1):
            if wanted in line:
                matches.append({"file": go_text(shown), "line": number, "content": go_string(line)})
    return matches


def search_files(sandbox: Sandbox, path: str, pattern: str) -> dict[str, list[str]]:
    """``GET /files/search`` (``SearchFiles``): every path under ``path`` (itself first, walked as Go walks it)
    whose name matches ``pattern`` by ``filepath.Match``; a malformed pattern matches nothing."""
    _pair(path, pattern, "path and pattern are required")
    found_paths = [go_text(shown) for shown, _, _ in walk(sandbox, path) if go_match(pattern, base_name(shown))]
    return {"files": found_paths}


#: The code of a body that does not bind (``INVALID_REQUEST_BODY``, as the SDK 0.226's ``DaemonErrorCode`` names it).
BAD_BODY = "INVALID_REQUEST_BODY"


def _bound_body(body: bytes) -> Any:
    """The first JSON value of a body, as gin's JSON binding decodes it (what follows is never read; a byte that is
    no UTF-8 or a lone surrogate escape is U+FFFD); a body that does not decode is the handler's 400
    ``INVALID_REQUEST_BODY`` (the later daemon's ``NewInvalidBodyRequestError``)."""
    text = body.decode("utf-8", "surrogateescape").lstrip(" \t\r\n")
    try:
        value, _ = json.JSONDecoder(parse_constant=_no_constant).raw_decode(text)
    except ValueError:
        raise FileError(400, "invalid request body", BAD_BODY) from None
    return as_go_decodes(value)


def _field(body: dict[str, Any], name: str) -> Any:
    """A struct field as Go's decoder fills it: its key matched without regard to case, the last of several."""
    value = None
    for key, item in body.items():
        if key.lower() == name.lower():
            value = item
    return value


def replace_request(body: bytes) -> tuple[list[str], str, str]:
    """``ReplaceRequest`` bound and validated: ``files`` a list of strings (a null one empty) that is there,
    ``pattern`` a string that is not empty, ``newValue`` a string that is there (empty is fine); else 400
    ``INVALID_REQUEST_BODY``."""
    value = _bound_body(body)
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise FileError(400, "invalid request body: json: cannot unmarshal into ReplaceRequest", BAD_BODY)
    files, pattern, new_value = _field(value, "files"), _field(value, "pattern"), _field(value, "newValue")
    types_ok = (
        (files is None or (isinstance(files, list) and all(f is None or isinstance(f, str) for f in files)))
        and (pattern is None or isinstance(pattern, str))
        and (new_value is None or isinstance(new_value, str))
    )
    if not types_ok:
        raise FileError(400, "invalid request body: json: cannot unmarshal into ReplaceRequest", BAD_BODY)
    if files is None or not pattern or new_value is None:  # validate:"required" on each
        message = "invalid request body: Key: 'ReplaceRequest' Error: failed on the 'required' tag"
        raise FileError(400, message, BAD_BODY)
    return [f or "" for f in files], pattern, new_value


def _replace_in(sandbox: Sandbox, path: str, old: bytes, new: bytes) -> str | None:
    """One file of ``ReplaceInFiles``: ``os.ReadFile``, ``strings.ReplaceAll``, ``os.WriteFile`` (written again
    whether anything changed or not); Go's error for it, or None."""
    if "\0" in path or not path:  # Go's open of "" is ENOENT, of a NUL EINVAL
        return f"open {path}: {'invalid argument' if path else 'no such file or directory'}"
    try:
        target = resolve(sandbox, path)
        if is_dir(target):
            return f"read {path}: is a directory"
        content = read_file(target)
    except ApiError as error:
        return error.message
    except OSError as error:
        return f"open {path}: {go_errno_text(error)}"
    try:
        fd = create_file(sandbox, target, path)
    except ApiError as error:
        return error.message
    except OSError as error:
        return f"open {path}: {go_errno_text(error)}"
    try:
        write_all(fd, content.replace(old, new))
    except OSError as error:
        return f"write {path}: {go_errno_text(error)}"
    finally:
        os.close(fd)
    return None


def replace_in_files(sandbox: Sandbox, body: bytes) -> list[dict[str, Any]]:
    """``POST /files/replace`` (``ReplaceInFiles``): each file in order, ``{file, success}`` with Go's ``error``
    where it failed (``open x: no such file or directory``); a body that does not bind is 400."""
    files, pattern, new_value = replace_request(body)
    old, new = pattern.encode("utf-8", "surrogateescape"), new_value.encode("utf-8", "surrogateescape")
    results: list[dict[str, Any]] = []
    for path in files:
        failure = _replace_in(sandbox, path, old, new)
        result: dict[str, Any] = {"file": go_text(path), "success": failure is None}
        if failure is not None:
            result["error"] = go_text(failure)
        results.append(result)
    return results


def _stat_or_refuse(host: str, shown: str) -> os.stat_result:
    try:
        return os.stat(host)
    except OSError as error:
        raise stat_error(error, "stat", shown) from None


def move(sandbox: Sandbox, source: str, destination: str) -> None:
    """``POST /files/move`` (``MoveFile``): the source looked up (404, 403, 400), the destination's directory too,
    a destination that is there 409, then ``os.Rename``. Where the rename fails the daemon copies and removes
    instead; here only across file systems (EXDEV) — any other failure is the 400 the copy's failure would give."""
    _pair(source, destination, "source and destination paths are required")
    source_host = target_of(sandbox, source, "stat")
    destination_host = target_of(sandbox, destination, "stat")
    _stat_or_refuse(source_host, source)
    if _is_sandbox_root(sandbox, source_host):  # the daemon's user may not rename its home (nor /)
        raise FileError(400, f"failed to move file: rename {source} {destination}: permission denied")
    _stat_or_refuse(os.path.dirname(destination_host), go_dir(destination))
    if os.path.exists(destination_host):
        raise FileError(409, "destination already exists")
    try:
        os.rename(source_host, destination_host)
    except OSError as error:
        if error.errno != errno.EXDEV:
            message = f"failed to move file: rename {source} {destination}: {go_errno_text(error)}"
            raise FileError(400, message) from None
        _copy_then_remove(source_host, destination_host, source)


def _copy_then_remove(source: str, destination: str, shown: str) -> None:
    """The daemon's fallback for a rename across file systems: a copy (each link's target, as its ``os.Open``
    reads it) and ``os.RemoveAll`` of the source. A failed copy is 400, its message naming the client's source
    (``shutil`` names the emulator's own paths, which the client must not see)."""
    try:
        if os.path.isdir(source) and not os.path.islink(source):
            shutil.copytree(source, destination, symlinks=False)
        else:
            shutil.copy2(source, destination)
    except OSError as error:  # shutil.Error too, which has no errno
        reason = os.strerror(error.errno).lower() if error.errno else "copy failed"
        raise FileError(400, f"failed to move file: copy {shown}: {reason}") from None
    if os.path.isdir(source) and not os.path.islink(source):
        remove_tree(source)
    else:
        os.unlink(source)


#: The owners and groups the sandbox image's ``/etc/passwd`` and ``/etc/group`` name (``user.Lookup``).
IMAGE_IDS = {"root": 0, "daytona": 1000}
#: Go's ``os.FileMode`` bits that ``os.Chmod`` turns into set-user-ID, set-group-ID and sticky (0o7000 are not).
_GO_SPECIAL_BITS = ((1 << 23, stat.S_ISUID), (1 << 22, stat.S_ISGID), (1 << 20, stat.S_ISVTX))


def _go_id(raw: str, missing: str) -> int:
    """An owner or group as the handler resolves it: ``strconv.Atoi`` first (a sign is fine), then the image's
    names; else 400 ``user not found`` / ``group not found``."""
    digits = raw[1:] if raw[:1] in "+-" else raw
    if digits.isascii() and digits.isdigit():
        return int(raw)
    if raw in IMAGE_IDS:
        return IMAGE_IDS[raw]
    raise FileError(400, missing)


def set_permissions(sandbox: Sandbox, path: str, mode: str | None, owner: str | None, group: str | None) -> None:
    """``POST /files/permissions`` (``SetFilePermissions``): the path looked up (404, 403, 400); ``mode`` parsed
    as a folder's is and applied as Go's ``os.Chmod`` applies an ``os.FileMode`` (its nine permission bits, and
    set-user-ID, set-group-ID and sticky only from Go's own bits: ``4755`` is 0755); then ``owner`` and ``group``.
    The daemon runs as the sandbox's user (1000, as the file API shows every file), so a change to another owner or
    group is its chown's EPERM; to its own, nothing changes. A failed chmod or chown is classified as the later
    daemon's ``classifyChmodChownError`` does (EPERM, EACCES: 403 ``FILE_ACCESS_DENIED``; ENOENT 404; else 400),
    where the daemon at 8b6f9b14a answered 400 for each."""
    required(path)
    target = target_of(sandbox, path, "stat")
    _stat_or_refuse(target, path)
    if mode:
        value = folder_mode(mode)
        bits = value & 0o777
        for go_bit, bit in _GO_SPECIAL_BITS:
            bits |= bit if value & go_bit else 0
        try:
            os.chmod(target, bits)
        except OSError as error:
            raise fs_error(error, f"failed to change mode for {path}: chmod {path}: {go_errno_text(error)}") from None
    if owner or group:
        uid = _go_id(owner, "user not found") if owner else -1
        gid = _go_id(group, "group not found") if group else -1
        if uid not in (-1, 1000) or gid not in (-1, 1000):
            message = f"failed to change ownership for {path}: chown {path}: operation not permitted"
            raise FileError(403, message)
