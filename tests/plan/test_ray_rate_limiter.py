"""Plan items for the cluster-wide limiter (``harness.ratelimit``'s Ray backend), checked at the sandbox.

* ``test_basic_multi_process_init``: two driver processes attached to one Ray cluster get the same named limiter
  actor; a third with a different ``limit`` gets a clear error instead of verl 0.7.1's silent first-config-wins.
* ``TestSingleNodeRateLimiterCase``: two rollout-worker actors (async, like verl's ``AgentLoopWorker``) send 24
  real executions to the emulator through one limiter of 3; the emulator's journal gives the true in-flight maximum.
* ``test_rotten_execution``: executions that raise while holding a permit give it back; the counts return to zero.
* ``..._through_the_tools[sandbox_fusion|daytona]``: the same two items with the project's verl tools doing the calls
  (one tool object per rollout worker, ``rate_limiter: {backend: ray}``), so the limiter is checked where users use
  it: around every Sandbox Fusion request, and around every Daytona SDK call (create, run, delete).

verl 0.6.1's versions timed ``time.sleep`` tasks; these read the emulator's journal instead.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from emulator.journal import Journal  # noqa: E402
from harness.ratelimit import LimiterConfig, LimiterStats, open_limiter  # noqa: E402
from harness.ratelimit.ray_backend import RayLimiter, actor_name, kill  # noqa: E402
from harness.tools.observations import INFRA_FAULT_OBSERVATION  # noqa: E402

RUN_CODE = "sandbox_fusion.run_code"
TOOL_CLASSES = {
    "sandbox_fusion": "harness.tools.sandbox_fusion.SandboxFusionTool",
    "daytona": "harness.tools.daytona.DaytonaTool",
}
#: Where the limiter shows at the sandbox: Sandbox Fusion's one route; every Daytona route (each SDK call is limited).
LIMITED_ROUTE = {"sandbox_fusion": RUN_CODE, "daytona": None}
#: The route whose requests 5-8 fail in the rotten case (a reset mid-request; a 503 on sandbox creation).
ROTTEN_FAULT = {
    "sandbox_fusion": {"route": RUN_CODE, "fault": "reset"},
    "daytona": {"route": "daytona.sandbox.create", "fault": {"status": 503}},
}
INFRA_PREFIX = INFRA_FAULT_OBSERVATION.split("(", 1)[0]


@pytest.fixture
def limiter_name(ray_session: dict[str, str]) -> Iterator[str]:
    name = f"plan-{uuid.uuid4().hex[:8]}"
    yield name
    kill(name, namespace=ray_session["namespace"])


@ray.remote(num_cpus=0, max_concurrency=64)
class RolloutWorker:
    """Stands in for an ``AgentLoopWorker``: many concurrent sandbox calls, each under the cluster-wide limiter."""

    def __init__(self, url: str, name: str, limit: int) -> None:
        self.url = url
        self.limiter = open_limiter({"name": name, "limit": limit}, "ray")

    async def run(self, code: str, rotten: bool = False) -> str:
        import aiohttp

        async with self.limiter.slot():
            if rotten:
                raise RuntimeError("rotten execution")
            payload = {"code": code, "language": "python", "run_timeout": 10}
            async with aiohttp.ClientSession() as session, session.post(self.url, json=payload) as response:
                body = await response.json()
        return str(body["run_result"]["stdout"])

    async def close(self) -> None:
        await self.limiter.aclose()


@ray.remote(num_cpus=0, max_concurrency=64)
class ToolRolloutWorker:
    """An ``AgentLoopWorker`` stand-in holding one of the project's tools, used as verl's loop uses it."""

    def __init__(self, class_path: str, config: dict[str, Any]) -> None:
        import importlib

        module, _, name = class_path.rpartition(".")
        self.tool = getattr(importlib.import_module(module), name)(config)

    async def run(self, code: str) -> str | None:
        instance_id, _ = await self.tool.create()
        try:
            response, _, _ = await self.tool.execute(instance_id, {"code": code})
        finally:
            await self.tool.release(instance_id)
        text: str | None = response.text
        return text

    async def close(self) -> None:
        await self.tool.aclose()


def _tool_config(kind: str, server: Any, name: str, limit: int, max_attempts: int) -> dict[str, Any]:
    retry = {"max_attempts": max_attempts, "base_delay": 0.005, "max_delay": 0.02, "max_retry_after": 1}
    config: dict[str, Any] = {
        "type": "native",
        "rate_limit": limit,
        "retry": retry,
        "rate_limiter": {"backend": "ray", "name": name, "limit": limit},
    }
    if kind == "sandbox_fusion":
        config["sandbox_fusion_url"] = server.run_code_url
    else:
        config.update(api_url=server.url + "/api", api_key=server.emulator.config.daytona.api_key)
    return config


def _run_tool_workers(kind: str, config: dict[str, Any], codes: list[str]) -> list[str | None]:
    workers = [ToolRolloutWorker.remote(TOOL_CLASSES[kind], config) for _ in range(2)]  # type: ignore[attr-defined]
    try:
        return list(ray.get([workers[i % 2].run.remote(code) for i, code in enumerate(codes)]))
    finally:
        ray.get([w.close.remote() for w in workers])
        for worker in workers:
            ray.kill(worker)


def _stats(name: str, namespace: str) -> LimiterStats:
    async def main() -> LimiterStats:
        limiter = RayLimiter(LimiterConfig(name=name, limit=1), namespace=namespace)
        # Read the actor's stats without a config check (this client's limit is not the test's).
        return LimiterStats.from_dict(await limiter.actor.stats.remote())

    return asyncio.run(main())


def _run_workers(url: str, name: str, limit: int, jobs: list[tuple[str, bool]]) -> list[Any]:
    workers = [RolloutWorker.remote(url, name, limit) for _ in range(2)]  # type: ignore[attr-defined]
    refs = [workers[i % 2].run.remote(code, rotten) for i, (code, rotten) in enumerate(jobs)]
    results: list[Any] = []
    for ref in refs:
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayTaskError as exc:
            results.append(exc)
    ray.get([w.close.remote() for w in workers])
    for worker in workers:
        ray.kill(worker)
    return results


DRIVER = textwrap.dedent(
    """
    import asyncio, json, sys
    import ray
    from harness.ratelimit import LimiterConfigError, open_limiter
    from harness.ratelimit.ray_backend import actor_name

    address, namespace, name, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ray.init(address=address, namespace=namespace, log_to_driver=False)

    async def main():
        limiter = open_limiter({"name": name, "limit": limit}, "ray")
        try:
            ticket = await limiter.acquire()
        except LimiterConfigError as exc:
            return {"error": str(exc)}
        await limiter.release(ticket)
        await limiter.aclose()
        return {"actor": ray.get_actor(actor_name(name))._actor_id.hex()}

    print("RESULT " + json.dumps(asyncio.run(main())))
    """
)


def _driver(session: dict[str, str], name: str, limit: int) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", DRIVER, session["address"], session["namespace"], name, str(limit)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert process.returncode == 0 and lines, err[-2000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


@pytest.mark.slow
def test_basic_multi_process_init(ray_session: dict[str, str], limiter_name: str) -> None:
    first, second = _driver(ray_session, limiter_name, 6), _driver(ray_session, limiter_name, 6)
    a, b = _result(first), _result(second)
    here = ray.get_actor(actor_name(limiter_name), namespace=ray_session["namespace"])._actor_id.hex()
    assert a == b == {"actor": here}  # one actor, whichever process created it
    stats = _stats(limiter_name, ray_session["namespace"])
    assert (stats.acquires, stats.releases, stats.held) == (2, 2, 0)
    disagreeing = _result(_driver(ray_session, limiter_name, 7))
    assert "different config" in disagreeing["error"] and "limit" in disagreeing["error"]


@pytest.mark.slow
class TestSingleNodeRateLimiterCase:
    def test_rate_limiter(
        self, ray_session: dict[str, str], limiter_name: str, sandbox_fusion_url: str, emulator_journal: Journal
    ) -> None:
        limit, calls = 3, 24
        jobs = [(f"import time\ntime.sleep(0.15)\nprint({i})", False) for i in range(calls)]
        results = _run_workers(sandbox_fusion_url, limiter_name, limit, jobs)
        assert results == [f"{i}\n" for i in range(calls)]
        entries = emulator_journal.entries(RUN_CODE)
        assert len(entries) == calls and {e.status for e in entries} == {200}
        assert emulator_journal.max_in_flight(RUN_CODE) == limit  # reached, never passed, across two workers
        stats = _stats(limiter_name, ray_session["namespace"])
        assert (stats.max_held, stats.held, stats.acquires, stats.releases) == (limit, 0, calls, calls)

    @pytest.mark.parametrize("kind", ["sandbox_fusion", "daytona"])
    def test_rate_limiter_through_the_tools(
        self, kind: str, ray_session: dict[str, str], limiter_name: str, sandbox_emulator: Any
    ) -> None:
        limit, calls = 3, 24
        config = _tool_config(kind, sandbox_emulator, limiter_name, limit, max_attempts=4)
        results = _run_tool_workers(kind, config, [f"import time\ntime.sleep(0.15)\nprint({i})" for i in range(calls)])
        assert results == [f"{i}\n" for i in range(calls)]
        journal = sandbox_emulator.emulator.journal
        # No fault and nothing to retry (101: the interpreter's WebSocket upgrade).
        assert all(e.fault is None and e.status is not None and e.status < 400 for e in journal.entries())
        assert journal.max_in_flight(LIMITED_ROUTE[kind]) == limit  # across both workers' tool objects
        stats = _stats(limiter_name, ray_session["namespace"])
        assert (stats.max_held, stats.held) == (limit, 0)
        assert stats.acquires == stats.releases >= calls
        if kind == "daytona":
            assert [r.id for r in sandbox_emulator.emulator.daytona_report().leaked] == []


@pytest.mark.slow
def test_rotten_execution(
    ray_session: dict[str, str], limiter_name: str, sandbox_fusion_url: str, emulator_journal: Journal
) -> None:
    """verl 0.6.1's case: 20 executions under a limit of 6, one raises while holding its permit."""
    limit, calls, rotten = 6, 20, 10
    jobs = [(f"print({i})", i == rotten) for i in range(calls)]
    results = _run_workers(sandbox_fusion_url, limiter_name, limit, jobs)
    assert isinstance(results[rotten], ray.exceptions.RayTaskError)
    assert "rotten execution" in str(results[rotten])
    assert [r for i, r in enumerate(results) if i != rotten] == [f"{i}\n" for i in range(calls) if i != rotten]
    assert len(emulator_journal.entries(RUN_CODE)) == calls - 1
    assert emulator_journal.max_in_flight(RUN_CODE) <= limit
    stats = _stats(limiter_name, ray_session["namespace"])
    assert (stats.held, stats.waiting, stats.acquires, stats.releases) == (0, 0, calls, calls)


MULTI_NODE_DRIVER = textwrap.dedent(
    """
    import asyncio, json, sys
    import aiohttp
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from harness.ratelimit import open_limiter

    url, limit, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="plan-multi-node", log_to_driver=False)

    @ray.remote(num_cpus=0, max_concurrency=64)
    class RolloutWorker:
        def __init__(self):
            self.limiter = open_limiter({"name": "plan-multi-node", "limit": limit}, "ray")

        def node(self):
            return ray.get_runtime_context().get_node_id()

        async def run(self, code):
            async with self.limiter.slot():
                payload = {"code": code, "language": "python", "run_timeout": 10}
                async with aiohttp.ClientSession() as session, session.post(url, json=payload) as response:
                    return (await response.json())["run_result"]["stdout"]

        async def stats(self):
            return (await self.limiter.stats()).__dict__

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    workers = [
        RolloutWorker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node in nodes
    ]
    placed = ray.get([w.node.remote() for w in workers])
    code = "import time\\ntime.sleep(0.15)\\nprint({})"
    results = ray.get([workers[i % 2].run.remote(code.format(i)) for i in range(calls)])
    stats = ray.get(workers[0].stats.remote())
    print("RESULT " + json.dumps({"nodes": nodes, "placed": placed, "results": results, "stats": stats}))
    ray.shutdown()
    cluster.shutdown()
    """
)


@pytest.mark.slow
class TestMultiNodeRateLimiterCase:
    """A real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``, in its own driver process, since
    this one is attached to the session cluster): one rollout worker per node, one limit for both."""

    def test_rate_limiter(self, sandbox_fusion_url: str, emulator_journal: Journal) -> None:
        limit, calls = 3, 24
        args = [sys.executable, "-c", MULTI_NODE_DRIVER, sandbox_fusion_url, str(limit), str(calls)]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        result = _result(process)
        assert len(result["nodes"]) == 2 and sorted(result["placed"]) == result["nodes"]  # one worker per node
        assert result["results"] == [f"{i}\n" for i in range(calls)]
        assert len(emulator_journal.entries(RUN_CODE)) == calls
        assert emulator_journal.max_in_flight(RUN_CODE) == limit  # the limit held across nodes, and was reached
        stats = result["stats"]
        assert (stats["max_held"], stats["held"], stats["acquires"], stats["releases"]) == (limit, 0, calls, calls)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sandbox_fusion", "daytona"])
def test_rotten_execution_through_the_tools(
    kind: str, ray_session: dict[str, str], limiter_name: str, sandbox_emulator: Any
) -> None:
    """Requests 5-8 on the tool's critical route fail while holding a permit (no retries: a budget of one attempt):
    those four calls show the model the infrastructure observation, the other 16 their output, and every permit
    comes back."""
    limit, calls = 3, 20
    emulator = sandbox_emulator.emulator
    emulator.set_faults({"rules": [{"id": "rot", "requests": "5-8", **ROTTEN_FAULT[kind]}]})
    config = _tool_config(kind, sandbox_emulator, limiter_name, limit, max_attempts=1)
    results = _run_tool_workers(kind, config, [f"print({i})" for i in range(calls)])
    rotten = [i for i, text in enumerate(results) if text is not None and text.startswith(INFRA_PREFIX)]
    assert len(rotten) == 4, results
    assert [r for i, r in enumerate(results) if i not in rotten] == [f"{i}\n" for i in range(calls) if i not in rotten]
    expected_fault = "reset" if kind == "sandbox_fusion" else "status"
    assert [e.fault for e in emulator.journal.entries() if e.fault] == [expected_fault] * 4
    stats = _stats(limiter_name, ray_session["namespace"])
    assert (stats.held, stats.waiting) == (0, 0) and stats.acquires == stats.releases
    assert stats.max_held <= limit
    if kind == "daytona":
        assert [r.id for r in emulator.daytona_report().leaked] == []
