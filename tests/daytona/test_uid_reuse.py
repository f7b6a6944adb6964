"""A uid that ran in one sandbox's home and went back to the pool gives the next sandbox to get it nothing there.

A run's uid goes back to the executor's pool when the run ends (an interpreter context's, when the context ends), and
a run of any other sandbox may get it next. The files the first run left were that uid's, and a program reaches
every directory (it keeps ``CAP_DAC_READ_SEARCH``, so a home's random name in a directory it cannot list hid
nothing): the second sandbox's program could rewrite the first's files. Now the home is handed back when its holder
lets go: to the holder still in it, or to root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona import DEFAULT_API_KEY
from emulator.daytona.config import DaytonaConfig as EmulatedDaytona
from emulator.executor import ExecutorConfig
from emulator.server import EmulatorServer

from .conftest import all_dead, dead, interpreter_frames

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs under uids of their own only as root")


@pytest.fixture(scope="module")
def two_uids() -> Iterator[EmulatorServer]:
    """An emulator whose executor has two uids and whose interpreter has one: reuse comes at once."""
    config = EmulatorConfig(
        executor=ExecutorConfig(sandbox_uid_count=2), daytona=EmulatedDaytona(interpreter_uid_count=1)
    )
    with EmulatorServer(Emulator(config)) as server:
        yield server


@pytest.fixture
def client(two_uids: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=two_uids.url, headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"}, timeout=30
    ) as client:
        yield client
    two_uids.emulator.reset()


def _sandbox(client: httpx.Client) -> str:
    created = client.post("/api/sandbox", json={})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _execute(client: httpx.Client, sid: str, command: str) -> dict[str, object]:
    answer = client.post(f"/toolbox/{sid}/process/execute", json={"command": command})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


ATTACK = (
    "(echo pwned > {home}/secret.txt) 2>/dev/null && echo wrote-file; "
    "touch {home}/data/new 2>/dev/null && echo wrote-dir; "
    "rm {home}/data/kept 2>/dev/null && echo removed; "
    "id -u"
)


def test_a_toolbox_run_cannot_write_where_its_uid_ran_for_another_sandbox(
    two_uids: EmulatorServer, client: httpx.Client
) -> None:
    victim = _sandbox(client)
    home = two_uids.emulator.daytona.store.get(victim).home
    mine = _execute(client, victim, "echo mine > secret.txt; mkdir data; touch data/kept; id -u")
    victim_uid = str(mine["result"]).strip()
    intruder = _sandbox(client)
    # The pool hands its two uids out in turn: the intruder's second run has the victim's.
    seen = [str(_execute(client, intruder, ATTACK.format(home=home))["result"]).split() for _ in range(2)]
    assert victim_uid in [run[-1] for run in seen], seen  # the reuse happened
    assert all(run == [run[-1]] for run in seen), seen  # and nothing was written or removed
    assert _execute(client, victim, "cat secret.txt; ls data")["result"] == "mine\nkept\n"
    # The victim's own next run writes its home as before.
    assert _execute(client, victim, "echo again >> secret.txt && touch data/more && ls data")["result"] == (
        "kept\nmore\n"
    )


def test_an_interpreter_context_cannot_write_where_its_uid_ran_for_another_sandbox(
    two_uids: EmulatorServer, client: httpx.Client
) -> None:
    victim = _sandbox(client)
    home = two_uids.emulator.daytona.store.get(victim).home
    context = client.post(f"/toolbox/{victim}/process/interpreter/context", json={})
    assert context.status_code == 200, context.text
    context_id = context.json()["id"]
    code = "import os\nos.mkdir('data')\nopen('data/notes.txt', 'w').write('mine')\nprint(os.getuid())"
    frames, close = interpreter_frames(two_uids, DEFAULT_API_KEY, victim, {"code": code, "contextId": context_id})
    assert close == 1000, frames
    victim_uid = frames[0]["text"].strip()
    # The context ends: its uid (the interpreter's only one) goes back to the pool, and the intruder's gets it.
    assert client.delete(f"/toolbox/{victim}/process/interpreter/context/{context_id}").status_code == 200
    intruder = _sandbox(client)
    attack = (
        "import os\n"
        "print(os.getuid())\n"
        f"for path in ('{home}/data/notes.txt', '{home}/data/new'):\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    frames, close = interpreter_frames(two_uids, DEFAULT_API_KEY, intruder, {"code": attack})
    assert close == 1000
    assert "".join(f["text"] for f in frames if f["type"] == "stdout") == (
        f"{victim_uid}\nPermissionError\nPermissionError\n"
    )
    assert _execute(client, victim, "cat data/notes.txt; ls data")["result"] == "mine" + "notes.txt\n"


def test_the_file_api_shows_the_sandbox_users_ids_between_runs(two_uids: EmulatorServer, client: httpx.Client) -> None:
    sid = _sandbox(client)
    _execute(client, sid, "mkdir d && touch d/f")
    home = two_uids.emulator.daytona.store.get(sid).home
    assert os.stat(os.path.join(home, "d", "f")).st_uid == 0  # handed back to root after the run
    listed = client.get(f"/toolbox/{sid}/files", params={"path": "d"})
    assert listed.status_code == 200, listed.text
    assert [(f["name"], f["owner"], f["group"]) for f in listed.json()] == [("f", "1000", "1000")]


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as status:
                    for line in status:
                        if line.startswith("Uid:") and int(line.split()[1]) == uid:
                            found.append(int(entry))
            except OSError:
                continue
    return found


def test_an_interpreter_context_leaves_no_process_behind_not_even_one_that_keeps_forking(
    two_uids: EmulatorServer, client: httpx.Client
) -> None:
    sid = _sandbox(client)
    context = client.post(f"/toolbox/{sid}/process/interpreter/context", json={}).json()["id"]
    code = (
        "import os, subprocess\n"
        "subprocess.Popen(['setsid', 'bash', '-c', 'while true; do sleep 0.01 & wait; done'])\n"
        "print(os.getuid())"
    )
    frames, close = interpreter_frames(two_uids, DEFAULT_API_KEY, sid, {"code": code, "contextId": context})
    assert close == 1000
    uid = int(frames[0]["text"])
    assert _processes_of(uid)  # the loop runs on after the code
    assert client.delete(f"/toolbox/{sid}/process/interpreter/context/{context}").status_code == 200
    assert all_dead(_processes_of(uid))  # killed by then
    assert all(dead(pid) for pid in _processes_of(uid))  # nor anything forked meanwhile
