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
``mps``             promise       the MPS limit set once at start: the promise
``mps``             protective    the MPS limit set once at start: protective
``mps``             live          the MPS limit set once at start (an MPS client reads it once)
                                  at ``protective`` + the margin, *and* the framework hook's live
                                  cap beneath it (PyTorch's fraction from its cap file, re-set as
                                  for ``framework live``, from ``protective`` at the start): the
                                  try may hold the lower of the two
``driver``          promise/prot. the NVML per-cgroup hard limit, set once at start
``driver``          live          the hard limit re-set by the executor (a heartbeat)
=================== ============= =========================================================

A ledger or simulator asks two questions per try and GPU:
1. At the try's start: ``model.start_cap_mib(promise_mib=..., total_mib=..., reserve_mib=...,
   co_tenants=[Tenant(promise, held), ...], exclusive=..., margin_mib=...)`` -> the cap set at its
   start (None under ``none``; ``margin_mib``, ``[carma] isolation_margin_mib``, counts only for
   the limit fixed at the start of a start-bound model, MPS ``live``).  ``promise_mib`` is
   ``model.promise_mib(reservation, margin, total)``: the reservation plus
   ``model.margin_mib(margin)`` (none under a live rule), for the try and each co-tenant alike
   (the executor and the simulator both call it: one rule).
2. At any allocation: ``model.may_hold_mib(start_cap_mib=..., promise_mib=..., total_mib=...,
   reserve_mib=..., co_tenants=[...], exclusive=...)`` -> what the try may hold now (None:
   unfenced, only the GPU's free memory bounds it).  For a fixed mechanism that is its start
   cap; for a live one it is the GPU less the reserve and the co-tenants, never below its own
   promise as the placer counts it now (pass ``promise_mib=counted_mib(...)`` of its own: once
   the placer counts what it holds, the rest of its reservation may be a newcomer's), and under
   a start-bound one (MPS live: :attr:`FenceModel.start_bound`) never above its start cap.
   ``co_tenants``: the set *as the mechanism last saw it* (live, ``reset_s > 0``: as of the last
   re-set; one that arrived since is not seen yet, one that left still counts: the exposure).

**A promise holds from placement.**  ``co_tenants`` lists every try placed on that GPU, allocated
or not (a try loading data on the CPU holds nothing, yet is promised its reservation): each at
``Tenant(counted_mib(promise, held, allocated=..., age_s=..., lock_s=...), held)``: the larger of
its promise and what it holds until it allocated and its lock window passed, then what it holds
(the tries already there may use the rest).  A newcomer may not: under a fence the placer keeps
each fenced tenant's promise for its life (core/facts.py, each tenant's own
:meth:`FenceModel.kept_margin_mib`, from the fence it runs under).
An allocation past the cap fails in the try that asked, its message carrying :data:`PAST_CAP`.

The rule (docs/isolation.md says why): a try's **promise** on a GPU is the memory it was placed
with, plus a margin where its cap is fixed at the start (the placer's headroom: memory up to the
promise was never offered to anyone else); its **cap** is what nobody else was promised there:
the GPU less the reserve and its co-tenants' promises (or what they hold, if more).  A live cap
follows that as tenants come and go (alone, a try may use the whole card); a cap set once at the
start is the promise (``PROMISE``: protects tenants placed later), or the GPU less the
co-tenants then (``PROTECTIVE``); an exclusive try's is its whole GPU.  Under MPS ``live`` both
hold: the pinned limit fixed at the start (``PROTECTIVE`` plus the margin: it keeps the tenants
then present from every allocation of the client, but for the margin) and the live cap beneath
it (it keeps later tenants' promises from the framework's allocator).
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
# MPS: the pinned limit is read once at the client's start, but under live the framework hook
# beneath it follows the cap file as under framework (the same heartbeat + 1 s follower).
RESET_S: dict[IsolationMode, float] = {IsolationMode.FRAMEWORK: 2.0, IsolationMode.DRIVER: 1.0, IsolationMode.MPS: 2.0}
# the mechanisms whose cap can be re-set while the try runs (under MPS: the framework's live cap)
RESETTABLE = frozenset(RESET_S)
# the mechanisms whose own limit stays where the try's start set it even under a live rule: the
# live cap moves beneath it (an MPS client reads its pinned memory limit once, at its start)
FIXED_AT_START = frozenset({IsolationMode.MPS})


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
        """The model of ``mode`` under ``rule``, normalised: under ``none`` the rule is moot (kept
        as ``promise``); ``reset_s`` defaults to the mechanism's (:data:`RESET_S`).  ``live`` under
        MPS, whose client reads its limit once, is the MPS limit fixed at the start at the
        protective level plus the margin *and* the framework's live cap beneath it
        (:attr:`start_bound`; measured against ``promise``, ``protective`` and the limit without
        the margin in bench/fencing.py, docs/isolation.md)."""
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

    @property
    def start_bound(self) -> bool:
        """A live cap beneath a limit fixed at the start (MPS: the pinned memory limit, read once by
        the client, over PyTorch's live fraction): the try may hold the lower of the two."""
        return self.live and self.mode in FIXED_AT_START

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
        """What the placer keeps from newcomers above the reservation of a try this model holds,
        for the try's life (``TaskRequest.kept_margin_mib``, each tenant's own): its
        :meth:`margin_mib` under a fence, else None."""
        return self.margin_mib(margin_mib) if self.fenced else None

    def start_cap_mib(
        self,
        *,
        promise_mib: int,
        total_mib: int,
        reserve_mib: int = 0,
        co_tenants: Iterable[Tenant | tuple[int, int]] = (),
        exclusive: bool = False,
        margin_mib: int = 0,
    ) -> int | None:
        """The cap set when the try starts (None: unfenced).  Under a start-bound model (MPS
        ``live``) it is the limit fixed at the start, which the live cap moves beneath: the
        protective level plus ``margin_mib``, as every cap fixed at the start carries the margin
        (measured: without it, a grower whose co-tenant left is stopped at the level the
        co-tenant's departure freed; docs/isolation.md)."""
        if not self.fenced:
            return None
        if exclusive:
            return total_mib
        if self.rule is CapRule.PROMISE:
            return min(total_mib, promise_mib)
        cap = max(promise_mib, protective_cap_mib(total_mib, reserve_mib, co_tenants))
        return min(total_mib, cap + (max(0, margin_mib) if self.start_bound else 0))

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
        live = min(total_mib, max(promise_mib, protective_cap_mib(total_mib, reserve_mib, co_tenants)))
        if self.start_bound and start_cap_mib is not None:
            return min(start_cap_mib, live)  # the pinned limit fixed at the start still bounds it
        return live

    def describe(self) -> str:
        """How the mechanism under its rule holds a try, in words (logs, ``carma why``, results)."""
        mode = self.mode.value
        if not self.fenced:
            return "none (unfenced)"
        if self.start_bound:
            return (
                f"{mode}, pinned limit fixed at the try's start (the GPU less its co-tenants then, + margin); "
                f"PyTorch's fraction re-set beneath it as co-tenants come and go (within about {self.reset_s:g} s "
                "of a change)"
            )
        if self.live:
            return f"{mode}, cap re-set as co-tenants come and go (within about {self.reset_s:g} s of a change)"
        if self.rule is CapRule.PROTECTIVE:
            return f"{mode}, cap fixed at the try's start (the GPU less its co-tenants then)"
        return f"{mode}, cap fixed at the try's start (its promise: reservation + margin)"


# the cap rule of ``[carma] isolation_cap`` by default (carma_airflow/settings.py; measured per
# mechanism in bench/fencing.py, docs/isolation.md): live everywhere; under MPS the pinned limit
# fixed at the start at the protective level with the framework's live cap beneath it
DEFAULT_CAP_RULE = CapRule.LIVE


def default_rule(mode: IsolationMode) -> CapRule:
    """:data:`DEFAULT_CAP_RULE` as ``mode`` plays it (:meth:`FenceModel.of`)."""
    return FenceModel.of(mode, DEFAULT_CAP_RULE).rule


@dataclass(frozen=True, slots=True)
class Fence:
    """What one try is held to on each of its GPUs (same order as its CUDA_VISIBLE_DEVICES)."""

    mode: IsolationMode
    promise_mib: tuple[int, ...]
    cap_mib: tuple[int, ...]
    total_mib: tuple[int, ...]
    # the cap is re-set as co-tenants come and go (a cap file, a driver limit); ``cap_mib`` is
    # where it starts
    live: bool = False
    # a start-bound live fence (MPS live: FenceModel.start_bound): the limit fixed at the start
    # beneath which the live cap moves, per GPU, as the mechanism is set (MPS's pinned memory
    # limit); () where the fixed limit is ``cap_mib`` itself
    fixed_mib: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not (len(self.promise_mib) == len(self.cap_mib) == len(self.total_mib)):
            raise ValueError("a fence has one promise, cap and total per GPU")
        if self.fixed_mib and len(self.fixed_mib) != len(self.cap_mib):
            raise ValueError("a fence has one fixed limit per GPU, or none")

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
        if self.fixed_mib:
            fixed = ", ".join(f"{c} MiB" for c in self.fixed_mib)
            live += f", beneath a limit fixed at the start at {fixed}"
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
    "FIXED_AT_START",
    "PAST_CAP",
    "RESETTABLE",
    "RESET_S",
    "CapRule",
    "Fence",
    "FenceModel",
    "IsolationMode",
    "Tenant",
    "counted_mib",
    "default_rule",
    "fence_line",
    "promise_mib",
    "protective_cap_mib",
]
