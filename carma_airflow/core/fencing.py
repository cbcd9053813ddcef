"""Fencing a try's GPU memory: the mechanisms, the cap rules, and the cap a try is held to.

Pure and shared: the executor computes a placed try's cap here, the simulated GPUs and the simulator enforce it.

Contract (stable; the simulator, the executor's simulated GPUs and the executor use it)
-----------------------------------------------------------------------------------------
``FenceModel.of(mode, rule)`` is one mechanism with its cap rule, *resolved* (never ``auto``;
:func:`resolve` turns ``auto`` into a mechanism on a :class:`HostIsolation`):

=================== ============= =========================================================
mechanism           rule          what holds the try
=================== ============= =========================================================
``none``            (ignored)     nothing: only a full GPU refuses an allocation
``framework``       promise       a cap set once at the try's start: its promise
``framework``       protective    set once at start: the GPU less the co-tenants then placed
``framework``       live          protective at start, re-set ``reset_s`` after each co-tenant
                                  change (the cap file: a heartbeat + the 1 s follower);
                                  in between the old cap holds (the exposure window)
``mps``             promise       set once at start (``live`` is played as ``promise``)
``mps``             protective    set once at start
``driver``          promise/prot. the NVML per-cgroup hard limit, set once at start
``driver``          live          the hard limit re-set by the executor (a heartbeat)
=================== ============= =========================================================

A ledger or simulator asks two questions per try and GPU:
1. At the try's start: ``model.start_cap_mib(promise_mib=..., total_mib=..., reserve_mib=...,
   co_tenants=[Tenant(promise, held), ...], exclusive=...)`` -> the cap set at its start (None
   under ``none``).  ``promise_mib`` is ``model.promise_mib(reservation, margin, total)``: the
   reservation plus ``model.margin_mib(margin)`` (none under a live rule), for the try and each
   co-tenant alike (the executor and the simulator both call it: one rule).
2. At any allocation: ``model.may_hold_mib(start_cap_mib=..., promise_mib=..., total_mib=...,
   reserve_mib=..., co_tenants=[...], exclusive=...)`` -> what the try may hold now (None:
   unfenced, only the GPU's free memory bounds it).  For a fixed mechanism that is its start
   cap; for a live one it is the GPU less the reserve and the co-tenants, never below its own
   promise as the placer counts it now (pass ``promise_mib=counted_mib(...)`` of its own: once
   the placer counts what it holds, the rest of its reservation may be a newcomer's).
   ``co_tenants``: the set *as the mechanism last saw it* (live, ``reset_s > 0``: as of the last
   re-set; one that arrived since is not seen yet, one that left still counts: the exposure).

**A promise holds from placement.**  ``co_tenants`` lists every try placed on that GPU, allocated
or not (a try loading data on the CPU holds nothing, yet is promised its reservation): each at
``Tenant(counted_mib(promise, held, allocated=..., age_s=..., lock_s=...), held)``: the larger of
its promise and what it holds until it allocated and its lock window passed, then what it holds
(the tries already there may use the rest).  A newcomer may not: under a fence the placer keeps
each tenant's promise for its life (core/facts.py, :meth:`FenceModel.kept_margin_mib`).
An allocation past the cap fails in the try that asked, its message carrying :data:`PAST_CAP`.

The rule (docs/isolation.md says why): a try's **promise** on a GPU is the memory it was placed
with, plus a margin where its cap is fixed at the start (the placer's headroom: memory up to the
promise was never offered to anyone else); its **cap** is what nobody else was promised there:
the GPU less the reserve and its co-tenants' promises (or what they hold, if more).  A live cap
follows that as tenants come and go (alone, a try may use the whole card); a cap set once at the
start is the promise (``PROMISE``: protects tenants placed later), or the GPU less the
co-tenants then (``PROTECTIVE``); an exclusive try's is its whole GPU.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from carma_airflow.core.errors import ConfigError

PAST_CAP = "past its cap"  # the words every cap OOM message carries (classification keys on them)
FENCE_REASON = "fence: "  # a placement reason: the fence the try started under, per GPU (``carma why``, the UI)


def fence_line(reasons: tuple[str, ...] | list[str]) -> str | None:
    """The fence a try started under, from its placement's reasons (None: not recorded)."""
    return next((r[len(FENCE_REASON) :] for r in reasons if r.startswith(FENCE_REASON)), None)


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
        """A try's (or a co-tenant's) promise on a GPU: its reservation plus this model's margin
        (:meth:`margin_mib` of ``margin_mib``, ``[carma] isolation_margin_mib``), within the GPU."""
        return promise_mib(reservation_mib, self.margin_mib(margin_mib), total_mib)

    def margin_mib(self, margin_mib: int) -> int:
        """The margin a promise carries under this model: ``margin_mib`` for a cap fixed at the
        start, none under a live cap (it lets a try use whatever nobody else is promised, and
        co-tenants counted with margins stop growers for memory nobody uses: measured in
        bench/fencing.py, docs/isolation.md)."""
        return 0 if self.live else max(0, margin_mib)

    def kept_margin_mib(self, margin_mib: int) -> int | None:
        """What the placer keeps from newcomers above each try's reservation for its life
        (``PlacementSettings.kept_margin_mib``): its :meth:`margin_mib` under a fence, else None."""
        return self.margin_mib(margin_mib) if self.fenced else None

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
        """How the mechanism under its rule holds a try, in words (logs, ``carma why``, results)."""
        mode = self.mode.value
        if not self.fenced:
            return "none (unfenced)"
        if self.live:
            return f"{mode}, cap re-set as co-tenants come and go (within about {self.reset_s:g} s of a change)"
        if self.rule is CapRule.PROTECTIVE:
            return f"{mode}, cap fixed at the try's start (the GPU less its co-tenants then)"
        return f"{mode}, cap fixed at the try's start (its promise: reservation + margin)"


# the cap rule of ``[carma] isolation_cap`` by default (carma_airflow/settings.py; measured per
# mechanism in bench/fencing.py, docs/isolation.md): live where the cap can be re-set, played as
# the promise where it cannot (MPS)
DEFAULT_CAP_RULE = CapRule.LIVE
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # NVIDIA's documented default
_DRIVER_FALLBACK = "a try NVML refuses runs with framework caps, its log says so"


def default_rule(mode: IsolationMode) -> CapRule:
    """:data:`DEFAULT_CAP_RULE` as ``mode`` plays it (``live`` under MPS is ``promise``)."""
    return FenceModel.of(mode, DEFAULT_CAP_RULE).rule


@dataclass(frozen=True, slots=True)
class HostIsolation:
    """What a host offers to fence its tries (taskrun/isolation.host_isolation detects it)."""

    backend: str  # nvml | simulated
    mps_daemon: bool = False
    driver_limits: bool = False
    driver_why: str = "not checked"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The mechanism in force, the cap rule it is played with, and why it was chosen."""

    mode: IsolationMode
    why: str
    rule: CapRule = CapRule.PROMISE
    simulated: bool = False  # simulated GPUs: the ledger plays the mechanism

    @property
    def model(self) -> FenceModel:
        """How the mechanism holds a try under the rule."""
        return FenceModel.of(self.mode, self.rule)

    @property
    def live(self) -> bool:
        """The cap follows the co-tenants while the try runs (else it stays where its start set it)."""
        return self.model.live

    def describe(self) -> str:
        return f"isolation: {self.model.describe()}: {self.why}"


def resolve(requested: IsolationMode, host: HostIsolation, rule: CapRule = CapRule.PROMISE) -> Resolved:
    """The mechanism in force for ``requested`` on ``host`` under ``rule`` ([carma] isolation_cap);
    ConfigError for a mechanism the host lacks."""
    if requested is IsolationMode.NONE:
        return Resolved(IsolationMode.NONE, "isolation = none: a try that grows can crash its co-tenants")
    if host.backend == "simulated":
        if requested is IsolationMode.AUTO:
            why = "auto: simulated GPUs, a host without an MPS daemon or driver limits; the ledger plays framework caps"
            return Resolved(IsolationMode.FRAMEWORK, why, rule, simulated=True)
        plays = {
            IsolationMode.FRAMEWORK: "framework caps (PyTorch's fraction, re-read from its cap file if live)",
            IsolationMode.MPS: "MPS's pinned memory limit, read once at the client's start",
            IsolationMode.DRIVER: "the cgroup's NVML hard limit, kept in the ledger (no cgroup here)",
        }[requested]
        return Resolved(requested, f"simulated GPUs: the ledger plays {plays}", rule, simulated=True)
    if requested is IsolationMode.DRIVER:
        if not host.driver_limits:
            raise ConfigError(
                f"[carma] isolation = driver: {host.driver_why}; use isolation = mps (with an MPS control daemon) "
                "or framework"
            )
        why = f"NVML per-cgroup limits, one cgroup leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}"
        return Resolved(IsolationMode.DRIVER, why, rule)
    if requested is IsolationMode.AUTO and host.driver_limits:
        why = f"auto: NVML per-cgroup limits, one leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}"
        return Resolved(IsolationMode.DRIVER, why, rule)
    if requested is IsolationMode.MPS:
        if not host.mps_daemon:
            raise ConfigError(
                "[carma] isolation = mps but no MPS control daemon serves this host's GPUs (no control pipe in "
                f"${MPS_PIPE_ENV} or {MPS_DEFAULT_PIPE_DIR}): start `nvidia-cuda-mps-control -d` as the user the "
                "tasks run as, or use isolation = framework"
            )
        return Resolved(IsolationMode.MPS, "an MPS control daemon serves the GPUs", rule)
    if requested is IsolationMode.AUTO and host.mps_daemon:
        return Resolved(IsolationMode.MPS, "auto: an MPS control daemon serves the GPUs", rule)
    why = "PyTorch / TensorFlow / JAX allocator limits set in the try"
    if requested is IsolationMode.AUTO:
        why = f"auto: no MPS daemon, no driver limits ({host.driver_why}); {why}"
    return Resolved(IsolationMode.FRAMEWORK, why, rule)


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
    until it has allocated and ``lock_s`` have passed since its placement, then what it holds."""
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


__all__ = [
    "DEFAULT_CAP_RULE",
    "FENCE_REASON",
    "MPS_DEFAULT_PIPE_DIR",
    "MPS_PIPE_ENV",
    "PAST_CAP",
    "RESETTABLE",
    "RESET_S",
    "CapRule",
    "Fence",
    "FenceModel",
    "HostIsolation",
    "IsolationMode",
    "Resolved",
    "Tenant",
    "counted_mib",
    "default_rule",
    "fence_line",
    "promise_mib",
    "protective_cap_mib",
    "resolve",
]
