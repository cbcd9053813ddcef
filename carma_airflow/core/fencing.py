"""Fencing a try's GPU memory: the modes, and the cap a try is held to.

Pure and shared: the executor computes a placed try's cap here, the simulated GPUs' ledger and
the trace simulator enforce the same rule, so a test of one is a test of the others.

The rule (docs/isolation.md says why):

* A try's **promise** on each of its GPUs is the memory it was placed with plus a margin (by
  default the placer's own headroom: the placer never places a newcomer where less than that
  is free above its estimate, so memory up to the promise was never offered to anyone else).
* A try's **cap** on a GPU is what nobody else was promised there: the GPU's memory less the
  reserve and less its co-tenants' promises (or what they hold, when they hold more).  A
  mechanism that re-reads the co-tenants on every allocation (the simulated ledger, "live")
  caps a try at exactly that: alone on its GPU it may use the whole card, so a harmless
  underestimate stays harmless, and the cap tightens as tenants arrive.  Live promises carry no
  margin (the reservations, which the placer never lets add up to more than the GPU), so a try
  within its reservation always gets it.  A mechanism set once when the process starts
  (framework, MPS, driver) is set to the promise, the only cap that protects tenants not placed
  yet (``CapRule.PROMISE``), or to the GPU less the co-tenants present (``CapRule.PROTECTIVE``),
  and to the whole GPU for an exclusive try.
* An allocation past the cap fails *in the try that asked* ("past its cap"), while the memory
  its co-tenants were promised stays theirs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from carma_airflow.core.errors import ConfigError

PAST_CAP = "past its cap"  # the words every cap OOM message carries (classification keys on them)


class IsolationMode(enum.Enum):
    """How a try's cap is enforced."""

    AUTO = "auto"  # the strongest the host has: driver, else mps, else framework
    FRAMEWORK = "framework"  # PyTorch / TensorFlow / JAX's own allocator limits, set in the try
    MPS = "mps"  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, read by an MPS client at start
    DRIVER = "driver"  # NVML per-cgroup memory limits (r615+, cgroup v2, root)
    NONE = "none"  # unfenced: today's behaviour

    @classmethod
    def parse(cls, text: str, where: str = "[carma] isolation") -> IsolationMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            names = " | ".join(m.value for m in cls)
            raise ConfigError(f"{where} = {text!r}; use one of {names}") from None


class CapRule(enum.Enum):
    """Where a cap set once at the try's start sits (a live mechanism always tightens)."""

    PROMISE = "promise"  # reservation + margin: protects tenants that arrive later
    PROTECTIVE = "protective"  # the GPU less the co-tenants present at placement
    LIVE = "live"  # protective at the start, then re-set as co-tenants change (PyTorch; taskrun/live_cap.py)


@dataclass(frozen=True, slots=True)
class Fence:
    """What one try is held to on each of its GPUs (same order as its CUDA_VISIBLE_DEVICES)."""

    mode: IsolationMode
    promise_mib: tuple[int, ...]
    cap_mib: tuple[int, ...]
    total_mib: tuple[int, ...]
    # the mechanism re-reads the co-tenants on every allocation (the simulated ledger): the cap
    # tightens to what they were promised as they arrive, and ``cap_mib`` is only its ceiling
    live: bool = False

    def __post_init__(self) -> None:
        if not (len(self.promise_mib) == len(self.cap_mib) == len(self.total_mib)):
            raise ValueError("a fence has one promise, cap and total per GPU")

    @property
    def fenced(self) -> bool:
        return self.mode is not IsolationMode.NONE

    def fractions(self) -> tuple[float, ...]:
        """Each cap as a share of its GPU (what PyTorch's and JAX's limits take)."""
        return tuple(min(1.0, c / t) if t > 0 else 1.0 for c, t in zip(self.cap_mib, self.total_mib, strict=True))

    def describe(self) -> str:
        if not self.fenced:
            return "unfenced (isolation = none): a co-tenant that grows past its reservation can crash this try"
        caps = ", ".join(f"{c} MiB" for c in self.cap_mib)
        live = ", less what its co-tenants were promised" if self.live else ""
        return f"fenced ({self.mode.value}): capped at {caps} per GPU{live}; promised {self.promise_mib[0]} MiB"


def promise_mib(reservation_mib: int, margin_mib: int, total_mib: int) -> int:
    """The memory a try is guaranteed on a GPU: its reservation plus the margin, within the GPU."""
    return max(0, min(total_mib, reservation_mib + max(0, margin_mib)))


def protective_cap_mib(total_mib: int, reserve_mib: int, others: Iterable[tuple[int, int]]) -> int:
    """What a try may hold on a GPU without taking what its co-tenants were promised.

    ``others``: each co-tenant's ``(promise_mib, held_mib)``; a co-tenant that holds more than
    its promise keeps what it holds (it is not taken back), so it counts at the larger.
    """
    taken = sum(max(promise, held) for promise, held in others)
    return max(0, total_mib - max(0, reserve_mib) - taken)


def start_cap_mib(
    rule: CapRule,
    *,
    promise: int,
    total_mib: int,
    reserve_mib: int,
    co_tenant_promises: Iterable[int] = (),
    exclusive: bool = False,
) -> int:
    """The cap set once when a try starts: its whole GPU when it has the GPU to itself
    (``exclusive``: nobody will be placed beside it), else by ``rule``; never below its own
    promise (a cap below what the placer promised would be a bug, not a fence)."""
    if exclusive:
        return total_mib
    if rule in (CapRule.PROTECTIVE, CapRule.LIVE):
        return max(promise, protective_cap_mib(total_mib, reserve_mib, ((p, 0) for p in co_tenant_promises)))
    return promise


__all__ = [
    "PAST_CAP",
    "CapRule",
    "Fence",
    "IsolationMode",
    "promise_mib",
    "protective_cap_mib",
    "start_cap_mib",
]
