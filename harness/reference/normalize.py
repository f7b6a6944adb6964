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
    """A ``/run_code`` answer (or a 422 detail) with only run-to-run noise removed."""
    if not isinstance(body, dict) or "status" not in body:
        return body
    out = dict(body)
    out["compile_result"] = normalize_result(body.get("compile_result"))
    out["run_result"] = normalize_result(body.get("run_result"))
    if isinstance(out.get("message"), str):
        out["message"] = normalize_text(out["message"])
    return out
