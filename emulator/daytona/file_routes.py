"""The toolbox's file routes, answered as the daemon's handlers answer them (``apps/daemon/pkg/toolbox/fs`` at
8b6f9b14a, 2026-06-30).

Every error those handlers give with ``ctx.AbortWithError`` reaches the client as the status alone, with an empty
body (:class:`~emulator.daytona.errors.DaemonAbort`): a missing ``path`` or a bad ``mode`` is 400, a path that is
not there 404 (Go's ``os.IsNotExist``: ENOENT), one the daemon may not read 403 (``os.IsPermission``: EACCES,
EPERM), any other error of the file system 400. The bulk routes write bodies of their own.
"""

from __future__ import annotations

import email.utils
import os
import stat
from typing import Any

from starlette.responses import Response

from emulator.executor.trees import remove_tree
from emulator.executor.workdir import write_all

from .errors import ApiError, DaemonAbort
from .files import (
    GoPathError,
    attachment_disposition,
    create_file,
    file_info,
    go_clean,
    go_dir,
    go_errno_text,
    go_trim_space,
    mkdir_all,
    read_file,
    resolve,
)
from .go_json import go_marshal, go_text
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
