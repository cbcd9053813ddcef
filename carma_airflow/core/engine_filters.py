"""The per-try checks the placement engine writes out in its scans, as filters that state their
rejections: the memory fit, GPUs held for a starved try, a try that needs an idle GPU, idle GPUs
kept for larger tries.

A scan runs them by the thousand per pass, so it tests their conditions inline and records only
(GPU, reason); the rejection with its numbers is made here, for the decisions that keep their
reasons (:func:`carma_airflow.core.reasons.scan_verdicts`).  The scans' order, after the policy's
own per-try filters (the GPU model): on an idle GPU the starvation hold, the memory fit, the kept
larger GPUs; on a GPU with tenants the starvation hold, a try that needs an idle GPU, the memory
fit, the policy's refusal (:meth:`~carma_airflow.core.policies.base.Policy.refuses`).  Each
filter's :meth:`check` is the same test on its own: tests/core/test_filters.py holds the scans'
rejections to the filters asked one by one.
"""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.task import TaskRequest


class MemoryFit(Filter):
    """The try's memory on the GPU, less the reserve: on a GPU with tenants its estimate plus
    ``headroom_mib`` (the paper's margin), on an idle GPU its estimate (a try whose estimator gave
    up takes a whole idle GPU: no memory check there)."""

    name = "memory-fit"
    reason = Reason.MEMORY
    per_try = True

    def __init__(self, headroom_mib: int) -> None:
        self.headroom_mib = headroom_mib

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        shared = not facts.idle
        if not shared and request.memory.whole_gpu:
            return None
        need = request.memory.filter_mib(self.headroom_mib) if shared else request.memory.mib
        return None if need <= facts.usable_free_mib else self.rejection(facts, need, shared)

    @classmethod
    def rejection(cls, facts: GpuFacts, need: int, shared: bool) -> Rejection:
        """The rejection of a GPU that lacks ``need`` usable MiB (``shared``: with headroom)."""
        form = "{have} usable < {requested} (estimate + headroom)" if shared else "{have} usable < {requested} needed"
        return Rejection(cls.name, cls.reason, form, "MiB", need, facts.usable_free_mib, facts.state.spec.memory_mib)


class HeldForStarved(Filter):
    """GPUs held for a try past its starvation bound (the queue's reservations, by uuid)."""

    name = "starvation-hold"
    reason = Reason.RESERVED
    per_try = True

    def __init__(self, reserved: frozenset[str] = frozenset()) -> None:
        self.reserved = reserved

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return self.rejection() if facts.uuid in self.reserved else None

    def rejection(self) -> Rejection:
        return Rejection(self.name, self.reason, "held for a task past its starvation bound")


class NeedsIdle(Filter):
    """A try that must have its GPUs to itself (asked exclusive, or a whole GPU) skips GPUs with tenants."""

    name = "needs-idle"
    reason = Reason.BUSY
    per_try = True

    def __init__(self, whole_gpu_too: bool = True) -> None:
        self.whole_gpu_too = whole_gpu_too  # a memory-aware policy gives a try without an estimate a whole GPU

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        needs = request.exclusive or (request.memory.whole_gpu and self.whole_gpu_too)
        return None if facts.idle or not needs else self.rejection(facts)

    def rejection(self, facts: GpuFacts) -> Rejection:
        return Rejection(
            self.name,
            self.reason,
            "has {have} tenant(s); task needs an idle GPU",
            "tenants",
            have=facts.tenants,
            limit=0,
        )


class KeptForLarger(Filter):
    """An idle GPU kept for waiting tries only its size holds (core/scarce.py decides; its text says why)."""

    name = "kept-for-larger"
    reason = Reason.KEPT
    per_try = True

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return None  # decided by the pass's ScarceKeep, which knows the queue

    def rejection(self, why: str | None = None) -> Rejection:
        if why is None:
            return Rejection(self.name, self.reason, "kept for waiting tasks that need a GPU of its size")
        return Rejection.said(self.name, self.reason, why)


class KeptForFaster(Filter):
    """An idle GPU kept from a try by what the tries' predicted runs on each GPU model say
    (core/speed_keep.py decides; its text says why)."""

    name = "kept-for-faster"
    reason = Reason.KEPT_FASTER
    per_try = True

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return None  # decided by the pass's SpeedKeep, which knows the queue and the runs per model

    def rejection(self, why: str | None = None) -> Rejection:
        if why is None:
            return Rejection(self.name, self.reason, "kept for a faster GPU model or for tasks that gain more from it")
        return Rejection.said(self.name, self.reason, why)


HELD = HeldForStarved()
NEEDS_IDLE = NeedsIdle()
KEPT = KeptForLarger()
KEPT_FASTER = KeptForFaster()

__all__ = ["HELD", "KEPT", "NEEDS_IDLE", "HeldForStarved", "KeptForLarger", "MemoryFit", "NeedsIdle"]
