"""Who crashes when tenants' memory exceeds a GPU: the simulator's model of fenced collocation.

Two truths the placer never reads:

* **Memory growth** (``--memory-growth G``): each job's true peak exceeds the catalogue's by a
  seeded share ``g`` in ``[0, G)``, reached late in its run (between half and nine tenths of its
  solo work), as training does at a validation step or a longer sequence.
* **Isolation** (``--isolation none|caps``).  Unfenced, an allocation fails only where the GPU
  has no room left, and when a grower takes the last of it the try that allocates next crashes,
  whoever grew (:func:`next_allocator`): a co-tenant that stayed within its promise is then a
  *victim*.  (A try's first allocation, at the end of its ramp, fails in that try, as before.)  Fenced (the simulated
  ledger's live rule, core/fencing.py), a try may hold no more than its GPU less what its
  co-tenants were promised (or hold, when they hold more): only a try past its cap crashes, and
  one within its promise always gets it.  ``fixed`` plays a cap set once when the process
  starts (framework, MPS): its reservation plus the margin, the whole GPU when exclusive, so an
  underestimate crashes even where nobody was promised the memory.

A try's *promise* is its reservation as the placer counts it (core/facts.py): the whole
reservation until it has allocated and its lock window (``lock_s``) has passed, then what it
holds (the placer trusts observed memory and offers the rest of the reservation to newcomers).
A victim is a try that crashed asking for no more than its promise.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import protective_cap_mib
from carma_airflow.core.recovery import RecoverySettings

if TYPE_CHECKING:
    from carma_airflow.sim.config import SimConfig

T = TypeVar("T")
GROWTH_START, GROWTH_END = 0.5, 0.9  # when a job grows, as a share of its solo work


class SimIsolation(enum.Enum):
    NONE = "none"
    CAPS = "caps"  # live: the GPU less the co-tenants' promises, re-read on every allocation
    FIXED = "fixed"  # set once at the start: reservation + margin (the whole GPU when exclusive)

    @classmethod
    def parse(cls, text: str) -> SimIsolation:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"--isolation {text!r}: use none, caps or fixed") from None


@dataclass(frozen=True, slots=True)
class Growth:
    """One job's growth: ``share`` of its catalogue peak more, once ``at`` of its solo work is done."""

    share: float
    at: float

    def extra_mib(self, peak_mib: int) -> int:
        return int(peak_mib * self.share)


def growth_of(job_id: int, growth: float, seed: int = 0) -> Growth | None:
    """The seeded growth truth of one job (None without growth): the same for each of its tries."""
    if growth <= 0:
        return None
    rng = random.Random(f"memory-growth:{seed}:{job_id}")
    return Growth(rng.uniform(0.0, growth), rng.uniform(GROWTH_START, GROWTH_END))


@dataclass(frozen=True, slots=True)
class Refusal:
    """An allocation that failed: a CUDA OOM in the try that asked."""

    reached_mib: int  # what the try reached: held + free (full GPU) or held + asked (past its cap)
    past_cap: bool  # it hit its own cap while the GPU had room (or would have)
    victim: bool  # it asked for no more than its promise: someone else took its memory


def promised(reservation_mib: int, held_mib: int, allocated: bool, age_s: float, lock_s: float) -> int:
    """What the placer counts for a try now: its reservation until it allocated and its lock
    window passed, then what it holds."""
    if not allocated or age_s < lock_s:
        return max(reservation_mib, held_mib)
    return held_mib


def allocate(
    isolation: SimIsolation,
    *,
    total_mib: int,
    used_mib: int,
    held_mib: int,
    asked_mib: int,
    promise_mib: int,
    others: Iterable[tuple[int, int]],
    fixed_cap_mib: int | None = None,
) -> Refusal | None:
    """Whether a try holding ``held_mib`` on a GPU gets ``asked_mib`` more (None) or crashes.

    ``promise_mib``: what the try was promised (:func:`promised`); ``others``: each co-tenant's
    ``(promise_mib, held_mib)`` on that GPU; ``fixed_cap_mib``: its cap under ``FIXED``.
    """
    victim = held_mib + asked_mib <= promise_mib
    cap = None
    if isolation is SimIsolation.CAPS:
        cap = protective_cap_mib(total_mib, 0, others)
    elif isolation is SimIsolation.FIXED:
        cap = fixed_cap_mib
    if cap is not None and held_mib + asked_mib > cap:
        return Refusal(held_mib + asked_mib, True, victim)
    free = total_mib - used_mib
    if asked_mib > free:
        return Refusal(held_mib + max(0, free), False, victim)
    return None


def bounded_recovery(config: SimConfig) -> RecoverySettings:
    """The recovery settings with retries bounded by the largest GPU, when memory grows (an OOM
    retry asking more than any GPU offers would never fit; it gets a GPU to itself instead)."""
    rs = config.recovery_settings
    if config.memory_growth <= 0 or rs.max_request_mib is not None or not config.gpus:
        return rs
    s = config.settings
    largest = max(g.memory_mib for g in config.gpus) - s.reserve_mib - s.headroom_mib
    return replace(rs, max_request_mib=largest // rs.round_mib * rs.round_mib)


def next_allocator(crowd: Sequence[T], job_id: int, now: float, seed: int = 0) -> T | None:
    """Unfenced, which process's allocation fails when a grower takes the last of a GPU: each of
    its co-tenants (``crowd``) allocates every step as the grower does, so each is as likely as
    the grower (None).  Seeded by the grower's job and the time."""
    if not crowd:
        return None
    pick = random.Random(f"next-allocator:{seed}:{job_id}:{now!r}").randrange(len(crowd) + 1)
    return crowd[pick] if pick < len(crowd) else None


def worst(refusals: Iterable[Refusal | None]) -> Refusal | None:
    """A multi-GPU try's outcome: refused on any GPU, at the least it reached there."""
    found = [r for r in refusals if r is not None]
    if not found:
        return None
    return Refusal(min(r.reached_mib for r in found), any(r.past_cap for r in found), any(r.victim for r in found))


__all__ = [
    "Growth",
    "Refusal",
    "SimIsolation",
    "allocate",
    "bounded_recovery",
    "growth_of",
    "next_allocator",
    "promised",
    "worst",
]
