"""Which waiting try a fast idle GPU goes to, on a fleet of several GPU models (issue 44, item 4).

On a mixed fleet the default takes the fastest idle GPU first (:func:`~carma_airflow.core.scarce.speed_key`).
Once run times per model are known, two tries can gain very differently from the same fast model: one
runs 4x faster on an H100 than on a V100, another 1.1x (a memory-bound task on a faster-compute
model, or one whose measured ratios say so).  A pass decides its tries in the queue's order, so
without more the first try takes the H100 whatever it gains.  :class:`SpeedKeep` is asked, for each
idle GPU a try could take (through :meth:`ScarceKeep.kept <carma_airflow.core.scarce.ScarceKeep.kept>`):

* **faster elsewhere**: where the try's predicted run on another idle model that fits it is shorter
  than on this GPU's model by more than ``WAIT_MARGIN`` of it, by the policy's learned run times
  (not the spec sheets' prior, which orders every task alike and is the idle order already), this
  GPU is kept from it: it takes the other model's GPU, later in the idle order.  Within the margin
  the runs differ by less than a ratio learned from one task is sure of (round 53: with two models
  learned alike, 1.00x from one task, a 0.01 % difference sent resnet2 and Xception from an idle
  A100-80GB to the V100s, on ``bench/learning.py``'s held-out s105, day two);
* **kept for larger gains** (after Gavel's allocation by relative speed-up, greedily): where the
  tries still to be decided in this pass that gain more from this GPU's model than this one does
  (their predicted run on the best other idle model that fits over theirs on this model) ask for at
  least as many GPUs as there are idle GPUs of this model, this GPU is left to them and the try
  takes the next idle GPU in the order.

Where the pass prices slower idle GPUs (``price_slow_idle``, the default), a one-GPU try that
passes both is asked :meth:`SpeedKeep.slower`: whether another model of the fleet runs it faster.
If so the idle GPU is not taken but priced by the completion-time rule beside sharing the faster
models' GPUs and waiting for them (core/placement_pass.py), and the wait for a faster busy GPU below
is left to that pricing (it stays for the try the pass protects, and for multi-GPU tries).

Neither keeps a GPU from a try the keep has nothing to price by (no run times yet, or not in the
pass's queue), nor keeps the last idle model that fits it from a try (a try kept from one model is
never kept from its alternative).  The try the pass protects (past its starvation bound) is kept
only where that makes it finish sooner: for a faster idle model (it takes that GPU in the same
pass), or (a one-GPU try) to wait for a busy GPU of a faster model that drains and runs it sooner than it would
finish here; never for other tries' gains.  The GPU it waits for is :meth:`SpeedKeep.awaited`, which
the placer's starvation hold then holds (nothing new lands on it, so it drains).  Decision (issue 44):
before, a protected try took the first idle GPU whatever its model; on 4xA100-80GB + 4xT4 (``table``
speeds, s101, day two) an Inception past its bound took a T4 for 25,027 s where an A100 was
predicted at 7,325 s, and made the day's makespan 1.51x most-free-memory's.

Pure: the policy's predicted runs per model are asked through ``runs``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:
    from carma_airflow.core.gpu import GpuSpec
    from carma_airflow.core.policies.base import GpuFacts

# (task type, GPU model) -> predicted solo seconds on it, and whether that rests on run times (not the prior)
Runs = Callable[[TaskRequest, str], tuple[float, bool]]
Busy = tuple[float, str, int, str, int]  # a busy GPU: predicted drain (s), model, memory (MiB), uuid, index
WAIT_MARGIN = 0.1  # waiting for a faster model must beat running now by this share of the run here


class IdleIndex:
    """A pass's idle GPUs as the keeps count them: idle GPUs per size class and per model, and per
    model the usable free memory of its idle GPUs (sorted).  Made once per pass and told of each
    idle GPU a placement takes (:meth:`take`); ``version`` changes with it."""

    __slots__ = ("_frees", "_uuids", "per_class", "per_model", "size_class", "version")

    def __init__(self, idle: Iterable[GpuFacts], size_class: Callable[[GpuSpec], int]) -> None:
        self.size_class = size_class
        self.per_class: dict[int, int] = {}
        self.per_model: dict[str, int] = {}
        self._frees: dict[str, list[int]] = {}
        self._uuids: set[str] = set()
        self.version = 0
        for f in idle:
            spec = f.state.spec
            c = size_class(spec)
            self.per_class[c] = self.per_class.get(c, 0) + 1
            self.per_model[spec.name] = self.per_model.get(spec.name, 0) + 1
            self._frees.setdefault(spec.name, []).append(f.usable_free_mib)
            self._uuids.add(f.uuid)
        for frees in self._frees.values():
            frees.sort()

    def take(self, f: GpuFacts) -> None:
        """An idle GPU was placed on: it is idle no more (a GPU the index does not hold: nothing)."""
        if f.uuid not in self._uuids:
            return
        self._uuids.discard(f.uuid)
        spec = f.state.spec
        self.per_class[self.size_class(spec)] -= 1
        self.per_model[spec.name] -= 1
        frees = self._frees[spec.name]
        del frees[bisect_left(frees, f.usable_free_mib)]
        self.version += 1

    def at_least(self, size: int) -> int:
        """Idle GPUs of size class ``size`` or larger."""
        return sum(n for c, n in self.per_class.items() if c >= size)

    def fitting_models(self, need: int, count: int = 1) -> Iterator[str]:
        """The models with ``count`` idle GPUs or more of at least ``need`` MiB usable free each."""
        if count == 1:
            return (m for m, frees in self._frees.items() if frees and frees[-1] >= need)
        return (m for m, frees in self._frees.items() if len(frees) - bisect_left(frees, need) >= count)


class SpeedKeep:
    """One pass's tries still to decide and what each would gain per model (see the module doc)."""

    def __init__(
        self,
        queue: Iterable[tuple[TaskRequest, int]],
        runs: Runs,
        protected: str | None,
        busy: Callable[[], list[Busy]] | None = None,
        models: dict[str, int] | None = None,
    ) -> None:
        self.runs = runs
        # the fleet's models with their largest memory where a one-GPU try's slower idle GPU is priced
        # (:meth:`slower`; None: taken, and a try waits for a faster busy model only by :meth:`_waits`)
        self.models = models
        self.protected = protected
        self._busy = busy
        self._drains: list[Busy] | None = None  # the pass's busy GPUs by drain, asked once
        self._claimed: set[str] = set()  # busy GPUs a try of this pass was kept to wait for
        self._waiting: dict[str, str] = {}  # tries kept to wait for one, and why
        self._awaited: dict[str, str] = {}  # tries kept to wait, the busy GPU's uuid each waits for
        self.pending: dict[str, tuple[TaskRequest, int]] = {}
        for r, alike in queue:
            if not r.memory.whole_gpu:
                self.pending[r.key] = (r, alike)
        self._kept_from: dict[str, set[str]] = {}  # per try, the models it was kept from
        self._memo: dict[tuple[str, str], tuple[float, bool]] = {}
        self._current: tuple[str, tuple[TaskRequest, int]] | None = None  # the try being decided

    def _run(self, r: TaskRequest, model: str) -> tuple[float, bool]:
        key = (r.label, model)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.runs(r, model)
        return got

    def kept(self, f: GpuFacts, key: str, need: int, idle: IdleIndex) -> str | None:
        cur = self._current
        if cur is not None and cur[0] == key:
            got: tuple[TaskRequest, int] | None = cur[1]
        else:
            got = self.pending.pop(key, None)  # decided now: no longer a try still to come in this pass
            self._current = None if got is None else (key, got)
        if got is None:
            return None
        protected = key == self.protected
        r = got[0]
        if protected and r.gpus > 1:  # the hold takes whole GPU sets for it (core/hold_order.py)
            return None
        here = f.state.spec.name
        kept_from = self._kept_from.setdefault(key, set())
        # the other models with idle GPUs that fit it, as many as it asks for (this GPU's own model
        # is never an other): a 2-GPU try is not kept from two V100s for one idle H100
        others = {m for m in idle.fitting_models(need, r.gpus) if m != here and m not in kept_from}
        mine, sure = self._run(r, here)
        if (why := self._waiting.get(key)) is not None:  # kept to wait from a faster idle GPU already
            return why
        if (self.models is None or protected or r.gpus > 1) and (why := self._waits(r, here, need, mine)) is not None:
            self._waiting[key] = why
            return why
        if not others:
            return None
        best = min(others, key=lambda m: self._run(r, m)[0])
        alt, alt_sure = self._run(r, best)
        if not sure:
            return None
        if alt < (1.0 - WAIT_MARGIN) * mine and alt_sure:
            kept_from.add(here)  # it goes on to the other model's GPU in this pass
            return f"its predicted run alone is shorter on {best} ({alt:.0f} s against {mine:.0f} s here)"
        if protected:  # past its starvation bound: never kept for other tries' gains
            return None
        gain = alt / max(mine, 1e-9)
        supply = idle.per_model.get(here, 0)
        wanting = 0
        for other, alike in self.pending.values():
            if other.memory.mib > f.usable_free_mib or other.label == r.label:
                continue
            t_here, ok_here = self._run(other, here)
            t_alt, ok_alt = self._run(other, best)
            if ok_here and ok_alt and t_alt / max(t_here, 1e-9) > gain:
                wanting += other.gpus * alike
                if wanting >= supply:
                    kept_from.add(here)
                    return (
                        f"kept for {wanting} waiting GPU request(s) that gain more from {here} than this try "
                        f"({gain:.2f}x against {best})"
                    )
        return None

    def slower(self, r: TaskRequest, here: str, need: int) -> bool:
        """Whether one-GPU try ``r``'s predicted run alone on ``here`` is longer than on another model
        of the fleet with GPUs that hold ``need`` MiB, by more than ``WAIT_MARGIN`` of it: its idle
        GPU is then priced beside those models' collocations and waiting for them (placement_pass)
        instead of taken unpriced.

        Decision (round 53): the margin.  Without it a model predicted a hair faster made the idle
        GPU a priced option, and the rule weighs an idle GPU's GPU-seconds against sharing: on
        2xA100-80GB + 2xV100-32GB (``bench/learning.py``'s held-out s104, the ``pairs`` truth, speeds
        alike) day two had learned the two models alike (1.00x, from one task), and vgg2's idle
        A100 was priced against sharing a V100 predicted to run it 0.01 % faster.  Within the
        margin the runs differ by less than a ratio learned from one task is sure of (5 %), and
        the idle GPU is taken as on one model."""
        models = self.models
        if models is None or r.gpus != 1 or r.key == self.protected:
            return False
        bar = (1.0 - WAIT_MARGIN) * self._run(r, here)[0]
        return any(m != here and mib >= need and self._run(r, m)[0] < bar for m, mib in models.items())

    def faster_than(self, r: TaskRequest, here: str) -> Callable[[str], bool]:
        """Whether try ``r`` is predicted to run faster alone on a model than on ``here``, by more
        than ``WAIT_MARGIN`` of its run here (as :meth:`slower` asks)."""
        bar = (1.0 - WAIT_MARGIN) * self._run(r, here)[0]
        return lambda model: model != here and self._run(r, model)[0] < bar

    def awaited(self, key: str) -> str | None:
        """The uuid of the busy GPU the try ``key`` was kept to wait for in this pass, or None."""
        return self._awaited.get(key)

    def _waits(self, r: TaskRequest, here: str, need: int, mine: float) -> str | None:
        """Why the try waits for a busy GPU of a faster model rather than run here now: the soonest
        such GPU that could hold it (not counted on by an earlier try of the pass) drains, and the
        try runs there, sooner than it would finish here by ``WAIT_MARGIN`` of its run here."""
        key = r.key
        if self._busy is None:
            return None
        if self._drains is None:
            self._drains = sorted(self._busy())
        for drain, model, total, uuid, index in self._drains:
            if drain >= mine:
                break
            if model == here or total < need or uuid in self._claimed:
                continue
            there = self._run(r, model)[0]
            if drain + there < (1.0 - WAIT_MARGIN) * mine:
                self._claimed.add(uuid)
                self._awaited[key] = uuid
                return (
                    f"waits for GPU {index} ({model}): drains in {drain:.0f} s, then {there:.0f} s alone "
                    f"against {mine:.0f} s here"
                )
        return None


__all__ = ["WAIT_MARGIN", "Busy", "IdleIndex", "Runs", "SpeedKeep"]
