"""Fencing a try's GPU memory: the mechanisms, the cap rules, and the cap a try is held to.

Pure and shared: the executor computes a placed try's cap here, the simulated GPUs' ledger and
the trace simulator enforce the same model, so a test of one is a test of the others.

Contract (stable; the simulator, the executor's simulated GPUs and the executor use it)
-----------------------------------------------------------------------------------------
``FenceModel.of(mode, rule)`` is one mechanism with its cap rule, *resolved* (never ``auto``;
``taskrun/isolation.resolve`` turns ``auto`` into a mechanism on a host):

=================== ============= =========================================================
mechanism           rule          what holds the try
=================== ============= =========================================================
``none``            (ignored)     nothing: only a full GPU refuses an allocation
``framework``       promise       a cap set once at the try's start: its promise
``framework``       protective    set once at start: the GPU less the co-tenants then placed
``framework``       live          protective at start, then re-set as co-tenants come and go,
                                  ``reset_s`` after each change (PyTorch's fraction re-set
                                  from the executor's cap file: a heartbeat plus the try's
                                  1 s follower); in between, the old cap holds (exposure)
``mps``             promise       set once at start (an MPS client reads its limit once)
``mps``             protective    set once at start; ``live`` is played as ``promise`` (below)
``driver``          promise       the NVML per-cgroup hard limit, set at start
``driver``          protective    set once at start
``driver``          live          the hard limit re-set by the executor, ``reset_s`` after a
                                  change (a heartbeat)
=================== ============= =========================================================

A ledger or simulator asks two questions per try and GPU:

1. At the try's start: ``model.start_cap_mib(promise_mib=..., total_mib=..., reserve_mib=...,
   co_tenants=[Tenant(promise, held), ...], exclusive=...)`` -> the cap set at its start (None
   under ``none``).  ``promise_mib`` is ``model.promise_mib(reservation, margin, total)``, the
   reservation plus a margin (``model.margin_mib(margin)``: none under a live rule, as the
   simulator counts every promise, its own and its co-tenants').
2. At any allocation: ``model.may_hold_mib(start_cap_mib=..., promise_mib=..., total_mib=...,
   reserve_mib=..., co_tenants=[...], exclusive=...)`` -> what the try may hold now (None:
   unfenced, only the GPU's free memory bounds it).  For a fixed mechanism that is its start
   cap; for a live one it is the GPU less the reserve and the co-tenants, never below its own
   promise as the placer counts it now (pass ``promise_mib=counted_mib(...)`` of its own: once
   the placer counts what it holds, the rest of its reservation may be a newcomer's).
   ``co_tenants`` is the co-tenant set *as the mechanism last saw it*: for a live rule with
   ``reset_s > 0`` the caller passes the set as of the last re-set (a co-tenant that arrived
   within ``reset_s`` is not seen yet, one that left still counts: the exposure window).

**A promise holds from placement.**  ``co_tenants`` lists every try placed on that GPU, whether
or not its process has touched the GPU yet (a try that spends its first seconds loading data on
the CPU holds nothing, yet its reservation is promised): each counts at
``Tenant(counted_mib(promise, held, allocated=..., age_s=..., lock_s=...), held)``, i.e. at
the larger of its promise and what it holds from its placement for as long as its placer counts
its reservation.  A placer that trusts observed memory (core/facts.py: once the try has
allocated and its lock window, ``PlacementSettings.lock_s``, has passed; the trace simulator's)
offers the rest of the reservation to newcomers from then on, so the fence counts what it
holds from then on: a fence that kept the rest would hold, for nobody, memory the placer gave
away, and stop growers the GPU had room for (docs/isolation.md measures it: counted for life
beside such a placer, live caps crash 3-5x as often as no fence).  A placer that never trusts
observed memory (the executor's reservations) keeps the promise for the try's life: pass
``allocated=False`` (or ``lock_s=math.inf``).
An allocation past the cap fails in the try that asked, and its message carries
:data:`PAST_CAP` (the grower is the one stopped).

The rule (docs/isolation.md says why):

* A try's **promise** on each of its GPUs is the memory it was placed with plus a margin (by
  default the placer's own headroom: the placer never places a newcomer where less than that
  is free above its estimate, so memory up to the promise was never offered to anyone else).
* A try's **cap** on a GPU is what nobody else was promised there: the GPU's memory less the
  reserve and less its co-tenants' promises (or what they hold, when they hold more).  A
  mechanism re-set as co-tenants come and go ("live") caps a try at about that: alone on its
  GPU it may use the whole card, so a harmless underestimate stays harmless, and the cap
  tightens as tenants arrive.  Live promises carry no
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
from typing import NamedTuple

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

    @classmethod
    def parse(cls, text: str, where: str = "[carma] isolation_cap") -> CapRule:
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            names = " | ".join(r.value for r in cls)
            raise ConfigError(f"{where} = {text!r}; use one of {names}") from None


# Seconds between a co-tenant's arrival (or departure) and a live cap's re-set: the executor
# re-writes caps once a heartbeat (about 1 s: flow.sync calls refresh_caps before it places), and
# a framework try's follower thread re-reads its cap file once a second (taskrun/live_cap.py).
RESET_S: dict[IsolationMode, float] = {IsolationMode.FRAMEWORK: 2.0, IsolationMode.DRIVER: 1.0}
# the mechanisms whose cap can be re-set while the try runs (MPS reads its limit once, at start)
RESETTABLE = frozenset(RESET_S)


class Tenant(NamedTuple):
    """A co-tenant on one GPU as a fence counts it: placed, whether or not it allocated yet."""

    promise_mib: int  # what it counts for: :func:`counted_mib` of its promise (reservation + margin)
    held_mib: int = 0  # what it holds now (0 while it loads data on the CPU)


@dataclass(frozen=True, slots=True)
class FenceModel:
    """One mechanism with its cap rule: how a try's cap is set and when it moves (the contract
    at the top of this module)."""

    mode: IsolationMode  # resolved: framework | mps | driver | none (never auto)
    rule: CapRule = CapRule.PROMISE
    reset_s: float = 0.0  # live only: seconds from a co-tenant's change to the re-set

    def __post_init__(self) -> None:
        if self.mode is IsolationMode.AUTO:
            raise ValueError("a fence model needs a resolved mechanism; resolve auto on the host first")
        if self.reset_s < 0:
            raise ValueError("reset_s must be >= 0")

    @classmethod
    def of(cls, mode: IsolationMode, rule: CapRule = CapRule.PROMISE, reset_s: float | None = None) -> FenceModel:
        """The model of ``mode`` under ``rule``, normalised: ``live`` under a mechanism that reads
        its limit once (MPS) is played as ``promise``, the only cap set at the start that keeps the
        promises of tenants placed later (``live`` asks for every co-tenant's promise kept;
        ``protective`` would keep only those present at the start: measured in bench/fencing.py,
        docs/isolation.md); under ``none`` the rule is moot (kept as ``promise``); ``reset_s``
        defaults to the mechanism's (:data:`RESET_S`)."""
        if mode is IsolationMode.NONE:
            return cls(mode, CapRule.PROMISE, 0.0)
        if rule is CapRule.LIVE and mode not in RESETTABLE:
            rule = CapRule.PROMISE
        if rule is not CapRule.LIVE:
            return cls(mode, rule, 0.0)
        return cls(mode, rule, RESET_S[mode] if reset_s is None else float(reset_s))

    @property
    def fenced(self) -> bool:
        return self.mode is not IsolationMode.NONE

    @property
    def live(self) -> bool:
        """The cap is re-set as co-tenants come and go (else it stays where it was set at start)."""
        return self.fenced and self.rule is CapRule.LIVE

    def promise_mib(self, reservation_mib: int, margin_mib: int, total_mib: int) -> int:
        """A try's promise on a GPU: its reservation plus ``margin_mib``, within the GPU."""
        return promise_mib(reservation_mib, margin_mib, total_mib)

    def margin_mib(self, margin_mib: int) -> int:
        """The margin a promise needs under this model: ``margin_mib`` for a cap fixed at the
        start, none under a live cap (it lets a try use whatever nobody else is promised, and
        co-tenants counted with margins stop growers for memory nobody uses: measured in
        bench/fencing.py, docs/isolation.md; the simulator uses it)."""
        return 0 if self.live else max(0, margin_mib)

    def start_cap_mib(
        self,
        *,
        promise_mib: int,
        total_mib: int,
        reserve_mib: int = 0,
        co_tenants: Iterable[Tenant | tuple[int, int]] = (),
        exclusive: bool = False,
    ) -> int | None:
        """The cap set when the try starts (None: unfenced)."""
        if not self.fenced:
            return None
        if exclusive:
            return total_mib
        if self.rule is CapRule.PROMISE:
            return min(total_mib, promise_mib)
        return min(total_mib, max(promise_mib, protective_cap_mib(total_mib, reserve_mib, co_tenants)))

    def may_hold_mib(
        self,
        *,
        start_cap_mib: int | None,
        promise_mib: int,
        total_mib: int,
        reserve_mib: int = 0,
        co_tenants: Iterable[Tenant | tuple[int, int]] = (),
        exclusive: bool = False,
    ) -> int | None:
        """What the try may hold on the GPU now, given the co-tenants as the mechanism last saw
        them (None: unfenced; only a full GPU refuses it)."""
        if not self.fenced:
            return None
        if exclusive:
            return total_mib
        if not self.live:
            if start_cap_mib is None:
                return self.start_cap_mib(
                    promise_mib=promise_mib, total_mib=total_mib, reserve_mib=reserve_mib, co_tenants=co_tenants
                )
            return start_cap_mib
        return min(total_mib, max(promise_mib, protective_cap_mib(total_mib, reserve_mib, co_tenants)))

    def describe(self) -> str:
        """In words, for logs and results: ``framework, cap live (re-set 2 s after a co-tenant changes)``."""
        if not self.fenced:
            return "none (unfenced)"
        if self.live:
            return f"{self.mode.value}, cap live (re-set {self.reset_s:g} s after a co-tenant changes)"
        return f"{self.mode.value}, cap {self.rule.value} (set once at the try's start)"


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


def counted_mib(promise_mib: int, held_mib: int, *, allocated: bool, age_s: float, lock_s: float) -> int:
    """What a co-tenant counts for in another try's cap: its promise (or what it holds, if more)
    from its placement until it has allocated and ``lock_s`` have passed since its placement,
    then what it holds, as the placer counts it (core/facts.py)."""
    if not allocated or age_s < lock_s:
        return max(promise_mib, held_mib)
    return held_mib


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
    "RESETTABLE",
    "RESET_S",
    "CapRule",
    "Fence",
    "FenceModel",
    "IsolationMode",
    "Tenant",
    "counted_mib",
    "promise_mib",
    "protective_cap_mib",
    "start_cap_mib",
]
