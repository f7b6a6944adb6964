"""Configuration of the emulated Daytona: key, organization, quotas, throttlers (tier presets), latencies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from emulator.faults.latency import MAX_DELAY_S

#: The key ``serve`` prints and the pytest fixtures use when none is configured.
DEFAULT_API_KEY = "dtn_emulator_default_key"
DEFAULT_ORGANIZATION_ID = "emulator-org"

#: The three throttlers the SDK can hit (daytona.md §4): every authenticated route, ``POST /sandbox`` and the
#: lifecycle routes (delete/start/stop/...).
AUTHENTICATED = "authenticated"
SANDBOX_CREATE = "sandbox-create"
SANDBOX_LIFECYCLE = "sandbox-lifecycle"
#: Failed authentications per client IP (see :mod:`emulator.daytona.failed_auth`): not a tier's, off unless a
#: ``ThrottlerSpec(FAILED_AUTH, limit, ttl_s)`` is among the throttlers, as the API's is off unless configured.
FAILED_AUTH = "failed-auth"

#: The most bytes of a command's output the emulator keeps where the daemon keeps it all (a buffer or a file with no
#: bound): each stream of a ``/process/execute`` or ``/process/code-run``, and (by default) a session command's log.
#: Past it, output is read and dropped: the writer never blocks, and an endless one costs no more memory.
OUTPUT_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class ThrottlerSpec:
    """A NestJS throttler: at most ``limit`` requests per window of ``ttl_s`` seconds, the next one blocking it for
    ``ttl_s`` seconds (see :mod:`emulator.daytona.throttle`). Named :data:`FAILED_AUTH`, it counts failed
    authentications instead, the ``limit``-th blocking the client (see :mod:`emulator.daytona.failed_auth`)."""

    name: str
    limit: int
    ttl_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0:
            raise ValueError(f"ThrottlerSpec {self.name!r}: limit must be a whole number >= 0, got {self.limit!r}")
        ttl = self.ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise ValueError(f"ThrottlerSpec {self.name!r}: ttl_s must be a finite number of seconds > 0, got {ttl!r}")


@dataclass(frozen=True)
class Quotas:
    """Organization resource pool; None = unlimited. Exceeding one answers 400, as the real API does."""

    max_sandboxes: int | None = None
    total_cpu: int | None = None
    total_memory_gib: int | None = None
    total_disk_gib: int | None = None


@dataclass(frozen=True)
class TierPreset:
    """Documented per-minute limits and resource pool of one Daytona tier (daytona.md §4)."""

    general: int
    create: int
    lifecycle: int
    cpu: int
    memory_gib: int
    disk_gib: int


TIERS: dict[int, TierPreset] = {
    1: TierPreset(general=10_000, create=300, lifecycle=10_000, cpu=10, memory_gib=20, disk_gib=30),
    2: TierPreset(general=20_000, create=400, lifecycle=20_000, cpu=100, memory_gib=200, disk_gib=300),
    3: TierPreset(general=40_000, create=500, lifecycle=40_000, cpu=250, memory_gib=500, disk_gib=2000),
    4: TierPreset(general=50_000, create=600, lifecycle=50_000, cpu=500, memory_gib=1000, disk_gib=5000),
}


def tier_throttlers(tier: int) -> tuple[ThrottlerSpec, ...]:
    """The three throttlers of a tier, per minute."""
    preset = TIERS[tier]
    return (
        ThrottlerSpec(AUTHENTICATED, preset.general),
        ThrottlerSpec(SANDBOX_CREATE, preset.create),
        ThrottlerSpec(SANDBOX_LIFECYCLE, preset.lifecycle),
    )


def tier_quotas(tier: int) -> Quotas:
    """The resource pool of a tier (CPU, memory, disk totals over the organization's sandboxes)."""
    preset = TIERS[tier]
    return Quotas(total_cpu=preset.cpu, total_memory_gib=preset.memory_gib, total_disk_gib=preset.disk_gib)


@dataclass(frozen=True)
class DaytonaConfig:
    """How the emulated Daytona behaves; the defaults are the real API's, minus the resource quotas.

    ``throttlers`` default to Tier 1: the real API sends the throttler headers on every response.
    ``quotas`` default to unlimited (a Tier 1 pool of 10 vCPU would cap a CI run at 10 default sandboxes; use
    ``tier_quotas(n)`` to get the real pool).
    """

    api_key: str = DEFAULT_API_KEY
    organization_id: str = DEFAULT_ORGANIZATION_ID
    target: str = "us"
    #: Seconds a new sandbox stays ``creating``; 0 answers ``started`` at once (no SDK polling).
    create_latency: float = 0.0
    #: Seconds ``start`` takes (the answer is ``starting`` meanwhile); 0 answers ``started`` at once.
    start_latency: float = 0.0
    #: Seconds a deleted sandbox is still found and listed before its runner's teardown (the state it had,
    #: ``desiredState`` destroyed; a second delete meanwhile is a 409, as the API answers); 0 tears it down at once.
    destroy_latency: float = 0.0
    throttlers: tuple[ThrottlerSpec, ...] = field(default_factory=lambda: tier_throttlers(1))
    quotas: Quotas = field(default_factory=Quotas)
    #: Default resources of a sandbox created from a snapshot (the real defaults).
    default_cpu: int = 1
    default_memory_gib: int = 1
    default_disk_gib: int = 3
    #: Where sandbox file systems live (default: a fresh temp dir per emulator).
    root_dir: str | None = None
    #: Timeout for ``/process/execute`` and ``/process/code-run`` when the request sets none (seconds).
    default_command_timeout: float = 600.0
    #: Default ``run_code`` timeout of the interpreter (the daemon's 10 minutes).
    interpreter_timeout: float = 600.0
    #: Seconds a timed-out execution has to end after its SIGINT before its process is killed (the daemon's 2).
    interpreter_grace: float = 2.0
    #: Frames queued for an interpreter client before it is dropped as a ``slow consumer`` (the daemon's 1,024).
    interpreter_client_frames: int = 1024
    #: Seconds a dropped client's queued frames have to leave before its connection is closed (the daemon's 5).
    interpreter_slow_client_wait: float = 5.0
    #: Seconds a session's shell has after the SIGTERM of its deletion before it is killed (the daemon's
    #: ``DAYTONA_TERMINATION_GRACE_PERIOD``, 5 s; a shell that has run a command catches SIGTERM and waits it out).
    session_termination_grace: float = 5.0
    #: Bytes of a session command's log kept (the daemon's log is a file with no bound); past it, output is dropped.
    session_log_limit: int = OUTPUT_LIMIT
    #: First uid of the interpreter processes (one uid per live interpreter context; root only).
    interpreter_uid_base: int = 300_000
    interpreter_uid_count: int = 4096
    #: The daemon lists sessions, a session's commands and interpreter contexts from Go maps, in a different order
    #: on each call; the emulator shuffles those listings too, from a generator seeded with this (so a run replays).
    #: ``None`` lists them in the order they were made.
    listing_seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("create_latency", "start_latency", "destroy_latency"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= MAX_DELAY_S
            ):
                raise ValueError(
                    f"DaytonaConfig.{name} must be a number of seconds from 0 to {MAX_DELAY_S:g} (a day), got {value!r}"
                )
        seed = self.listing_seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"DaytonaConfig.listing_seed must be a whole number or None, got {seed!r}")
