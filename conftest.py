"""Root conftest: anchors pytest's rootdir here so the project's tests are never shadowed by the ``tests``
package that verl's wheel installs into site-packages (tests run with ``--import-mode=importlib``), and holds the
fixtures several test directories share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def ray_session() -> Iterator[dict[str, str]]:
    """One private local Ray cluster per test session, shared by every test that needs Ray.

    ``address="local"`` always starts a private cluster: a plain ``ray.init()`` would attach to any other Ray running
    on the machine and then fail on ``num_cpus``. Never shut down here (Ray's atexit hook stops it), so every test
    module of the session reuses it."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            namespace="sandbox-emulator-tests",
            log_to_driver=False,
        )
    context = ray.get_runtime_context()
    yield {"address": context.gcs_address, "namespace": context.namespace}


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    """The project's tiny local Qwen-style tokenizer (``harness.rollout.tiny_tokenizer``), built once per session."""
    pytest.importorskip("verl", reason="needs the [verl] extra")
    from harness.rollout import tiny_tokenizer

    return tiny_tokenizer()
