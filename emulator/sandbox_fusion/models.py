"""Request and response models of Sandbox Fusion, with the real server's field names, types and defaults.

They mirror the open-source server (pydantic 2.6, FastAPI 0.103): missing ``code`` or ``language`` and an unknown
language are 422s; extra fields are ignored; numbers are coerced.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

Language = Literal[
    "python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql",
    "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit",
    "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket",
]  # fmt: skip
LANGUAGES: tuple[str, ...] = get_args(Language)


class CommandRunStatus(str, Enum):
    """Outcome of one command (compile or run)."""

    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunStatus(str, Enum):
    """Top-level outcome of a request; HTTP status is 200 for all three."""

    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(BaseModel):
    compile_timeout: float = Field(10, description="compile timeout for compiled languages, seconds")
    run_timeout: float = Field(10, description="wall-clock run timeout, seconds")
    memory_limit_MB: int = Field(-1, description="memory limit in MB (RLIMIT_AS, DATA and STACK); -1 = none")
    code: str = Field(..., description="the code to run")
    stdin: str | None = Field(None, description="text fed to stdin; null closes stdin at once")
    language: Language = Field(..., description="the language or execution mode")
    files: dict[str, str | None] = Field({}, description="path -> base64 content written into the work dir")
    fetch_files: list[str] = Field([], description="paths returned base64-encoded after the run")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


class RunJupyterRequest(BaseModel):
    cells: list[str] = Field(..., description="code cells run in order in one kernel")
    cell_timeout: float = Field(0, description="accepted and not applied, as upstream's driver does")
    total_timeout: float = Field(45, description="the driver runs for at most this plus 10 seconds")
    memory_limit_MB: int = Field(-1, description="accepted and not applied, as upstream's runner does")
    kernel: Literal["python3"] = "python3"
    files: dict[str, str] = Field({}, description="path -> base64 content")
    fetch_files: list[str] = Field([], description="paths returned base64-encoded after the run")


class CellRunResult(BaseModel):
    stdout: str
    stderr: str
    display: list[dict[str, Any]]
    error: list[dict[str, Any]]


class RunJupyterResponse(BaseModel):
    status: RunStatus
    message: str
    driver: CommandRunResult | None = None
    cells: list[CellRunResult] = []
    executor_pod_name: str | None = None
    files: dict[str, str] = {}
