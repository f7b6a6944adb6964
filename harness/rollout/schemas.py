"""Tool schemas the rollout helpers put in front of the model (no verl import: usable under any verl)."""

from __future__ import annotations

from typing import Any

#: The code-interpreter schema of verl 0.7.1's example YAML.
CODE_INTERPRETER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "A tool for executing code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to execute."}},
            "required": ["code"],
        },
    },
}
