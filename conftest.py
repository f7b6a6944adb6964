"""Root conftest: anchors pytest's rootdir here so the project's tests are never shadowed by the ``tests``
package that verl's wheel installs into site-packages (tests run with ``--import-mode=importlib``), holds the
fixtures several test directories share, and the hypothesis profiles (``default`` and ``explore``, below)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

pytest_plugins = ["pytester"]

#: Hypothesis' own defaults (random examples, the example database, a 200 ms deadline), kept as the parent of
#: ``explore`` before ``default`` is replaced.
_HYPOTHESIS_DEFAULT = settings.get_profile("default")

# The test command and CI run hypothesis derandomized: every run draws the same examples, so a latent bug is found
# by a deliberate search (``explore``), never as a random red run. No deadline: a stalled machine is not a bug.
# These are defaults only: a test's own settings (max_examples, stateful_step_count, ...) still apply.
settings.register_profile(
    "default", _HYPOTHESIS_DEFAULT, derandomize=True, deadline=None, database=None, print_blob=True
)
# ``--hypothesis-profile=explore`` (``make explore``): new random examples each run, hypothesis' usual example
# counts, failures kept in ``.hypothesis/`` and printed with a reproduction blob.
# The database is named: under a CI variable hypothesis' own defaults have none.
settings.register_profile(
    "explore",
    _HYPOTHESIS_DEFAULT,
    derandomize=False,
    deadline=None,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
)
# Hypothesis loads its own ``ci`` profile when it sees a CI variable: the project's default applies there too.
settings.load_profile("default")


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


class RedisServer:
    """A private ``redis-server`` (Debian's; ``make test`` installs it) on a loopback port, with no persistence.
    ``stop()`` then ``start()`` brings it back on the same port, empty: an outage as a client sees it."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port: int = sock.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def _redis_binary() -> str:
    pytest.importorskip("redis")
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    return binary


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of one private ``redis-server`` shared by the session's tests."""
    server = RedisServer(_redis_binary())
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A ``redis-server`` of the test's own, started; the test may stop and restart it."""
    server = RedisServer(_redis_binary())
    server.start()
    try:
        yield server
    finally:
        server.stop()
