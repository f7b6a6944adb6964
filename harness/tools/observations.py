"""The texts the project's tools show the model instead of a program's output.

Apart from the tools (which need verl), so that what reads rollouts (the dump validator, the chaos search) can tell
these texts from program output without installing verl.
"""

from __future__ import annotations

#: What verl 0.7.1 showed for any run that did not finish (timeout, compile error, sandbox or API error).
NO_STDOUT = "no stdout here"
#: What the model sees when the sandbox service itself failed and the retry budget is spent.
INFRA_FAULT_OBSERVATION = (
    "Sandbox unavailable: the code sandbox service failed ({reason}); the program's output is unknown."
)
#: What the model sees when its call's arguments cannot be used (not a JSON object, say); no sandbox is called. Worded
#: as verl's own answer to arguments that are not JSON (``Invalid JSON in arguments for '<tool>': ...``).
INVALID_ARGUMENTS_OBSERVATION = "Invalid arguments for '{tool}': {problem}"
