"""What the executor has learned, held in memory so that no store read runs in the heartbeat.

Peak memory of earlier successful runs (per task, and per map index of a mapped task) is read
from the store once, when the executor starts, and kept up to date by the executor's own
writes (it is the one that records them).  How recent tries of a run ended (for the recovery
planner after a CUDA OOM) is kept the same way: tries this executor saw, and, from the store at
start, the tries an earlier executor saw.

Decision: a second scheduler writing peaks for the same tasks (Airflow HA) is seen by this one
at its next start, not at once; in exchange intake never waits for the database.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

PEAKS_KEPT = 5  # the estimator looks at the latest few
RECENT_TRIES_KEPT = 8


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

    def load(self, store: Store) -> None:
        """What the store knows: learned peaks, and how the recent tries of each run ended."""
        for dag_id, task_id, map_index, peak in store.recent_peaks():
            self.add_peak(dag_id, task_id, map_index, peak)
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

    # -- tries of a run ------------------------------------------------------------------------
    def add_try(self, family: Family, ended: EndedTry) -> None:
        self._tries.setdefault(family, deque(maxlen=RECENT_TRIES_KEPT)).append(ended)

    def tries(self, family: Family) -> list[EndedTry]:
        return list(self._tries.get(family, ()))


__all__ = ["EndedTry", "Family", "Learned"]
