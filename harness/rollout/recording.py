"""Record what a tool returned for each call of each trajectory, without changing what the model sees.

verl's ``ToolAgentLoop`` keeps only the (possibly truncated) observation text; the tool's own answer and its metrics
(infrastructure fault, attempts) are dropped. :class:`RecordingTool` wraps a tool, passes every call through, and
files a :class:`ToolCallRecord` under the trajectory's request id (verl hands ``agent_data`` to ``execute``), so a
dump can carry the ground truth a validator compares the observations against.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse


@dataclass
class ToolCallRecord:
    """One tool call: its arguments, the text the tool returned (before verl truncates it), and how it went."""

    name: str
    arguments: dict[str, Any]
    observation: str | None
    infra_fault: str | None
    attempts: int
    error: str | None = None  # the tool raised (verl then shows "Error executing tool ..." to the model)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CallLog:
    """Records per request id, in call order."""

    def __init__(self) -> None:
        self.calls: defaultdict[str, list[ToolCallRecord]] = defaultdict(list)

    def for_request(self, request_id: str) -> list[ToolCallRecord]:
        return list(self.calls.get(request_id, []))


class RecordingTool(BaseTool):
    """Delegates to ``inner``; records each ``execute`` in ``log``."""

    def __init__(self, inner: BaseTool, log: CallLog) -> None:
        # Not BaseTool.__init__: it prints the schema again; these are the attributes verl reads.
        self.config = inner.config
        self.tool_schema = inner.tool_schema
        self.name = inner.name
        self.inner = inner
        self.log = log

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        created: tuple[str, ToolResponse] = await self.inner.create(instance_id, **kwargs)
        return created

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        agent_data = kwargs.get("agent_data")
        request_id = str(getattr(agent_data, "request_id", instance_id))
        # Filed when the call starts, filled in when it ends: parallel calls of one turn finish in any order, but the
        # model sees their observations in call order.
        record = ToolCallRecord(self.name, dict(parameters), None, None, 0)
        self.log.calls[request_id].append(record)
        try:
            response, reward, metrics = await self.inner.execute(instance_id, parameters, **kwargs)
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            raise
        metrics = dict(metrics or {})
        record.observation = response.text
        record.infra_fault = metrics.get("infra_fault")
        record.attempts = int(metrics.get("attempts", 1) or 0)  # a tool that does not count made one
        return response, reward, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> Any:
        return await self.inner.calc_reward(instance_id, **kwargs)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        await self.inner.release(instance_id, **kwargs)

    async def aclose(self) -> None:
        closer = getattr(self.inner, "aclose", None)
        if closer is not None:
            await closer()
