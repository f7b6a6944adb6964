"""What a Daytona sandbox's listed state says to code that cleans up after itself.

The API's delete is a soft delete: the answer, and a listing until the runner has torn the sandbox down, still show
the state it had (``started`` say) with ``desiredState`` ``destroyed``, and a second delete then is a 409 (the
sandbox is between states). Cleanup that lists sandboxes by label skips those rather than wait on that 409.
"""

from __future__ import annotations

from typing import Any


def on_its_way_out(sandbox: Any) -> bool:
    """True for a sandbox being destroyed or destroyed already: its ``state`` or its ``desired_state`` says so (an
    SDK ``Sandbox``; enum or string values)."""
    for attribute in ("state", "desired_state"):
        value = getattr(sandbox, attribute, None)
        if "destroy" in str(getattr(value, "value", value) or "").lower():
            return True
    return False


def errored(sandbox: Any) -> bool:
    """True for a sandbox in ``error`` or ``build_failed``: it will not start, so it is deleted, never adopted."""
    value = getattr(sandbox, "state", None)
    return str(getattr(value, "value", value) or "").lower() in ("error", "build_failed")
