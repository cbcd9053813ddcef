"""Placement decisions: the chosen GPUs, or why not, with per-GPU reasons as data."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from carma_airflow.core.filtering import Rejection


class Outcome(enum.Enum):
    PLACED = "placed"
    NOT_NOW = "not-now"  # may fit later, when tenants leave
    NEVER_FITS = "never-fits"  # no GPU set could ever take it


class Reason(enum.Enum):
    """Why one GPU was not chosen."""

    UNHEALTHY = "unhealthy"
    STALE = "stale-telemetry"
    LOCKED = "locked"
    MEMORY = "memory"
    RISK = "high-risk"
    INTERFERENCE = "interference"
    BUSY = "not-idle"
    EXCLUSIVE_TENANT = "exclusive-tenant"
    TENANT_CAP = "tenant-cap"
    MODEL = "gpu-model"
    RESERVED = "reserved"
    KEPT = "kept-for-larger"  # an idle GPU kept for waiting tries only its size holds (core/scarce.py)
    # an idle GPU kept from a try that runs faster on another model, or for tries that gain more from
    # its model (core/speed_keep.py)
    KEPT_FASTER = "kept-for-faster"

    # A member is its own singleton and Enum compares by identity: the identity hash is the
    # same contract, in C.  Enum's own hashes the name in Python, and a pass counts reasons by
    # the thousand (a heartbeat over 1,024 GPUs hashed about 40,000).
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    """The placer's word on one GPU for one request: ``detail`` is the text, rendered from the
    filter's ``rejection`` (its numbers) where a filter rejected the GPU."""

    uuid: str
    index: int
    spec: str
    reason: Reason | None
    detail: str
    rejection: Rejection | None = None

    def __str__(self) -> str:
        head = f"GPU {self.index} ({self.spec})"
        return f"{head}: {self.detail}" if self.reason is None else f"{head}: {self.reason.value}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Decision:
    """The placer's answer for one request.

    ``rejected``: for a request that waits, every GPU with its reason; for a placed request,
    the GPUs passed over before the chosen ones plus those no request could use at the time.
    """

    request_key: str
    outcome: Outcome
    gpu_uuids: tuple[str, ...] = ()
    chosen: tuple[GpuVerdict, ...] = ()
    rejected: tuple[GpuVerdict, ...] = ()
    summary: str = ""
    collocated: bool = False
    policy: str = ""

    @property
    def placed(self) -> bool:
        return self.outcome is Outcome.PLACED

    def explain(self, limit: int = 8) -> str:
        """Multi-line text for logs and the CLI."""
        lines = [self.summary]
        lines += [f"  chose {v}" for v in self.chosen]
        lines += [f"  skipped {v}" for v in self.rejected[:limit]]
        if len(self.rejected) > limit:
            lines.append(f"  ... and {len(self.rejected) - limit} more GPUs")
        return "\n".join(lines)
