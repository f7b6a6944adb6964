"""The unit plan's registration and cluster-wide limiter items, run against verl 0.7.1's OWN code.

* ``test_tools_registration``: the project's example YAML (``fixtures/tools/sandbox_fusion_tool_config.yaml``), only
  ``class_name`` changed to 0.7.1's tool, loads through 0.7.1's ``initialize_tools_from_config``.
* ``test_basic_multi_process_init``: two driver processes attached to the session's Ray cluster get one named
  "rate-limiter" ``TokenBucketWorker`` (verl 0.6.1's ``RayMultiProcessTestCase`` simulated ranks the same way);
  a driver asking for a different ``rate_limit`` silently gets the first one (a strict xfail naming the defect).
* ``TestMultiNodeRateLimiterCase``: 0.7.1's ``SandboxFusionTool`` (its ``init_execution_pool`` + limiter) on each
  node of a real two-node ``ray.cluster_utils.Cluster`` (in its own driver process, since this one is attached to
  the session cluster); the emulator's journal gives the in-flight maximum across both nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.journal import Journal

RUN_CODE = "sandbox_fusion.run_code"
LIMITER_ACTOR = "rate-limiter"  # verl 0.7.1's TokenBucketWorker, a named actor
TOOL_CLASS = "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
EXAMPLE_TOOL_YAML = Path(__file__).resolve().parents[2] / "fixtures/tools/sandbox_fusion_tool_config.yaml"


def defect(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"verl 0.7.1 defect: {reason}")


def _result(process: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert process.returncode == 0 and lines, err[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def test_tools_registration(fresh_limiter: dict[str, str], tmp_path: Path, sandbox_fusion_url: str) -> None:
    """The project's example YAML, every key kept, ``class_name`` set to 0.7.1's tool: one tool, right config."""
    import ray
    from verl.tools.sandbox_fusion_tools import SandboxFusionTool
    from verl.tools.utils.tool_registry import initialize_tools_from_config

    document = yaml.safe_load(EXAMPLE_TOOL_YAML.read_text())
    [entry] = document["tools"]
    entry["class_name"] = TOOL_CLASS
    entry["config"]["sandbox_fusion_url"] = sandbox_fusion_url
    path = tmp_path / "sandbox_fusion_tool_config.yaml"
    path.write_text(yaml.safe_dump(document))

    [tool] = initialize_tools_from_config(str(path))
    try:
        assert isinstance(tool, SandboxFusionTool)
        assert tool.name == "code_interpreter"
        schema = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
        assert schema == entry["tool_schema"]
        assert tool.sandbox_fusion_url == sandbox_fusion_url
        assert (tool.num_workers, tool.rate_limit, tool.enable_global_rate_limit) == (10, 10, True)
        assert (tool.default_timeout, tool.default_language, tool.memory_limit_mb) == (30, "python", 1024)
        assert tool.config["retry"] == entry["config"]["retry"]  # ours: passed through, ignored by 0.7.1
        assert ray.get(tool.execution_pool.ping.remote()) is True
        limiter = ray.get_actor(LIMITER_ACTOR)  # created by the pool's constructor
        assert ray.get(limiter.get_current_count.remote()) == 0
    finally:
        ray.kill(tool.execution_pool)


#: One "rank": attaches to the session cluster, gets verl 0.7.1's named limiter with its own ``rate_limit``, takes
#: ``take`` permits if it can within ``wait`` seconds (permits taken are held), reports, and waits for stdin to close.
DRIVER = textwrap.dedent(
    """
    import json, sys
    import ray
    from verl.tools.sandbox_fusion_tools import TokenBucketWorker

    address, namespace, limit, take = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    wait = float(sys.argv[5])
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    try:
        actor = TokenBucketWorker.options(name="rate-limiter", get_if_exists=True).remote(limit)
        granted, _ = ray.wait([actor.acquire.remote() for _ in range(take)], num_returns=take, timeout=wait)
        result = {"actor": actor._actor_id.hex(), "granted": len(granted)}
    except Exception as exc:  # the correct answer to a disagreeing rate_limit
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdin.read()  # stay attached (the first driver owns the actor) until the test is done
    """
)


def _driver(session: dict[str, str], limit: int, take: int, wait: float = 60.0) -> subprocess.Popen[str]:
    """``wait``: how long the driver waits for its permits. Permits that are free come at once, so a generous wait
    costs nothing and keeps a loaded machine from failing the test; a short one is for permits that never come."""
    args = [sys.executable, "-c", DRIVER, session["address"], session["namespace"], str(limit), str(take), str(wait)]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(process: subprocess.Popen[str]) -> dict[str, Any]:
    """The driver's RESULT line, read while it is still attached."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    _out, err = process.communicate(timeout=30)
    raise AssertionError(f"driver exited {process.returncode} without a result: {err[-3000:]}")


def _finish(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        process.communicate(input="", timeout=60)


def test_basic_multi_process_init(fresh_limiter: dict[str, str]) -> None:
    """Two "ranks" asking for ``rate_limit`` 4: one actor, shared state (each holds 2 permits; the count is 4)."""
    import ray

    first, second = _driver(fresh_limiter, 4, 2), _driver(fresh_limiter, 4, 2)
    try:
        a, b = _report(first), _report(second)
        here = ray.get_actor(LIMITER_ACTOR)
        assert a == b == {"actor": here._actor_id.hex(), "granted": 2}  # one actor, whichever process created it
        assert ray.get(here.get_current_count.remote()) == 4  # both drivers' permits, held in the one actor
    finally:
        _finish(first, second)


@defect("a driver asking for a different rate_limit silently gets the existing 'rate-limiter' actor (first wins)")
def test_disagreeing_rate_limit_is_an_error(fresh_limiter: dict[str, str]) -> None:
    import ray
    from verl.tools.sandbox_fusion_tools import TokenBucketWorker

    mine = TokenBucketWorker.options(name=LIMITER_ACTOR, get_if_exists=True).remote(2)  # this driver: limit 2
    ray.get(mine.get_current_count.remote())
    other = _driver(fresh_limiter, 3, 3, wait=1.0)
    try:
        result = _report(other)
    finally:
        _finish(other)
    # 0.7.1: {"actor": <mine>, "granted": 2}: the limit-3 driver got the limit-2 actor, no error or warning.
    assert "error" in result and "rate_limit" in result["error"], f"driver asking for 3 got {result}, mine is {mine}"


MULTI_NODE_DRIVER = textwrap.dedent(
    """
    import asyncio, json, sys
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    url, limit, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Each node is tagged ("node0", "node1"); a placement group per node, capturing child actors, keeps each
    # rollout worker's execution pool (0.7.1 gives no scheduling options for it) and the limiter on that node.
    head = {"num_cpus": 2, "resources": {"node0": 1}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=2, resources={"node1": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="verl071-multi-node", log_to_driver=False)

    SCHEMA = {"type": "function", "function": {"name": "code_interpreter", "description": "A tool for executing code.",
              "parameters": {"type": "object", "required": ["code"],
                             "properties": {"code": {"type": "string", "description": "The code to execute."}}}}}

    @ray.remote(num_cpus=0, max_concurrency=64)
    class RolloutWorker:
        # Stands in for an agent-loop worker on one node: builds 0.7.1's tool there (its own execution pool,
        # the cluster-wide "rate-limiter") and runs trajectories through create / execute / release.
        def __init__(self):
            from verl.tools.sandbox_fusion_tools import SandboxFusionTool
            from verl.tools.schemas import OpenAIFunctionToolSchema

            config = {"type": "native", "sandbox_fusion_url": url, "num_workers": calls, "rate_limit": limit}
            self.tool = SandboxFusionTool(config, OpenAIFunctionToolSchema.model_validate(SCHEMA))

        async def nodes(self):
            here = ray.get_runtime_context().get_node_id()
            pool = await self.tool.execution_pool.execute.remote(lambda: ray.get_runtime_context().get_node_id())
            return [here, pool]

        async def run(self, code):
            instance_id, _ = await self.tool.create()
            try:
                response, _, _ = await self.tool.execute(instance_id, {"code": code})
            finally:
                await self.tool.release(instance_id)
            return response.text

    alive = [n for n in ray.nodes() if n["Alive"]]
    nodes = [next(n["NodeID"] for n in alive if tag in n["Resources"]) for tag in ("node0", "node1")]
    groups = [placement_group([{"CPU": 2, tag: 1}], strategy="STRICT_PACK") for tag in ("node0", "node1")]
    ray.get([group.ready() for group in groups])
    workers = [
        RolloutWorker.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
        ).remote()
        for group in groups
    ]
    placed = ray.get([w.nodes.remote() for w in workers])
    code = "import time\\ntime.sleep(0.15)\\nprint({})"
    results = ray.get([workers[i % 2].run.remote(code.format(i)) for i in range(calls)])
    limiter = ray.get_actor("rate-limiter")
    count = ray.get(limiter.get_current_count.remote())
    for _ in range(100):  # release.remote() is fire-and-forget
        if count == 0:
            break
        import time
        time.sleep(0.05)
        count = ray.get(limiter.get_current_count.remote())
    print("RESULT " + json.dumps({"nodes": nodes, "placed": placed, "results": results, "count": count}))
    ray.shutdown()
    cluster.shutdown()
    """
)


class TestMultiNodeRateLimiterCase:
    """A real two-node Ray cluster on this machine; one 0.7.1 tool (and execution pool) per node, one limit."""

    def test_rate_limiter(self, sandbox_fusion_url: str, emulator_journal: Journal) -> None:
        limit, calls = 3, 24
        args = [sys.executable, "-c", MULTI_NODE_DRIVER, sandbox_fusion_url, str(limit), str(calls)]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        result = _result(process, timeout=150)
        nodes, placed = result["nodes"], result["placed"]
        assert len(nodes) == 2
        # One rollout worker per node, and each tool's execution pool on its worker's node.
        assert [here for here, _pool in placed] == nodes and [pool for _here, pool in placed] == nodes, placed
        assert result["results"] == [f"{i}\n" for i in range(calls)]
        entries = emulator_journal.entries(RUN_CODE)
        assert len(entries) == calls and {e.status for e in entries} == {200}
        # (The placement probes ran a lambda in each pool and never reached the sandbox.)
        assert emulator_journal.max_in_flight(RUN_CODE) == limit  # the limit held across nodes, and was reached
        assert result["count"] == 0  # every permit came back
