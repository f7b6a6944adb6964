"""The control plane's state: sandboxes, their lifecycle, quotas and file systems.

A sandbox owns a directory ``<root>/<id>/`` with ``home/`` (the user's home and default working directory, where
code runs) and ``fs/`` (where absolute paths of the file API outside the home land). It is removed on delete.
Timers (auto-stop, auto-delete, creation and start latency) are evaluated lazily against the emulator clock each time
the store is touched, so a fake clock drives them deterministically.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from emulator.executor.trees import remove_tree
from emulator.faults.bodies import now_iso

from . import intervals
from .config import DaytonaConfig
from .errors import ApiError

CODE_LANGUAGE_LABEL = "code-toolbox-language"
DAEMON_VERSION = "0.226.1"

#: What the API adds to a refusal of the organization's CPU, memory or disk pool (its UPGRADE_TIER_MESSAGE with the
#: cloud's dashboard), and to the disk one first.
_UPGRADE_TIER = "To increase concurrency limits, upgrade your organization's Tier by visiting https://app.daytona.io/dashboard/limits."
_ARCHIVE_SANDBOXES = "Consider archiving your unused Sandboxes to free up available storage."

#: The API's answer (409) to a start or stop while the sandbox is between states.
_STATE_CHANGE_IN_PROGRESS = "Sandbox state change in progress"


def _assert_not_errored(sandbox: Sandbox) -> None:
    """The API's ``assertSandboxNotErrored``: 400 for a sandbox in ``error`` or ``build_failed``."""
    if sandbox.state in ("error", "build_failed"):
        raise ApiError(400, "Sandbox is in an errored state")


#: States in which a sandbox counts against CPU and memory quotas.
_RUNNING = frozenset({"creating", "starting", "started", "stopping", "restoring", "resizing"})


@dataclass
class Sandbox:
    id: str
    name: str
    organization_id: str
    user: str
    env: dict[str, str]
    labels: dict[str, str]
    target: str
    cpu: int
    gpu: int
    memory: int
    disk: int
    public: bool
    network_block_all: bool
    snapshot: str | None
    auto_stop_interval: int
    auto_archive_interval: int
    auto_delete_interval: int
    root: str
    created_at: str
    created_mono: float
    state: str = "started"
    desired_state: str = "started"
    error_reason: str | None = None
    updated_at: str = ""
    last_activity_mono: float = 0.0
    last_activity_at: str = ""
    stopped_mono: float | None = None
    ready_at: float | None = None  # monotonic time a pending create/start completes
    teardown_at: float | None = None  # monotonic time a deleted sandbox's runner has torn it down (destroy_latency)
    network_allow_list: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The home directory: an executor work dir (so each execution gets it handed to its uid), and its executor.
    home_dir: Any = None
    home_owner: Any = None
    #: 1 for the first sandbox created since the store was made or cleared, 2 for the next...: unlike the random id, the
    #: same in every run that creates its sandboxes in the same order (the fault gate keys WebSockets by it).
    ordinal: int = 0

    @property
    def home(self) -> str:
        if self.home_dir is not None:
            return str(self.home_dir.path)
        return os.path.join(self.root, "home")

    @property
    def fs_root(self) -> str:
        return os.path.join(self.root, "fs")

    def to_json(self, toolbox_url: str, *, list_item: bool = False) -> dict[str, Any]:
        """The Sandbox (or SandboxListItem) JSON with every field the SDK's models require, strictly typed."""
        data: dict[str, Any] = {
            "id": self.id,
            "organizationId": self.organization_id,
            "name": self.name,
            "user": self.user,
            "labels": dict(self.labels),
            "public": self.public,
            "networkBlockAll": self.network_block_all,
            "target": self.target,
            "cpu": self.cpu,
            "gpu": self.gpu,
            "memory": self.memory,
            "disk": self.disk,
            "state": self.state,
            "desiredState": self.desired_state,
            "errorReason": self.error_reason,
            "recoverable": False if self.state == "error" else None,
            "backupState": "None",
            "autoStopInterval": self.auto_stop_interval,
            "autoArchiveInterval": self.auto_archive_interval,
            "autoDeleteInterval": self.auto_delete_interval,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "lastActivityAt": self.last_activity_at,
            "sandboxClass": "container",
            "daemonVersion": DAEMON_VERSION,
            "runnerId": "emulator-runner",
            "toolboxProxyUrl": toolbox_url,
        }
        if self.snapshot is not None:
            data["snapshot"] = self.snapshot
        if self.network_allow_list is not None:
            data["networkAllowList"] = self.network_allow_list
        if not list_item:
            data["env"] = dict(self.env)
            data["kvm"] = False
            data["volumes"] = []
        return data


def _str_dict(value: Any, field_name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ApiError(400, f"{field_name} must be an object of strings")
    return dict(value)


def _refuse_nul(body: dict[str, Any], labels: dict[str, str], env: dict[str, str]) -> None:
    """The API's 500 for a creation that stores a NUL: Postgres refuses one in any text (the name, snapshot, region,
    user and the labels' and env's keys and values), and the API's exception filter answers the failed query. Never
    stored, no such sandbox reaches a process (whose environment could not hold it)."""
    texts = [body.get(key) for key in ("name", "snapshot", "target", "user", "networkAllowList")]
    texts += [*labels, *labels.values(), *env, *env.values()]
    if any(isinstance(text, str) and "\0" in text for text in texts):
        raise ApiError(500, intervals.UNEXPECTED_ERROR)


#: The least value each numeric field of a creation takes (-1 for autoDeleteInterval: never).
_LEAST = {"cpu": 1, "memory": 1, "disk": 1, "gpu": 0, "autoDeleteInterval": -1}
#: The auto-stop and auto-archive intervals' sign is the API's own check (:mod:`emulator.daytona.intervals`).
_LEAST["autoStopInterval"] = _LEAST["autoArchiveInterval"] = -(2**31)
#: Larger than any resource or interval the API accepts, and than a JSON number the SDK's models would carry.
_MOST = 2**31 - 1


def _opt_int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"{key} must be a number")
    if isinstance(value, float) and not value.is_integer():  # NaN, infinity, 1.5
        raise ApiError(400, f"{key} must be an integer")
    least = _LEAST.get(key, 0)
    if not least <= value <= _MOST:
        raise ApiError(400, f"{key} must be an integer from {least} to {_MOST}")
    return int(value)


class SandboxStore:
    """All sandboxes of one emulator; thread-safe (the server may run on another thread than tests)."""

    def __init__(self, config: DaytonaConfig, now: Callable[[], float]) -> None:
        self.config = config
        self._now = now
        self._lock = threading.RLock()
        self._sandboxes: dict[str, Sandbox] = {}
        self._owned_root = config.root_dir is None
        self._root: str | None = None
        self.alive_high_water = 0
        self._created = 0
        self._fail_next: list[tuple[str, str]] = []
        #: Called with each sandbox removed by the store (delete or auto-delete): stop interpreters, sessions.
        self.on_destroy: list[Callable[[Sandbox], None]] = []

    @property
    def root(self) -> str:
        """Parent of the sandboxes' directories, made on first use."""
        if self._root is None:
            root = self.config.root_dir or tempfile.mkdtemp(prefix="sandbox-emulator-daytona-")
            os.makedirs(root, exist_ok=True)
            os.chmod(root, 0o711)
            self._root = root
        return self._root

    # ------------------------------------------------------------------ helpers

    def fail_next_creates(self, count: int = 1, state: str = "error", reason: str = "emulated failure") -> None:
        """The next ``count`` creates end in ``state`` (``error`` or ``build_failed``) with ``reason``."""
        with self._lock:
            self._fail_next.extend([(state, reason)] * count)

    def _touch(self, sandbox: Sandbox) -> None:
        sandbox.updated_at = now_iso()

    def mark_activity(self, sandbox: Sandbox) -> None:
        sandbox.last_activity_mono = self._now()
        sandbox.last_activity_at = now_iso()

    def _advance(self, sandbox: Sandbox, now: float) -> None:
        """Apply pending transitions and timers to one sandbox (called under the lock)."""
        if sandbox.teardown_at is not None:
            if now >= sandbox.teardown_at:
                self._destroy_locked(sandbox)
            return  # deleted: no other timer applies
        if sandbox.ready_at is not None and now >= sandbox.ready_at:
            sandbox.ready_at = None
            if sandbox.state in ("creating", "starting"):
                sandbox.state = "started"
                self.mark_activity(sandbox)
                self._touch(sandbox)
        idle = now - sandbox.last_activity_mono
        if sandbox.state == "started" and sandbox.auto_stop_interval > 0 and idle >= sandbox.auto_stop_interval * 60:
            self._stop_locked(sandbox, now)
        stopped = sandbox.stopped_mono
        if (
            sandbox.state == "stopped"
            and stopped is not None
            and sandbox.auto_delete_interval >= 0
            and now - stopped >= sandbox.auto_delete_interval * 60
        ):
            self._destroy_locked(sandbox)

    def sweep(self) -> None:
        """Apply timers to every sandbox."""
        with self._lock:
            now = self._now()
            for sandbox in list(self._sandboxes.values()):
                self._advance(sandbox, now)

    def alive(self) -> int:
        with self._lock:
            return len(self._sandboxes)

    # ------------------------------------------------------------------ operations

    def create(self, body: dict[str, Any]) -> Sandbox:
        config = self.config
        with self._lock:
            self.sweep()
            labels = _str_dict(body.get("labels"), "labels")
            env = _str_dict(body.get("env"), "env")
            name = body.get("name")
            if name is not None and not isinstance(name, str):
                raise ApiError(400, "name must be a string")
            cpu = _opt_int(body, "cpu", config.default_cpu)
            gpu = _opt_int(body, "gpu", 0)
            memory = _opt_int(body, "memory", config.default_memory_gib)
            disk = _opt_int(body, "disk", config.default_disk_gib)
            auto_stop = int(intervals.auto_stop(_opt_int(body, "autoStopInterval", 15)))
            auto_archive = int(intervals.auto_archive(_opt_int(body, "autoArchiveInterval", 10080)))
            auto_delete = _opt_int(body, "autoDeleteInterval", -1)
            if name:
                for other in self._sandboxes.values():
                    if other.name == name:
                        raise ApiError(409, f"Sandbox with name {name} already exists")
            self._check_quotas(cpu, memory, disk)
            _refuse_nul(body, labels, env)  # at the query, after every check
            sandbox_id = str(uuid.uuid4())
            now = self._now()
            stamp = now_iso()
            root = os.path.join(self.root, sandbox_id)
            os.makedirs(os.path.join(root, "fs"), mode=0o755)
            os.chmod(root, 0o711)
            user = body.get("user")
            sandbox = Sandbox(
                id=sandbox_id,
                name=name or sandbox_id,
                organization_id=config.organization_id,
                user=user if isinstance(user, str) and user else "daytona",
                env=env,
                labels=labels,
                target=str(body["target"]) if isinstance(body.get("target"), str) else config.target,
                cpu=cpu,
                gpu=gpu,
                memory=memory,
                disk=disk,
                public=bool(body.get("public", False)),
                network_block_all=bool(body.get("networkBlockAll", False)),
                snapshot=body.get("snapshot") if isinstance(body.get("snapshot"), str) else None,
                auto_stop_interval=auto_stop,
                auto_archive_interval=auto_archive,
                auto_delete_interval=auto_delete,
                root=root,
                created_at=stamp,
                created_mono=now,
                updated_at=stamp,
                network_allow_list=body.get("networkAllowList")
                if isinstance(body.get("networkAllowList"), str)
                else None,
                ordinal=self._created + 1,
            )
            self._created += 1
            self.mark_activity(sandbox)
            if self._fail_next:
                state, reason = self._fail_next.pop(0)
                sandbox.state, sandbox.error_reason = state, reason
            elif config.create_latency > 0:
                sandbox.state = "creating"
                sandbox.ready_at = now + config.create_latency
            self._sandboxes[sandbox_id] = sandbox
            self.alive_high_water = max(self.alive_high_water, len(self._sandboxes))
            return sandbox

    def _check_quotas(self, cpu: int, memory: int, disk: int) -> None:
        quotas = self.config.quotas
        live = list(self._sandboxes.values())
        if quotas.max_sandboxes is not None and len(live) + 1 > quotas.max_sandboxes:
            raise ApiError(400, f"Sandbox quota exceeded. Maximum allowed: {quotas.max_sandboxes}.")
        self._check_running_quotas(cpu, memory)
        if quotas.total_disk_gib is not None and sum(s.disk for s in live) + disk > quotas.total_disk_gib:
            message = f"Total disk limit exceeded. Maximum allowed: {quotas.total_disk_gib}GiB."
            raise ApiError(400, f"{message}\n{_ARCHIVE_SANDBOXES}\n{_UPGRADE_TIER}")

    def _check_running_quotas(self, cpu: int, memory: int) -> None:
        """The pool's CPU and memory, which running sandboxes hold, with ``cpu`` and ``memory`` more."""
        quotas = self.config.quotas
        running = [s for s in self._sandboxes.values() if s.state in _RUNNING]
        if quotas.total_cpu is not None and sum(s.cpu for s in running) + cpu > quotas.total_cpu:
            raise ApiError(400, f"Total CPU limit exceeded. Maximum allowed: {quotas.total_cpu}.\n{_UPGRADE_TIER}")
        if quotas.total_memory_gib is not None and sum(s.memory for s in running) + memory > quotas.total_memory_gib:
            message = f"Total memory limit exceeded. Maximum allowed: {quotas.total_memory_gib}GiB."
            raise ApiError(400, f"{message}\n{_UPGRADE_TIER}")

    def find(self, id_or_name: str) -> Sandbox | None:
        """The live sandbox with this id or name (timers applied), else None. An errored sandbox being deleted is
        not found, as the API's ``findOneByIdOrName`` has it (a listing shows it with ``includeErroredDeleted``)."""
        with self._lock:
            sandbox = self._sandboxes.get(id_or_name)
            if sandbox is None:
                sandbox = next((s for s in self._sandboxes.values() if s.name == id_or_name), None)
            if sandbox is None:
                return None
            self._advance(sandbox, self._now())
            found = self._sandboxes.get(sandbox.id)
            if found is not None and found.desired_state == "destroyed" and found.state in ("error", "build_failed"):
                return None
            return found

    def get(self, id_or_name: str) -> Sandbox:
        sandbox = self.find(id_or_name)
        if sandbox is None:
            raise ApiError(404, f"Sandbox with ID or name {id_or_name} not found")
        return sandbox

    def list(self) -> list[Sandbox]:
        with self._lock:
            self.sweep()
            return sorted(self._sandboxes.values(), key=lambda s: (s.created_mono, s.id))

    def start(self, id_or_name: str) -> Sandbox:
        """The API's ``start``: a started sandbox as it is; an errored one 400; one between states (creating,
        starting) 409; a stopped one started."""
        with self._lock:
            sandbox = self.get(id_or_name)
            if sandbox.state == "started" and sandbox.desired_state == "started":
                return sandbox
            _assert_not_errored(sandbox)
            if sandbox.state != sandbox.desired_state:
                raise ApiError(409, _STATE_CHANGE_IN_PROGRESS)
            if sandbox.state not in ("stopped", "archived"):
                raise ApiError(400, "Sandbox is not in valid state")
            self._check_running_quotas(sandbox.cpu, sandbox.memory)  # as the API's start validates the pool
            sandbox.desired_state = "started"
            sandbox.stopped_mono = None
            if self.config.start_latency > 0:
                sandbox.state = "starting"
                sandbox.ready_at = self._now() + self.config.start_latency
            else:
                sandbox.state = "started"
                self.mark_activity(sandbox)
            self._touch(sandbox)
            return sandbox

    def stop(self, id_or_name: str) -> Sandbox:
        """The API's ``stop``: an errored sandbox 400; one between states 409; one not started (stopped already)
        400; a started one stopped, or, ephemeral (``autoDeleteInterval`` 0), soft-deleted as :meth:`delete` does it
        and answered alike (the API's ``stop`` applies ``getSoftDeleteUpdate`` to an ephemeral sandbox)."""
        with self._lock:
            sandbox = self.get(id_or_name)
            _assert_not_errored(sandbox)
            if sandbox.state != sandbox.desired_state:
                raise ApiError(409, _STATE_CHANGE_IN_PROGRESS)
            if sandbox.state not in ("started", "paused"):
                raise ApiError(400, "Sandbox is not in a stoppable state")
            if sandbox.auto_delete_interval == 0:
                return self._soft_delete_locked(sandbox)
            self._stop_locked(sandbox, self._now())
            return sandbox

    def _stop_locked(self, sandbox: Sandbox, now: float) -> None:
        sandbox.state = "stopped"
        sandbox.desired_state = "stopped"
        sandbox.ready_at = None
        sandbox.stopped_mono = now
        self._touch(sandbox)
        for hook in self.on_destroy:  # processes of a stopped sandbox die with it
            hook(sandbox)
        if sandbox.auto_delete_interval == 0:
            self._destroy_locked(sandbox)

    def delete(self, id_or_name: str) -> Sandbox:
        """The API's ``destroy``: a sandbox between states (creating, starting: the API's ``pending``) is a 409; any
        other is soft-deleted, and the answer is that update as the API returns it: the state as it was,
        ``desiredState`` destroyed, the name freed by renaming it ``DESTROYED_<name>_<epoch ms>``. The runner's
        teardown, a moment later in the real service, comes after ``destroy_latency`` (at once by default: the
        sandbox is gone, 404, from the next request on)."""
        with self._lock:
            sandbox = self.get(id_or_name)
            if sandbox.state != sandbox.desired_state and sandbox.state not in ("error", "build_failed"):
                raise ApiError(409, _STATE_CHANGE_IN_PROGRESS)
            return self._soft_delete_locked(sandbox)

    def _soft_delete_locked(self, sandbox: Sandbox) -> Sandbox:
        """The API's soft delete of ``sandbox`` and the copy of it to answer: its state as it was, ``desiredState``
        destroyed, renamed; torn down now, or after ``destroy_latency``."""
        renamed = f"DESTROYED_{sandbox.name}_{time.time_ns() // 1_000_000}"
        if self.config.destroy_latency > 0:  # found and listed as the API has it until the teardown
            sandbox.desired_state = "destroyed"
            sandbox.name = renamed
            sandbox.teardown_at = self._now() + self.config.destroy_latency
            self._touch(sandbox)
            return replace(sandbox)
        answer = replace(sandbox, desired_state="destroyed", name=renamed, updated_at=now_iso())
        self._destroy_locked(sandbox)
        return answer

    def discard(self, sandbox_id: str) -> None:
        """Tear a sandbox down whatever its state (a creation that failed half-way), without the API's rules."""
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
            if sandbox is not None:
                self._destroy_locked(sandbox)

    def _destroy_locked(self, sandbox: Sandbox) -> None:
        if self._sandboxes.pop(sandbox.id, None) is None:
            return
        sandbox.state = "destroyed"
        sandbox.desired_state = "destroyed"
        self._touch(sandbox)
        for hook in self.on_destroy:
            hook(sandbox)
        if sandbox.home_dir is not None:
            sandbox.home_dir.cleanup()
        remove_tree(sandbox.root)

    def set_labels(self, id_or_name: str, labels: dict[str, str]) -> Sandbox:
        with self._lock:
            sandbox = self.get(id_or_name)
            sandbox.labels = dict(labels)
            self._touch(sandbox)
            return sandbox

    def refresh_activity(self, id_or_name: str) -> Sandbox:
        """The API's ``updateLastActivityAt``: now is the sandbox's last activity (its auto-stop counts from it),
        whatever its state."""
        with self._lock:
            sandbox = self.get(id_or_name)
            self.mark_activity(sandbox)
            return sandbox

    def set_public(self, id_or_name: str, public: bool) -> Sandbox:
        with self._lock:
            sandbox = self.get(id_or_name)
            sandbox.public = public
            self._touch(sandbox)
            return sandbox

    def pause(self, id_or_name: str) -> NoReturn:
        """The API's ``pause`` (v0.190), which no emulated sandbox passes: one not started is a 400, one between
        states a 409, and a started one a 422, since only the ``linux-vm`` and ``windows`` classes pause and every
        emulated sandbox is a ``container``."""
        with self._lock:
            sandbox = self.get(id_or_name)
            if sandbox.state != "started":
                raise ApiError(400, "Sandbox must be in started state to pause")
            if sandbox.desired_state != sandbox.state:  # the API's ``pending`` (a soft delete waiting, say)
                raise ApiError(409, _STATE_CHANGE_IN_PROGRESS)
            raise ApiError(422, "Pausing is not supported for this sandbox")

    def recover(self, id_or_name: str) -> NoReturn:
        """The API's ``recover``, which no emulated sandbox passes: only a sandbox the runner marked ``recoverable``
        recovers, and no emulated error is (its JSON says ``recoverable: false``)."""
        with self._lock:
            self.get(id_or_name)
            raise ApiError(400, "Sandbox is not in a recoverable state")

    def set_interval(self, id_or_name: str, which: str, value: float) -> Sandbox:
        """The API's ``setAutostopInterval``, ``setAutoArchiveInterval`` and ``setAutoDeleteInterval`` of ``value``,
        the path's interval as JavaScript's ``Number`` reads it: the sandbox found first (404), then the service's
        checks (400), then the column's (500; see :mod:`emulator.daytona.intervals`)."""
        with self._lock:
            sandbox = self.get(id_or_name)
            if which == "autostop":
                sandbox.auto_stop_interval = intervals.stored(intervals.auto_stop(value))
            elif which == "autoarchive":
                sandbox.auto_archive_interval = intervals.stored(intervals.auto_archive(value))
            elif which == "autodelete":
                if sandbox.gpu > 0:
                    raise ApiError(400, "GPU sandboxes must remain ephemeral")
                sandbox.auto_delete_interval = intervals.stored(value)  # any negative: never
            self._touch(sandbox)
            return sandbox

    def clear(self) -> None:
        """Destroy every sandbox (between tests) and forget the high-water mark."""
        with self._lock:
            for sandbox in list(self._sandboxes.values()):
                self._destroy_locked(sandbox)
            self.alive_high_water = 0
            self._created = 0
            self._fail_next.clear()

    def close(self) -> None:
        self.clear()
        if self._owned_root and self._root is not None:
            remove_tree(self._root)
            self._root = None
