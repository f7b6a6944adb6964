"""The toolbox's file routes, answered as the daemon's handlers answer them (``apps/daemon/pkg/toolbox/fs`` at
8b6f9b14a, 2026-06-30).

Every error those handlers give with ``ctx.AbortWithError`` reaches the client as the status alone, with an empty
body (:class:`~emulator.daytona.errors.DaemonAbort`): a missing ``path`` or a bad ``mode`` is 400, a path that is
not there 404 (Go's ``os.IsNotExist``: ENOENT), one the daemon may not read 403 (``os.IsPermission``: EACCES,
EPERM), any other error of the file system 400. The bulk routes write bodies of their own.
"""

from __future__ import annotations

import email.utils
import json
import os
import stat
from datetime import datetime, timezone
from typing import Any, NoReturn

from starlette.responses import Response

from emulator.executor.trees import remove_tree
from emulator.executor.workdir import write_all

from .errors import ApiError, DaemonAbort
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
from .go_json import as_go_decodes, go_marshal, go_text
from .multipart import Part, multipart_boundary, read_parts
from .sandboxes import Sandbox


def required(path: str) -> str:
    """``path``, which the handler requires: an absent or empty one is 400 ``path is required``."""
    if not path:
        raise DaemonAbort(400, "path is required")
    return path


def target_of(sandbox: Sandbox, path: str, op: str) -> str:
    """The host path of ``path`` (:func:`resolve`), a NUL in it refused as Go's syscalls refuse one: EINVAL, which
    the handlers answer 400 (``resolve`` would say ``invalid path`` in an envelope)."""
    if "\0" in path:
        raise DaemonAbort(400, f"{op} {path}: invalid argument")
    return resolve(sandbox, path)


def stat_abort(error: OSError, op: str, path: str) -> DaemonAbort:
    """The handlers' answer to a failed ``os.Stat`` or ``os.ReadDir``: 404, 403 or 400 as Go classifies it."""
    status = 404 if isinstance(error, FileNotFoundError) else 403 if isinstance(error, PermissionError) else 400
    return DaemonAbort(status, f"{op} {path}: {go_errno_text(error)}")


def _name_key(name: str) -> bytes:
    """Go's ``os.ReadDir`` sorts by the names' bytes (a byte that is no UTF-8 sorts by its value, not as the
    surrogate Python decodes it to)."""
    return os.fsencode(name)


def list_files(sandbox: Sandbox, path: str) -> list[dict[str, Any]]:
    """``GET /files`` (``ListFiles``): the entries of ``path`` (the working directory, the home, without one), each
    as ``getFileInfo`` makes it, in name order; an entry it cannot stat (a link that leads nowhere) left out."""
    shown = path or "."
    target = sandbox.home if not path else target_of(sandbox, path, "open")
    try:
        names = sorted(os.listdir(target), key=_name_key)
    except OSError as error:
        raise stat_abort(error, "open", shown) from None
    entries = []
    for name in names:
        try:
            entries.append(file_info(os.path.join(target, name), shown.rstrip("/") + "/" + name))
        except OSError:
            continue
    return entries


def info(sandbox: Sandbox, path: str) -> dict[str, Any]:
    """``GET /files/info`` (``GetFileInfo``)."""
    target = target_of(sandbox, required(path), "stat")
    try:
        return file_info(target, path)
    except OSError as error:
        raise stat_abort(error, "stat", path) from None


def _ends_with_dot(path: str) -> bool:
    """Go's ``endsWithDot``: ``RemoveAll`` refuses such a path (EINVAL), as rmdir(2) refuses ``.``."""
    return path == "." or path.endswith("/.")


def delete(sandbox: Sandbox, path: str, recursive: bool) -> None:
    """``DELETE /files`` (``DeleteFile``): the path looked up following links; a directory (an empty one, a link to
    one) needs ``recursive``; then ``os.RemoveAll``, which removes a link itself and refuses a path that ends in
    ``.``, or ``os.Remove``."""
    target = target_of(sandbox, required(path), "stat")
    try:
        found = os.stat(target)
    except OSError as error:
        raise stat_abort(error, "stat", path) from None
    if stat.S_ISDIR(found.st_mode) and not recursive:
        raise DaemonAbort(400, "cannot delete directory without recursive flag")
    if recursive and _ends_with_dot(path):
        raise DaemonAbort(400, f"RemoveAll {path}: invalid argument")
    try:
        if recursive and os.path.isdir(target) and not os.path.islink(target):
            if not remove_tree(target):
                raise DaemonAbort(400, f"unlinkat {path}: directory not empty")
        else:
            os.unlink(target)
    except OSError as error:
        raise DaemonAbort(400, f"remove {path}: {go_errno_text(error)}") from None


def folder_mode(raw: str | None) -> int:
    """The ``mode`` of a folder creation as Go's ``os.FileMode``: octal digits, as the daemon parses them
    (``ParseUint(mode, 8, 32)``), or 0755 without one. Anything else is its 400 (Python's ``int(x, 8)`` also takes
    ``0o``, ``_`` and signs, which the daemon refuses)."""
    if not raw:
        return 0o755
    if not raw.isascii() or not raw.isdigit() or "8" in raw or "9" in raw or int(raw, 8) >= 1 << 32:
        raise DaemonAbort(400, "invalid mode format")
    return int(raw, 8)


def create_folder(sandbox: Sandbox, path: str, mode: str | None) -> None:
    """``POST /files/folder`` (``CreateFolder``): ``os.MkdirAll(path, mode)``; a folder that is there already is
    made again without a word (its mode unchanged), any error of it a 400."""
    required(path)
    perm = folder_mode(mode)
    try:
        mkdir_all(sandbox, path, perm)
    except GoPathError as error:
        raise DaemonAbort(400, str(error)) from None


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
        raise stat_abort(error, "stat", path) from None
    if stat.S_ISDIR(found.st_mode):
        raise DaemonAbort(400, "path must be a file")
    headers = _download_headers(go_clean(path).rsplit("/", 1)[-1] or "/")
    try:
        data = read_file(target)
    except OSError as error:
        return _serve_error(error, headers)
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
                files = (files or []) + [{"path": go_text(destinations[index]), "bytes": len(part.data)}]
    if failure is not None:
        errors.append(f"reading part: {failure}")
    if errors:
        return gin_json({"errors": [go_text(line) for line in errors], "files": files}, 400)
    return gin_json({"files": files})


#: The daemon's fixed boundary for bulk downloads.
DOWNLOAD_BOUNDARY = "DAYTONA-FILE-BOUNDARY"
_NO_PATHS = {"error": 'request body must be {"paths": [ ... ]} and non-empty'}


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
    paths: Any = None
    for key, item in value.items():
        if key.lower() == "paths":
            paths = item
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
    """``POST /files/bulk-download`` (``DownloadFiles``): a body that is not ``{"paths": [...]}`` with a path is its
    own 400 ``{"error": ...}``; otherwise a multipart answer under its fixed boundary, each path in order a ``file``
    part (typed by ``mime.TypeByExtension``, with its ``Content-Length``) or an ``error`` part holding the daemon's
    ``ErrorResponse`` (``statusCode``, ``message``, ``code``, ``timestamp``, ``path``, ``method``: no ``source``),
    each named for the path in ``filename`` (Latin-1) and ``filename*`` (RFC 5987)."""
    paths = download_paths(body)
    if not paths:
        return gin_json(_NO_PATHS, 400)
    parts: list[tuple[dict[str, str], bytes]] = []
    for path in paths:
        try:
            data = _download(sandbox, path)
        except _Refused as refused:
            error = {
                "statusCode": refused.status,
                "message": go_text(refused.message),
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
