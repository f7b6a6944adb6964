"""The ``sandbox-fusion`` PyPI client (0.3.7), unmodified, against the emulator."""

from __future__ import annotations

import asyncio

import pytest

from emulator.journal import Journal
from emulator.server import EmulatorServer

sf = pytest.importorskip("sandbox_fusion", reason="needs the sandbox-fusion client (the [dev] extra)")


def test_run_code_success(sandbox_emulator: EmulatorServer) -> None:
    response = sf.run_code(sf.RunCodeRequest(code="print(6 * 7)", language="python"), endpoint=sandbox_emulator.url)
    assert response.status == sf.RunStatus.Success
    assert response.run_result.stdout == "42\n"
    assert response.run_result.return_code == 0


def test_run_code_failure_is_returned_not_raised(sandbox_emulator: EmulatorServer) -> None:
    request = sf.RunCodeRequest(code="import sys; sys.exit(3)", language="python")
    response = sf.run_code(request, endpoint=sandbox_emulator.url)
    assert response.status == sf.RunStatus.Failed
    assert response.run_result.return_code == 3


def test_run_code_async(sandbox_emulator: EmulatorServer) -> None:
    request = sf.RunCodeRequest(code="print('async')", language="python")
    response = asyncio.run(sf.run_code_async(request, endpoint=sandbox_emulator.url))
    assert response.run_result.stdout == "async\n"


def test_run_jupyter_keeps_state_between_cells(sandbox_emulator: EmulatorServer) -> None:
    request = sf.RunJupyterRequest(cells=["x = 20", "x += 1", "print(x * 2)", "x"])
    response = sf.run_jupyter(request, endpoint=sandbox_emulator.url)
    assert response.status == sf.RunStatus.Success
    assert response.cells[2].stdout == "42\n"
    assert response.cells[3].display == [{"text/plain": "21"}]


@pytest.mark.faults({"rules": [{"id": "gw", "route": "sandbox_fusion.run_code", "attempts": "1", "fault": "reset"}]})
def test_client_retries_a_reset_connection(sandbox_emulator: EmulatorServer, emulator_journal: Journal) -> None:
    response = sf.run_code(sf.RunCodeRequest(code="print('again')", language="python"), endpoint=sandbox_emulator.url)
    assert response.run_result.stdout == "again\n"
    assert [e.outcome for e in emulator_journal.entries("sandbox_fusion.run_code")] == ["reset", "ok"]
