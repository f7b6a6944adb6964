"""The reference fixtures, also when the ``--reference-url`` plugin is not loaded (they then use the emulator)."""

from harness.reference.plugin import (  # noqa: F401
    reference_daytona,
    reference_emulator,
    reference_is_live,
    reference_sandbox_fusion_url,
)
