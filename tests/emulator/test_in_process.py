"""The in-process ways to use the emulator: httpx's ASGI transport and respx, with no socket at all."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest
import respx

from emulator.app import Emulator
from emulator.transport import EmulatedConnectionReset


def test_asgi_transport_runs_code() -> None:
    emulator = Emulator()

    async def main() -> dict[str, object]:
        transport = httpx.ASGITransport(app=emulator.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
                answer = await client.post("/run_code", json={"code": "print(40 + 2)", "language": "python"})
                assert answer.status_code == 200
                body: dict[str, object] = answer.json()
                return body
        finally:
            await emulator.aclose()

    body = asyncio.run(main())
    [entry] = emulator.journal.entries("sandbox_fusion.run_code")
    assert entry.arrived is None and entry.finished is not None  # no socket: no arrival to tell
    assert body["status"] == "Success"
    assert body["run_result"] == {
        "status": "Finished",
        "execution_time": body["run_result"]["execution_time"],  # type: ignore[index]
        "return_code": 0,
        "stdout": "42\n",
        "stderr": "",
    }


def test_respx_routes_a_host_to_the_emulator() -> None:
    async def main() -> int:
        emulator = Emulator(faults={"rules": [{"id": "x", "route": "sandbox_fusion.ping", "fault": {"status": 503}}]})
        with respx.mock(assert_all_called=False) as router:
            router.route(host="sandbox.internal").mock(side_effect=respx.ASGIHandler(emulator.app))
            async with httpx.AsyncClient() as client:
                answer = await client.get("http://sandbox.internal/v1/ping")
        await emulator.aclose()
        return answer.status_code

    assert asyncio.run(main()) == 503


def test_reset_without_a_socket_raises_to_the_client() -> None:
    async def main() -> None:
        emulator = Emulator(faults={"rules": [{"id": "r", "route": "sandbox_fusion.*", "fault": "reset"}]})
        transport = httpx.ASGITransport(app=emulator.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            await client.get("/v1/ping")

    with pytest.raises(EmulatedConnectionReset):
        asyncio.run(main())


def test_emulator_imports_no_training_stack() -> None:
    """``emulator`` must install light and start fast: no verl, Ray, torch or pytest behind any import."""
    code = (
        "import sys, emulator.app, emulator.server, emulator.executor, emulator.faults;"
        "bad = sorted(m for m in ('verl', 'ray', 'torch', 'pytest', 'harness') if m in sys.modules);"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_concurrent_first_requests_start_one_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    import emulator.app as app_module

    started: list[object] = []
    original_start = app_module.Executor.start

    async def counting_start(self: object) -> None:
        started.append(self)
        await original_start(self)  # type: ignore[arg-type]

    monkeypatch.setattr(app_module.Executor, "start", counting_start)

    async def main() -> None:
        emulator = Emulator()
        transport = httpx.ASGITransport(app=emulator.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            payload = {"code": "print(1)", "language": "python"}
            answers = await asyncio.gather(*(client.post("/run_code", json=payload) for _ in range(16)))
        assert all(a.json()["status"] == "Success" for a in answers)
        await emulator.aclose()

    asyncio.run(main())
    assert len(started) == 1


def test_unexpected_exception_gets_the_real_servers_500(monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.sandbox_fusion.routes import SandboxFusionService

    async def broken(self: object, body: bytes, content_type: str | None) -> object:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(SandboxFusionService, "run_code", broken)

    async def main() -> httpx.Response:
        emulator = Emulator()
        transport = httpx.ASGITransport(app=emulator.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
            answer = await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        await emulator.aclose()
        return answer

    answer = asyncio.run(main())
    assert answer.status_code == 500
    body = answer.json()
    assert body["detail"] == "disk on fire"
    assert any("RuntimeError: disk on fire" in line for line in body["traceback"])


def test_journal_and_decision_log_are_bounded() -> None:
    from emulator.faults import DecisionLog
    from emulator.journal import Journal

    journal = Journal(max_entries=3)
    for i in range(5):
        journal.end(journal.begin("r", "POST", "/x", key=str(i)), 200, "ok")
    assert [e.seq for e in journal.entries()] == [3, 4, 5]
    assert journal.dropped == 2 and journal.stats()["dropped"] == 2
    log = DecisionLog(max_records=2)
    for i in range(4):
        log.append({"ordinal": i})
    assert [r["ordinal"] for r in log.records] == [2, 3] and log.dropped == 2


@pytest.mark.parametrize("failure", ["descriptors", "lost"])
def test_an_executor_that_cannot_start_is_a_sandbox_error_then_recovers(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """Descriptors or processes out when the executor starts (or its zygote dying before it is ready): the run
    answers Sandbox Fusion's ``SandboxError`` (HTTP 200, as the real server answers a runner that cannot spawn), not
    a 500, and the next run starts it."""
    from emulator.executor import zygote

    real_start = zygote.Zygote.start

    async def out_of_descriptors(self: zygote.Zygote) -> None:
        if failure == "lost":
            raise zygote.ZygoteLost("zygote exited before it was ready")
        raise OSError(24, "Too many open files")

    emulator = Emulator()

    async def main() -> tuple[int, dict[str, object], dict[str, object]]:
        transport = httpx.ASGITransport(app=emulator.app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
                request = {"code": "print(40 + 2)", "language": "python"}
                monkeypatch.setattr(zygote.Zygote, "start", out_of_descriptors)
                failed = await client.post("/run_code", json=request)
                monkeypatch.setattr(zygote.Zygote, "start", real_start)
                recovered = await client.post("/run_code", json=request)
                return failed.status_code, failed.json(), recovered.json()
        finally:
            await emulator.aclose()

    status, failed, recovered = asyncio.run(main())
    assert status == 200
    assert failed["status"] == "SandboxError"
    assert ("Too many open files" if failure == "descriptors" else "before it was ready") in str(failed["message"])
    assert recovered["status"] == "Success" and recovered["run_result"]["stdout"] == "42\n"  # type: ignore[index]
