"""Keeping scarce GPUs for the tries that need them, on a cluster of GPUs of several sizes.

On a cluster of one GPU model every idle GPU is as good as another and the placer takes the first
(lowest index).  On a mixed cluster the first idle GPU may be the only kind some waiting tries can
use (an 80 GB A100 beside 32 GB V100s): a small try that takes it leaves a large one waiting, or
crowding onto a busy 80 GB GPU, while a V100 sits idle.  Two rules for a policy that keeps scarce
GPUs (:meth:`Policy.keeps_scarce_gpus`: the default policy, unless ``CompletionSettings.keep_scarce``
is off):

* **the least capable idle GPU first** (:func:`capability_key`): among idle GPUs the order is by
  memory (in 4 GiB classes: an H100-80GB's 81,559 MiB and an A100-80GB's 81,920 are one class),
  then throughput and bandwidth, then index.  A try takes the smallest, slowest GPU that fits it;
  on a cluster of one model this is the index order, so nothing moves there.
* **a larger idle GPU kept for the waiting tries only it can hold** (:class:`ScarceKeep`): a try
  that fits a smaller class of GPU does not take an idle GPU of a larger class while the tries
  waiting in the same pass that only that class (or larger) can hold are at least as many as the
  idle GPUs of that class or larger.  It shares a GPU, or waits, instead; the large try takes the
  GPU later in the same pass.  Counted per GPU a try asks for.  Never for the request the pass
  protects (past its starvation bound).

Pure: the placer builds a keep from its pass's queue; nothing here reads a clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from carma_airflow.core.engine_filters import KEPT, KEPT_FASTER
from carma_airflow.core.filtering import Rejection
from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.speed import spec_time_ratio
from carma_airflow.core.speed_keep import Busy, IdleIndex, SpeedKeep
from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:  # policies import this module; it needs their types only
    from carma_airflow.core.placement_pass import PlacementPass
    from carma_airflow.core.policies.base import GpuFacts, Policy
    from carma_airflow.core.policies.completion_time import CompletionTime

Waiting = Iterable[tuple[TaskRequest, int]]  # a pass's waiting tries: a try and how many alike (a group)
Req = TaskRequest | None

CLASS_MIB = 4096  # GPUs whose memory is the same in these units are one size class


def size_class(spec: GpuSpec) -> int:
    """The GPU's size class: its memory in 4 GiB units, rounded."""
    return round(spec.memory_mib / CLASS_MIB)


def capability_key(spec: GpuSpec, index: int) -> tuple[float, ...]:
    """Order among idle GPUs, least capable first: size class, throughput, bandwidth, index."""
    return (float(size_class(spec)), spec.dense_tflops, spec.memory_gbs, float(index))


# an A100-40GB's sheet: any fixed one orders the models alike
SPEED_REFERENCE = GpuSpec("reference", 0, 0, 0.0, 0.0, 312.0, 1555.0)


def speed_key(spec: GpuSpec, index: int) -> tuple[float, ...]:
    """Order among idle GPUs, fastest first: the spec sheets' time ratio (half compute, half memory
    traffic: :func:`~carma_airflow.core.speed.spec_time_ratio` against a fixed sheet), then
    :func:`capability_key` (on one model: the index order)."""
    return (round(spec_time_ratio(spec, SPEED_REFERENCE), 6), *capability_key(spec, index))


def is_mixed(facts: Iterable[GpuFacts]) -> bool:
    """Whether the GPUs are of more than one size class."""
    first: int | None = None
    for f in facts:
        c = size_class(f.state.spec)
        if first is None:
            first = c
        elif c != first:
            return True
    return False


@dataclass(slots=True)
class ScarceKeep:
    """One pass's waiting tries by the memory each asks per GPU, and the cluster's size classes.

    ``room``: per size class the most usable memory a GPU of it offers when idle (the largest seen).
    ``waiting``: per-GPU need (MiB) -> GPUs the waiting tries of that need ask for, less those placed.
    ``needs``: every waiting try's need, sorted (for :meth:`kept`'s memo).
    """

    room: dict[int, int]
    waiting: Counter[int] = field(default_factory=Counter)
    protected: str | None = None
    speed: SpeedKeep | None = None  # on GPUs of several models, once run times are known (core/speed_keep.py)
    needs: tuple[int, ...] = ()
    # one decision's verdicts (its try, the idle GPUs it saw) by what they read of a GPU
    _memo_of: tuple[str, IdleIndex, int] | None = None
    _memo: dict[tuple[str, int, int], Rejection | None] = field(default_factory=dict)

    @classmethod
    def of(cls, facts: Sequence[GpuFacts], queue: Waiting, protected: str | None) -> ScarceKeep:
        """``queue``: the waiting tries, each with how many alike tries it stands for (1, or its group's
        size); a try whose estimator gave up (a whole GPU) has no need to count."""
        room: dict[int, int] = {}
        for f in facts:
            if f.idle:
                c = size_class(f.state.spec)
                room[c] = max(room.get(c, 0), f.usable_free_mib)
        for f in facts:  # a class with no idle GPU now: its total, as a bound
            c = size_class(f.state.spec)
            room.setdefault(c, f.state.spec.memory_mib)
        waiting: Counter[int] = Counter()
        for r, alike in queue:
            if not r.memory.whole_gpu:
                waiting[r.memory.mib] += r.gpus * alike
        return cls(room, waiting, protected, needs=tuple(sorted(waiting)))

    def placed(self, mib: int, gpus: int) -> None:
        """A try of this need was placed in the pass: it waits no more."""
        left = self.waiting.get(mib, 0) - gpus
        if left > 0:
            self.waiting[mib] = left
        else:
            self.waiting.pop(mib, None)
        self._memo_of = None

    def kept(self, f: GpuFacts, key: str, need: int, idle: IdleIndex) -> Rejection | None:
        """Why idle GPU ``f`` is kept from request ``key`` (asking ``need`` MiB per GPU), or None:
        kept for larger tries (:data:`~carma_airflow.core.engine_filters.KEPT`) or by the tries'
        speeds (:data:`~carma_airflow.core.engine_filters.KEPT_FASTER`).

        ``idle``: the pass's idle GPUs now.  A GPU is read for its model, its size and which waiting
        tries' needs its free memory holds, so one decision's scan over hundreds of idle GPUs asks
        the rules once per model and band of free memory (the same verdicts, kept)."""
        if key == self.protected:  # past its starvation bound: kept only where it finishes sooner
            why = None if self.speed is None else self.speed.kept(f, key, need, idle)
            return None if why is None else KEPT_FASTER.rejection(why)
        memo_of = self._memo_of
        if memo_of is None or memo_of[0] != key or memo_of[1] is not idle or memo_of[2] != idle.version:
            self._memo_of = (key, idle, idle.version)
            self._memo = {}
        spec = f.state.spec
        band = (spec.name, spec.memory_mib, bisect_right(self.needs, f.usable_free_mib))
        if band in self._memo:
            return self._memo[band]
        got: Rejection | None = None
        if (why := self._kept_by_size(f, need, idle)) is not None:
            got = KEPT.rejection(why)
        elif self.speed is not None and (why := self.speed.kept(f, key, need, idle)) is not None:
            got = KEPT_FASTER.rejection(why)
        self._memo[band] = got
        return got

    def _kept_by_size(self, f: GpuFacts, need: int, idle: IdleIndex) -> str | None:
        own = size_class(f.state.spec)
        below = [r for c, r in self.room.items() if c < own]
        if not below:
            return None
        smaller = max(below)
        if need > smaller:
            return None  # only this class or larger holds the request itself
        only_large = sum(g for mib, g in self.waiting.items() if smaller < mib <= f.usable_free_mib)
        if only_large == 0:
            return None
        supply = idle.at_least(own)
        if only_large < supply:
            return None
        return (
            f"kept for {only_large} waiting GPU request(s) that only a GPU of this size can hold "
            f"(a smaller GPU holds at most {smaller} MiB)"
        )


def _busy(facts: Sequence[GpuFacts], pricer: CompletionTime) -> Callable[[], list[Busy]]:
    """The pass's GPUs with tenants, each with its predicted drain (asked when first needed)."""

    def busy() -> list[Busy]:
        if not pricer.forecast.timed():
            return []
        return [
            (pricer.drained(f), f.state.spec.name, f.state.spec.memory_mib, f.uuid, f.index)
            for f in facts
            if f.tenants > 0 and not f.exclusive_tenant
        ]

    return busy


class ScarceKeeper:
    """The placer's: gives each pass of a policy that keeps scarce GPUs, on GPUs of several sizes, its
    :class:`ScarceKeep` (whether the GPUs are mixed is known per pools object: the placer's pools
    are kept from pass to pass while the GPUs stay the same)."""

    def __init__(self) -> None:
        self._mixed: tuple[object, bool, bool] | None = None  # (pools, several sizes, several models)
        self._sizes: tuple[object, dict[str, int]] | None = None  # (pools, the largest GPU per model)

    def _models(self, base: object, facts: Iterable[GpuFacts]) -> dict[str, int]:
        """Per GPU model of the pools' GPUs (``facts``) its largest memory (MiB), kept with the pools."""
        if self._sizes is None or self._sizes[0] is not base:
            sizes: dict[str, int] = {}
            for f in facts:
                spec = f.state.spec
                sizes[spec.name] = max(sizes.get(spec.name, 0), spec.memory_mib)
            self._sizes = (base, sizes)
        return self._sizes[1]

    def keep(self, state: PlacementPass, policy: Policy, queue: Waiting, protected: Req) -> PlacementPass:
        base = state.base
        pricer = policy.pricer()
        if self._mixed is None or self._mixed[0] is not base:
            models = tuple(sorted({f.state.spec.name for f in base.facts}))
            self._mixed = (base, is_mixed(base.facts), len(models) > 1)
            if pricer is not None:  # the GPUs' models, told as they change: a mixed fleet is priced per model
                pricer.see_fleet(models)
        if not policy.keeps_scarce_gpus():
            return state
        _, sizes, several = self._mixed
        runs = pricer.run_on if pricer is not None and several and pricer.speed_keeps() else None
        if sizes or runs is not None:
            key = None if protected is None else protected.key
            if runs is not None:
                queue = list(queue)
            keep = state.keep = ScarceKeep.of(state.facts, queue, key)
            if runs is not None and pricer is not None:
                if protected is not None and all(r.key != protected.key for r, _ in queue):
                    queue = [*queue, (protected, 1)]  # a deep queue's groups give their heads only
                keep.speed = SpeedKeep(
                    queue,
                    runs,
                    key,
                    _busy(state.facts, pricer) if pricer.settings.waits else None,
                    self._models(base, base.facts) if pricer.settings.price_slow_idle else None,
                )
        return state


__all__ = [
    "CLASS_MIB",
    "IdleIndex",
    "Req",
    "ScarceKeep",
    "ScarceKeeper",
    "Waiting",
    "capability_key",
    "is_mixed",
    "size_class",
    "speed_key",
]
