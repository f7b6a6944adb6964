"""The divergence registry: differences between the emulator and a real service that are known and explained.

Each entry names a service, a case (a glob over case ids), a field (a path as ``compare.diff`` names them; it
covers everything beneath it), the reason, and the date it was last validated against the real service. A check
passes over registered differences, fails on any other, and reports entries that matched nothing (stale: the
divergence no longer occurs, so the entry should go).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from harness.reference.compare import Difference
from harness.reference.suite import SERVICES, default_fixtures_dir


class RegistryError(ValueError):
    """The registry file is missing or malformed."""


def default_registry_path() -> Path:
    return default_fixtures_dir() / "divergences.yaml"


@dataclass(frozen=True)
class Divergence:
    service: str
    case: str
    field: str
    reason: str
    validated: str

    def covers(self, service: str, case_id: str, difference: Difference) -> bool:
        if service != self.service or not fnmatchcase(case_id, self.case):
            return False
        path = difference.path
        return path == self.field or path.startswith((self.field + ".", self.field + "["))

    def to_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "case": self.case,
            "field": self.field,
            "reason": self.reason,
            "validated": self.validated,
        }


def _entry(raw: Any, position: int, path: Path) -> Divergence:
    where = f"{path} entry #{position + 1}"
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: expected a mapping")
    missing = [k for k in ("service", "case", "field", "reason", "validated") if not raw.get(k)]
    if missing:
        raise RegistryError(f"{where}: missing {', '.join(missing)}")
    if raw["service"] not in SERVICES:
        raise RegistryError(f"{where}: service must be one of {SERVICES}, got {raw['service']!r}")
    validated = raw["validated"]
    if isinstance(validated, str):
        try:
            validated = dt.date.fromisoformat(validated)
        except ValueError:
            raise RegistryError(f"{where}: validated must be a date (YYYY-MM-DD), got {validated!r}") from None
    if not isinstance(validated, dt.date):
        raise RegistryError(f"{where}: validated must be a date (YYYY-MM-DD), got {validated!r}")
    return Divergence(
        str(raw["service"]), str(raw["case"]), str(raw["field"]), str(raw["reason"]).strip(), validated.isoformat()
    )


def load_registry(path: Path | None = None) -> list[Divergence]:
    path = path or default_registry_path()
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise RegistryError(f"cannot read the divergence registry {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise RegistryError(f"the divergence registry {path} is not valid YAML: {exc}") from exc
    except ValueError as exc:  # not UTF-8, or a value YAML cannot build (a date such as 2024-13-45)
        raise RegistryError(f"the divergence registry {path} cannot be read: {exc}") from exc
    entries = (raw or {}).get("divergences") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise RegistryError(f"the divergence registry {path} must be a mapping with a 'divergences' list")
    return [_entry(item, i, path) for i, item in enumerate(entries)]


def registered(registry: list[Divergence], service: str, case_id: str, difference: Difference) -> Divergence | None:
    """The entry that explains ``difference``, if any."""
    return next((d for d in registry if d.covers(service, case_id, difference)), None)
