"""What the executor has learned, held in memory so that no store read runs in the heartbeat.

Peak memory of earlier successful runs (per task, and per map index of a mapped task) is read
from the store once, when the executor starts, and kept up to date by the executor's own
writes (it is the one that records them).  How recent tries of a run ended (for the recovery
planner after a CUDA OOM) is kept the same way: tries this executor saw, and, from the store at
start, the tries an earlier executor saw.

The same holds for what issue 13 adds: each task's measured SM activity (per try), its solo run
times (tries that never shared a GPU, the baseline of a collocated try's stretch) and the
interference model fitted per GPU model from ended tries (persisted as the store document
``model:interference``).  A solo run time is kept with its try's activity (revision 0009), so a
restarted executor prices with the run times its tasks had (before, it learned them again after
every restart, and the completion-time policy priced nothing by time until it had).

Decision: a second scheduler writing peaks for the same tasks (Airflow HA) is seen by this one
at its next start, not at once; in exchange intake never waits for the database.  One exception:
the tries of a task instance whose next try this executor takes without knowing every try before
it (another scheduler ran one, Airflow HA; or its end reached the store after this executor last
read it) are read from the store then (:meth:`Learned.tries_for`), one indexed read per such try,
so that the recovery plan after a CUDA OOM (the GPU to avoid, the grown memory) and the count of
OOM tries follow the task instance, not the scheduler.

The tries kept in memory are a cache of the store, bounded: a task instance's go when a try of it
succeeds, and only the task instances that ended a try most recently are kept
(``TRIED_INSTANCES_KEPT``).  One that is not kept costs its next try a store read, nothing else.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carma_airflow.core.activity import ActivityEstimate, ActivitySample, estimate_activity
from carma_airflow.core.errors import CarmaError
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.model_speed import SoloRunTimes

if TYPE_CHECKING:
    from carma_airflow.store.records import PlacementRecord
    from carma_airflow.store.store import Store

log = logging.getLogger("carma_airflow.executor")

PEAKS_KEPT = 5  # the estimator looks at the latest few
RECENT_TRIES_KEPT = 8  # per task instance, the latest by try number
TRIED_INSTANCES_KEPT = 4096  # task instances whose ended tries are kept, the latest to end a try
ACTIVITIES_KEPT = 10  # core/activity.py looks at the last 10 tries
SOLO_KEPT = 10
MODEL_DOC = "model:interference"
# the placement policy gets what ended tries taught at most this often (:meth:`Learned.hand_over`)
HANDOVER_S = 30.0


@dataclass(frozen=True, slots=True)
class EndedTry:
    """How one try of a run ended, as the recovery planner needs it."""

    try_number: int
    outcome: str  # a TryOutcome value: success, failed, oom
    peak_mib: int | None
    estimate_mib: int
    gpu_uuids: tuple[str, ...]
    ran: bool = True  # False: closed without ever starting (it waited when its executor stopped)


Family = tuple[str, str, str, int]  # dag_id, task_id, run_id, map_index


class Learned:
    def __init__(self) -> None:
        self._peaks: dict[tuple[str, str, int | None], deque[int]] = {}
        self._tries: dict[Family, dict[int, EndedTry]] = {}  # by try number; in order of use (LRU)
        self._activity: dict[tuple[str, str], deque[ActivitySample]] = {}
        self._solo: dict[tuple[str, str], deque[float]] = {}
        # (task type, seconds, GPU model where known): what the next hand-over gives the policy
        self._new_solo: list[tuple[str, float, str | None]] = []
        # likewise the durations of first tries that ran shared all along: bounds of their runs alone
        # (core/policies/durations.py; kept in the store with the activity, read back at start)
        self._new_bounds: list[tuple[str, float, str | None, float | None]] = []
        # per task (``dag.task``) and GPU model, and the ratios between models (core/model_speed.py)
        self.by_model = SoloRunTimes()
        self.model = InterferenceModel()
        self._store: Store | None = None  # where tries_for reads the tries another executor ran
        self._handed: tuple[InterferenceModel, float] | None = None  # the policy's model, and when

    def load(self, store: Store) -> None:
        """What the store knows: learned peaks, activities, solo run times and the interference
        model, and how the recent tries of each run ended."""
        self._store = store
        for dag_id, task_id, map_index, peak in store.recent_peaks():
            self.add_peak(dag_id, task_id, map_index, peak)
        for dag_id, task_id, value, source, shared in store.recent_activity_samples():
            self.add_activity(dag_id, task_id, ActivitySample(value, source, shared))
        for dag_id, task_id, seconds in store.recent_solo_runs():
            self._solo.setdefault((dag_id, task_id), deque(maxlen=SOLO_KEPT)).append(seconds)
        on_model: dict[str, deque[tuple[float, str]]] = {}
        for dag_id, task_id, gpu_model, seconds in store.recent_solo_runs_by_model():
            self.by_model.add(f"{dag_id}.{task_id}", gpu_model, seconds)
            on_model.setdefault(f"{dag_id}.{task_id}", deque(maxlen=SOLO_KEPT)).append((seconds, gpu_model))
        # the policy's at the first hand-over: the kept ones only (each costs the policy a median),
        # with their GPU models where the store has them, so a restarted executor prices each model
        # on what the earlier one measured there (issue 44)
        for (d, t), runs in self._solo.items():
            kind = f"{d}.{t}"
            if kind in on_model:
                self._new_solo += [(kind, s, m) for s, m in on_model[kind]]
            else:
                self._new_solo += [(kind, s, None) for s in runs]
        # the bounds of runs alone that first tries shared all along gave (durations.py), likewise
        self._new_bounds += [(f"{d}.{t}", s, m, e) for d, t, m, s, e in store.recent_shared_runs()]
        doc = store.snapshots(MODEL_DOC).get(MODEL_DOC)
        if doc is not None:
            self.model = InterferenceModel.from_dict(doc[1])
        for rec in sorted(store.placements(limit=5000), key=lambda r: r.try_number):
            if rec.outcome.finished:
                self.add_try((rec.dag_id, rec.task_id, rec.run_id, rec.map_index), ended_try(rec))

    # -- memory ------------------------------------------------------------------------------
    def add_peak(self, dag_id: str, task_id: str, map_index: int | None, peak_mib: int) -> None:
        """A successful run's peak: for the task, and for its map index if it is mapped."""
        keys: list[tuple[str, str, int | None]] = [(dag_id, task_id, None)]
        if map_index is not None and map_index >= 0:
            keys.append((dag_id, task_id, map_index))
        for key in keys:
            self._peaks.setdefault(key, deque(maxlen=PEAKS_KEPT)).append(peak_mib)

    def peaks(self, dag_id: str, task_id: str, map_index: int | None = None) -> tuple[int, ...]:
        """The latest peaks, oldest first: of the task, or only of its ``map_index``."""
        return tuple(self._peaks.get((dag_id, task_id, map_index), ()))

    # -- activity and interference (issue 13) --------------------------------------------------
    def add_activity(self, dag_id: str, task_id: str, sample: ActivitySample) -> None:
        self._activity.setdefault((dag_id, task_id), deque(maxlen=ACTIVITIES_KEPT)).append(sample)

    def activity(self, dag_id: str, task_id: str, hint: float | None = None) -> ActivityEstimate:
        """The task's expected solo SM activity: its measured tries, the declared hint as a prior."""
        return estimate_activity(tuple(self._activity.get((dag_id, task_id), ())), hint)

    def activity_with(self, dag_id: str, task_id: str, running: ActivitySample, hint: float | None) -> ActivityEstimate:
        """As :meth:`activity`, with a running try's measurement so far counted as one more try
        (not kept: the try's own sample is added when it ends)."""
        return estimate_activity((*self._activity.get((dag_id, task_id), ()), running), hint)

    def hand_over(self, policy: object, now: float, every_s: float = HANDOVER_S) -> bool:
        """Give the placement policy the model and solo run times learned since the last hand-over
        (the first at once), at most once per ``every_s``; True if it did.

        Decision: each hand-over makes the policy predict every GPU afresh (its kept speeds and
        drain order rest on the model and the run times), so the pass after one costs what a new
        scheduler's first pass does (``bench/speed.py``: about twice a steady pass at 1,024 GPUs).
        At one hand-over per ended try, a large cluster, where tries end every second or so, would
        pay that on every heartbeat; one observation moves a fit of many little, so the policy
        decides with what was learned up to ``every_s`` ago."""
        handed = self._handed
        fresh = bool(self._new_solo or self._new_bounds)
        if handed is not None and ((handed[0] is self.model and not fresh) or now - handed[1] < every_s):
            return False
        use_model(policy, self.model)
        use_durations(policy, self)
        self._handed = (self.model, now)
        return True

    def add_solo(self, dag_id: str, task_id: str, seconds: float, gpu_model: str | None = None) -> None:
        self._solo.setdefault((dag_id, task_id), deque(maxlen=SOLO_KEPT)).append(seconds)
        self._new_solo.append((f"{dag_id}.{task_id}", seconds, gpu_model or None))
        if gpu_model:
            self.by_model.add(f"{dag_id}.{task_id}", gpu_model, seconds)

    def add_bound(
        self, dag_id: str, task_id: str, seconds: float, gpu_model: str | None = None, estimate: float | None = None
    ) -> None:
        """A first try of the task ran ``seconds`` shared all along: at most that long alone;
        ``estimate``: its run alone estimated from it (None: none)."""
        self._new_bounds.append((f"{dag_id}.{task_id}", seconds, gpu_model or None, estimate))

    def take_new_bounds(self) -> list[tuple[str, float, str | None, float | None]]:
        """The bounds of runs alone since the last call (:meth:`add_bound`), as :meth:`take_new_solos`."""
        taken, self._new_bounds = self._new_bounds, []
        return taken

    def take_new_solos(self) -> list[tuple[str, float, str | None]]:
        """The solo run times measured since the last call, by task type (``dag.task``), with the
        GPU model each ran on where known: what a policy that forecasts completion times learns
        durations from, per model (:func:`use_durations`)."""
        taken, self._new_solo = self._new_solo, []
        return taken

    def solo_seconds(self, dag_id: str, task_id: str) -> float | None:
        """The median run time of the task's tries that had their GPUs to themselves."""
        runs = self._solo.get((dag_id, task_id))
        return statistics.median(runs) if runs else None

    def solo_on(self, dag_id: str, task_id: str, gpu_model: str) -> float | None:
        """The baseline a try of the task that shared a GPU of ``gpu_model`` is timed against: its
        runs alone there (None where it ran alone only on other models), or, where it never ran
        alone on any other model, :meth:`solo_seconds`.  Decision (round 55): a whole try on a
        mixed fleet timed against another model's runs alone put that pair's speed ratio into the
        interference fit (an L4 try against its H100 runs reads as a stretch of the ratio; the
        simulator's H100 fit, fed such tries, scattered its residuals by 24)."""
        kind = f"{dag_id}.{task_id}"
        models = self.by_model.models_of(kind)
        if models <= {gpu_model}:
            return self.solo_seconds(dag_id, task_id)
        return self.by_model.median(kind, gpu_model)

    # -- tries of a run ------------------------------------------------------------------------
    def add_try(self, family: Family, ended: EndedTry) -> None:
        """A try of ``family`` ended.  A success ends the task instance's tries: what is kept of
        them goes (the next try a clear may bring reads them from the store)."""
        if ended.outcome == "success":
            self._tries.pop(family, None)
            return
        self._keep(family, (ended,))

    def tries(self, family: Family) -> list[EndedTry]:
        """The ended tries of ``family`` kept here, by try number."""
        return sorted(self._tries.get(family, {}).values(), key=lambda t: t.try_number)

    def tries_for(self, family: Family, try_number: int) -> list[EndedTry]:
        """The ended tries of ``family`` before ``try_number``, by try number.  Unless every one of
        tries 1 .. ``try_number`` - 1 is known here, they are read from the store first (one read):
        the store, not this executor's memory, holds a task instance's OOM tries and what they
        reached, whichever scheduler ran them and whenever their end was written."""
        kept = self._tries.get(family, {})
        known = sorted((t for t in kept.values() if t.try_number < try_number), key=lambda t: t.try_number)
        if all(n in kept for n in range(1, try_number)) or self._store is None:
            return known
        try:
            stored = self._store.tries_of(*family)
        except CarmaError as exc:
            log.warning(
                "carma store unreachable: try %d of %s is planned from what this executor saw (%s)",
                try_number,
                ".".join(str(p) for p in family),
                exc,
            )
            return known
        merged = {t.try_number: t for t in known}  # what this executor saw end itself stands
        for rec in stored:
            if rec.outcome.finished:
                merged.setdefault(rec.try_number, ended_try(rec))
        earlier = sorted((t for n, t in merged.items() if n < try_number), key=lambda t: t.try_number)
        if earlier:
            self._keep(family, earlier)  # the next try needs no read if this one ends here
        return earlier

    def _keep(self, family: Family, ended: Iterable[EndedTry]) -> None:
        """Keep ``ended`` with what is kept of ``family``: its latest ``RECENT_TRIES_KEPT`` tries,
        and ``family`` the most recently used of at most ``TRIED_INSTANCES_KEPT`` task instances."""
        kept = self._tries.pop(family, {})
        for t in ended:
            kept[t.try_number] = t
        if len(kept) > RECENT_TRIES_KEPT:
            kept = dict(sorted(kept.items())[-RECENT_TRIES_KEPT:])
        self._tries[family] = kept
        while len(self._tries) > TRIED_INSTANCES_KEPT:
            del self._tries[next(iter(self._tries))]  # the least recently used


def ended_try(rec: PlacementRecord) -> EndedTry:
    """How a stored try ended; one that never started (``started_at`` None) did not run."""
    ran = rec.started_at is not None
    return EndedTry(rec.try_number, rec.outcome.value, rec.peak_mib, rec.estimate_mib or 0, rec.gpu_uuids, ran)


def use_model(policy: object, model: InterferenceModel) -> None:
    """Hand the fitted model to a policy that predicts interference (core/policies/predictive.py)."""
    use = getattr(policy, "use_model", None)
    if use is not None:
        use(model)


def use_durations(policy: object, learned: Learned) -> None:
    """Hand the solo run times measured since the last call to a policy that forecasts completion
    times (core/policies/completion_time.py), as the simulator does when a job ends."""
    learn = getattr(policy, "learn_duration", None)
    for kind, seconds, gpu_model in learned.take_new_solos():
        if learn is not None:
            learn(kind, seconds, gpu_model)
    bound = getattr(policy, "learn_bound", None)
    for kind, seconds, gpu_model, estimate in learned.take_new_bounds():
        if bound is not None:
            bound(kind, seconds, gpu_model, estimate)


__all__ = ["EndedTry", "Family", "Learned", "ended_try", "use_durations", "use_model"]
