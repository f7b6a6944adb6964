"""Normalisers for comparing emulator answers with recordings of the real services.

Only what legitimately differs between two runs of the same server is normalised: the random temp paths, the
measured ``execution_time``, and the location of the Python installation (the recording's runtime lived under
``/usr/lib/python3.11`` and ``/opt/conda/envs/sandbox-runtime``; ours lives wherever the runtime interpreter is).
Anything else that differs is a divergence, listed with its reason in ``KNOWN_DIVERGENCES``.
"""

from __future__ import annotations

import re
from typing import Any

TEMP_PATH = re.compile(r"/tmp/tmp[a-z0-9_]{8}/(tmp[a-z0-9_]{8}(\.[A-Za-z]+)?|[A-Za-z_]+\.[a-z]+)")
STDLIB_PATH = re.compile(r'File "[^"]*/lib/python3\.\d+/(?!site-packages/)')
SITE_PACKAGES = re.compile(r'File "[^"]*/site-packages/')

#: Recorded cases whose answer depends on the recording machine, not on the server: case id -> reason.
KNOWN_DIVERGENCES: dict[str, str] = {
    "32_numpy_with_memlimit_1024": (
        "stderr names the recording host's RLIMIT_NPROC value and its numpy build's import chain (file paths, line "
        "numbers), which depend on the numpy version installed in the runtime; status, return code -2, the OpenBLAS "
        "pthread_create failure lines and the final KeyboardInterrupt are compared instead"
    ),
}


def normalize_text(text: str | None) -> str | None:
    if text is None:
        return None
    text = TEMP_PATH.sub("<TMPFILE>", text)
    text = STDLIB_PATH.sub('File "<STDLIB>/', text)
    return SITE_PACKAGES.sub('File "<SITE>/', text)


def normalize_result(result: Any) -> Any:
    """Drop ``execution_time`` and normalise paths inside a command result (or None)."""
    if not isinstance(result, dict):
        return result
    out = {k: v for k, v in result.items() if k != "execution_time"}
    for stream in ("stdout", "stderr"):
        if stream in out:
            out[stream] = normalize_text(out[stream])
    return out


def normalize_run_code(body: Any) -> Any:
    """A ``/run_code`` answer (or a 422 detail) with only run-to-run noise removed. Only the results present are
    normalised: an absent key must stay absent, or it would compare equal to one that is null."""
    if not isinstance(body, dict) or "status" not in body:
        return body
    out = dict(body)
    for key in ("compile_result", "run_result"):
        if key in out:
            out[key] = normalize_result(out[key])
    if isinstance(out.get("message"), str):
        out["message"] = normalize_text(out["message"])
    return out


UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
ORIGIN = re.compile(r"\bhttps?://[A-Za-z0-9.\-]+(:\d+)?")
#: The name Daytona's soft delete gives (``DESTROYED_<name>_<epoch ms>``): its time differs on every run.
SOFT_DELETED_NAME = re.compile(r"\A(DESTROYED_.*_)\d{13}\Z", re.S)
#: Keys whose values are measured durations: different on every run.
TIMING_KEYS = frozenset({"execution_time", "executionTime", "duration"})


def normalize_generic(value: Any) -> Any:
    """Ids, dates, URL origins, timings and soft-deleted names' times replaced by placeholders, everywhere in a JSON
    value; temp paths too."""
    if isinstance(value, dict):
        return {k: normalize_generic(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [normalize_generic(v) for v in value]
    if isinstance(value, str):
        value = SOFT_DELETED_NAME.sub(r"\1<EPOCH_MS>", value)
        value = ORIGIN.sub("<ORIGIN>", value)
        value = ISO_DATE.sub("<DATE>", value)
        return UUID.sub("<UUID>", normalize_text(value) or "")
    return value


def normalize_run_jupyter(body: Any) -> Any:
    """A ``/run_jupyter`` answer without the driver's measured time, temp paths normalised in the cells."""
    if not isinstance(body, dict):
        return body
    out = dict(body)
    if isinstance(out.get("driver"), dict):
        out["driver"] = normalize_result(out["driver"])
    if isinstance(out.get("cells"), list):
        out["cells"] = [_paths_normalized(cell) for cell in out["cells"]]
    return out


def _paths_normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _paths_normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_paths_normalized(v) for v in value]
    return normalize_text(value) if isinstance(value, str) else value


#: Normalisers a suite case can name.
NORMALIZERS = {"run_code": normalize_run_code, "run_jupyter": normalize_run_jupyter, "generic": normalize_generic}


def normalize_body(kind: str, body: Any) -> Any:
    """Normalise an answer's body with the normaliser the case names."""
    try:
        normalizer = NORMALIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown normaliser {kind!r} (known: {sorted(NORMALIZERS)})") from None
    return normalizer(body)
