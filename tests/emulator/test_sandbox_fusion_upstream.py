"""Sandbox Fusion behaviours read from the server's source (FastAPI 0.103's body parsing, the Jupyter runner and
driver, ``run_command_bare``'s failure message, the PHP tag, the memory limit's soft rlimits, the exception handler)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from typing import Any

import httpx

from emulator.app import Emulator
from emulator.sandbox_fusion.runners import LANGUAGE_SPECS, _source

MIB = 1024 * 1024


def _post(path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    """One request to a fresh in-process emulator, through httpx's ASGI transport."""
    app = Emulator()

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox", timeout=60) as client:
                if isinstance(body, bytes):
                    return await client.post(path, content=body, headers={"Content-Type": "application/json"})
                return await client.post(path, json=body)
        finally:
            await app.aclose()

    return asyncio.run(main())


def test_a_json_body_that_is_not_utf8_is_fastapis_400() -> None:
    answer = _post("/run_code", b'{"code":"print(1)\xff","language":"python"}')
    assert (answer.status_code, answer.content) == (400, b'{"detail":"There was an error parsing the body"}')


def test_a_json_body_nested_past_the_decoders_depth_is_fastapis_400() -> None:
    answer = _post("/run_code", b"[" * 100_000 + b"]" * 100_000)
    assert (answer.status_code, answer.json()) == (400, {"detail": "There was an error parsing the body"})


def test_a_json_integer_past_pythons_digit_limit_is_fastapis_400() -> None:
    answer = _post("/run_code", b'{"code":"print(1)","language":"python","run_timeout":' + b"1" * 5000 + b"}")
    assert (answer.status_code, answer.json()) == (400, {"detail": "There was an error parsing the body"})


def test_a_json_null_body_is_a_missing_body() -> None:
    answer = _post("/run_code", b"null")
    assert answer.status_code == 422
    assert answer.json() == {
        "detail": [
            {
                "type": "missing",
                "loc": ["body"],
                "msg": "Field required",
                "input": None,
                "url": "https://errors.pydantic.dev/2.6/v/missing",
            }
        ]
    }


def test_jupyter_ignores_cell_timeout_and_memory_limit_and_gives_ten_seconds_more() -> None:
    """Upstream's driver never applies ``cell_timeout``, its runner never passes ``memory_limit_MB`` on, and the
    driver's command gets ``total_timeout + 10``."""
    cells = [
        "import time\ntime.sleep(0.5)\nprint('slept')",
        "block = bytearray(300 * 1024 * 1024)\nlen(block)",
    ]
    body = {"cells": cells, "cell_timeout": 0.1, "total_timeout": 0, "memory_limit_MB": 128}
    answer = _post("/run_jupyter", body).json()
    assert answer["status"] == "Success", answer
    assert [cell["stdout"] for cell in answer["cells"]] == ["slept\n", ""]
    assert answer["cells"][1]["display"] == [{"text/plain": str(300 * MIB)}]
    assert all(cell["error"] == [] for cell in answer["cells"])


def test_jupyter_driver_prints_its_config_with_non_ascii_as_is() -> None:
    answer = _post("/run_jupyter", {"cells": ["s = 'é'"]}).json()
    assert answer["status"] == "Success", answer
    stdout = answer["driver"]["stdout"]
    assert stdout.startswith("config: \n{\n") and "\"s = 'é'\"" in stdout and "\\u00e9" not in stdout


def test_memory_limit_sets_soft_rlimits_only_so_a_program_may_raise_them() -> None:
    code = (
        "import resource as r\n"
        "print([r.getrlimit(getattr(r, n)) for n in ('RLIMIT_AS', 'RLIMIT_DATA', 'RLIMIT_STACK')])\n"
        "hard = r.getrlimit(r.RLIMIT_AS)[1]\n"
        "r.setrlimit(r.RLIMIT_AS, (hard, hard))\n"
        "r.setrlimit(r.RLIMIT_DATA, (hard, hard))\n"
        "print(len(bytearray(300 * 1024 * 1024)))\n"
    )
    answer = _post("/run_code", {"code": code, "language": "python", "memory_limit_MB": 128}).json()
    assert answer["status"] == "Success", answer
    import resource

    hard = [resource.getrlimit(res)[1] for res in (resource.RLIMIT_AS, resource.RLIMIT_DATA, resource.RLIMIT_STACK)]
    if hard[0] == resource.RLIM_INFINITY or hard[0] > 4096 * MIB:
        hard[0] = 4096 * MIB  # raised again, the address space stays under the emulator's safety cap (4 GiB)
    limits, allocated = answer["run_result"]["stdout"].splitlines()
    assert limits == repr([(128 * MIB, h) for h in hard])
    assert allocated == str(300 * MIB)


_PREEXEC_SCRIPT = """
import asyncio, json, resource
resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, 64 << 20))  # the server's hard stack limit: 64 MiB
import httpx
from emulator.app import Emulator

async def main() -> None:
    emulator = Emulator()
    transport = httpx.ASGITransport(app=emulator.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sandbox", timeout=60) as client:
        for language, code in (("python", "print(1)"), ("cpp", "int main() {}")):
            body = {"code": code, "language": language, "memory_limit_MB": 128}
            print(json.dumps((await client.post("/run_code", json=body)).json()))
    await emulator.aclose()

asyncio.run(main())
"""


def test_a_failed_preexec_names_the_command_as_run_command_bare_does() -> None:
    """SandboxFusion issue #70's answer: the message and stderr are ``exception on running command <command>: <error>
    | None``, the command being the one the server would have run (``python <file>``, or the compile command)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _PREEXEC_SCRIPT], cwd=repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    python, cpp = (json.loads(line) for line in done.stdout.splitlines())
    message = python["message"]
    assert re.fullmatch(
        r"exception on running command python /tmp/tmp\w{8}/tmp\w{8}\.py: Exception occurred in preexec_fn\. \| None",
        message,
    ), message
    assert python["status"] == "SandboxError" and python["compile_result"] is None
    assert python["run_result"] == {
        "status": "Error",
        "execution_time": None,
        "return_code": None,
        "stdout": None,
        "stderr": message,
    }
    assert cpp["status"] == "SandboxError" and cpp["run_result"] is None
    assert re.fullmatch(
        r"exception on running command g\+\+ -std=c\+\+17 /tmp/tmp\w{8}/tmp\w{8}\.cpp -o test[^:]*: "
        r"Exception occurred in preexec_fn\. \| None",
        cpp["message"],
    ), cpp["message"]
    assert cpp["compile_result"]["stderr"] == cpp["message"]


def test_php_code_gets_its_opening_tag_as_upstream_writes_it() -> None:
    php = LANGUAGE_SPECS["php"]
    assert _source(php, "echo 'hi';") == "<?php\necho 'hi';"
    assert _source(php, "  \n<?php echo 1;") == "<?php echo 1;"  # leading blanks go, as upstream's lstrip
    assert _source(php, "\n\techo 1;") == "<?php\necho 1;"
    assert _source(LANGUAGE_SPECS["python"], "  print(1)") == "  print(1)"


def test_injected_sandbox_fusion_bodies_are_compact_json() -> None:
    rules = [
        {"id": "e", "route": "sandbox_fusion.run_code", "requests": "1", "fault": "sandbox_error"},
        {"id": "f", "route": "sandbox_fusion.run_code", "requests": "2", "fault": {"status": 500}},
    ]
    emulator = Emulator(faults={"rules": rules})

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=emulator.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
                body = {"code": "print(1)", "language": "python"}
                return [await client.post("/run_code", json=body) for _ in range(2)]
        finally:
            await emulator.aclose()

    bodies = asyncio.run(main())
    assert [b.status_code for b in bodies] == [200, 500]
    for answer in bodies:
        payload = answer.json()
        assert answer.content == json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    assert bodies[0].json()["status"] == "SandboxError"
    assert bodies[1].json()["traceback"][-1] == ""  # traceback.format_exc().split('\n') ends with an empty item


def _requests(*calls: tuple[str, str]) -> list[httpx.Response]:
    """Requests without a body to a fresh in-process emulator."""
    app = Emulator()

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox", timeout=60) as client:
                return [await client.request(method, path) for method, path in calls]
        finally:
            await app.aclose()

    return asyncio.run(main())


def test_the_get_routes_refuse_head_as_fastapis_get_routes_do() -> None:
    """The real server declares ``/v1/ping`` and ``/`` with ``@app.get``, which adds no HEAD (Starlette's own routes
    add it): HEAD is a 405 there, and any 405 allows GET alone."""
    calls = [(m, p) for p in ("/v1/ping", "/") for m in ("HEAD", "DELETE", "OPTIONS")]
    for (method, path), answer in zip(calls, _requests(*calls), strict=True):
        assert (answer.status_code, answer.headers.get("allow")) == (405, "GET"), (method, path)
    ping, root = _requests(("GET", "/v1/ping"), ("GET", "/"))
    assert (ping.status_code, ping.json(), root.status_code) == (200, "pong", 200)
