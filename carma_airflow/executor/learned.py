"""What the executor has learned, held in memory so that no store read runs in the heartbeat.

Peak memory of earlier successful runs (per task, and per map index of a mapped task) is read
from the store once, when the executor starts, and kept up to date by the executor's own
writes (it is the one that records them).  How recent tries of a run ended (for the recovery
planner after a CUDA OOM) is kept the same way: tries this executor saw, and, from the store at
start, the tries an earlier executor saw.

The same holds for what issue 13 adds: each task's measured SM activity (per try), its solo run
times (tries that never shared a GPU, the baseline of a collocated try's stretch) and the
interference model fitted per GPU model from ended tries (persisted as the store document
``model:interference``).  Solo run times are not persisted: they are learned again after a
restart, while the fitted model, which took many tries to learn, is kept.

Decision: a second scheduler writing peaks for the same tasks (Airflow HA) is seen by this one
at its next start, not at once; in exchange intake never waits for the database.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carma_airflow.core.activity import ActivityEstimate, ActivitySample, estimate_activity
from carma_airflow.core.interference import InterferenceModel

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

PEAKS_KEPT = 5  # the estimator looks at the latest few
RECENT_TRIES_KEPT = 8
ACTIVITIES_KEPT = 10  # core/activity.py looks at the last 10 tries
SOLO_KEPT = 10
MODEL_DOC = "model:interference"


@dataclass(frozen=True, slots=True)
class EndedTry:
    """How one try of a run ended, as the recovery planner needs it."""

    try_number: int
    outcome: str  # a TryOutcome value: success, failed, oom
    peak_mib: int | None
    estimate_mib: int
    gpu_uuids: tuple[str, ...]


Family = tuple[str, str, str, int]  # dag_id, task_id, run_id, map_index


class Learned:
    def __init__(self) -> None:
        self._peaks: dict[tuple[str, str, int | None], deque[int]] = {}
        self._tries: dict[Family, deque[EndedTry]] = {}
        self._activity: dict[tuple[str, str], deque[ActivitySample]] = {}
        self._solo: dict[tuple[str, str], deque[float]] = {}
        self.model = InterferenceModel()

    def load(self, store: Store) -> None:
        """What the store knows: learned peaks, and how the recent tries of each run ended."""
        for dag_id, task_id, map_index, peak in store.recent_peaks():
            self.add_peak(dag_id, task_id, map_index, peak)
        for dag_id, task_id, value, source in store.recent_activities():
            self.add_activity(dag_id, task_id, ActivitySample(value, source))
        doc = store.snapshots(MODEL_DOC).get(MODEL_DOC)
        if doc is not None:
            self.model = InterferenceModel.from_dict(doc[1])
        for rec in sorted(store.placements(limit=5000), key=lambda r: r.try_number):
            if rec.outcome.finished:
                ended = EndedTry(rec.try_number, rec.outcome.value, rec.peak_mib, rec.estimate_mib or 0, rec.gpu_uuids)
                self.add_try((rec.dag_id, rec.task_id, rec.run_id, rec.map_index), ended)

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

    def add_solo(self, dag_id: str, task_id: str, seconds: float) -> None:
        self._solo.setdefault((dag_id, task_id), deque(maxlen=SOLO_KEPT)).append(seconds)

    def solo_seconds(self, dag_id: str, task_id: str) -> float | None:
        """The median run time of the task's tries that had their GPUs to themselves."""
        runs = self._solo.get((dag_id, task_id))
        return statistics.median(runs) if runs else None

    # -- tries of a run ------------------------------------------------------------------------
    def add_try(self, family: Family, ended: EndedTry) -> None:
        self._tries.setdefault(family, deque(maxlen=RECENT_TRIES_KEPT)).append(ended)

    def tries(self, family: Family) -> list[EndedTry]:
        return list(self._tries.get(family, ()))


def use_model(policy: object, model: InterferenceModel) -> None:
    """Hand the fitted model to a policy that predicts interference (core/policies/predictive.py)."""
    use = getattr(policy, "use_model", None)
    if use is not None:
        use(model)


__all__ = ["EndedTry", "Family", "Learned", "use_model"]
