"""Memory learned from earlier tries of the same task, as the executor learns it.

The executor (``carma_airflow/executor/learned.py``, ``intake.first_request``) keeps, per Airflow
task, the peaks its monitor saw of the latest successful tries and puts the ``history`` estimator
ahead of the configured one: a task seen before asks for the largest of its last 5 peaks plus
10 % (rounded up to 256 MiB), plus the placer's headroom.  A try that crashed with a CUDA OOM
teaches its own run's next try what it reached (the recovery planner, core/recovery.py), not the
task's history.  The simulator does the same per task type (the trace's task name): a try's peak
is what the simulated GPU held for it after its ramp, recorded when it ends successfully; the
catalogue's peak column is never read here.  A request's estimate is made when the try is
submitted, as the executor's intake does, so tries already waiting keep theirs.

``SimConfig.warm_runs`` (:mod:`carma_airflow.sim.days`): the store is not empty when the run
starts but holds what that many earlier replays of the same trace (same configuration) learned:
the case of a DAG that runs every day.  Memory carries over; activities, run times and the
interference fit too with ``SimConfig.warm_learning``, else they start afresh.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from carma_airflow.core.estimators import MemoryEstimator, make_estimator

if TYPE_CHECKING:
    from carma_airflow.sim.config import SimConfig

PEAKS_KEPT = 5  # as the executor's store keeps (executor/learned.py PEAKS_KEPT)
MAX_WARM_RUNS = 10


class LearnedPeaks:
    """Per task type, the peaks of its latest successful tries, oldest first."""

    def __init__(self, kept: int = PEAKS_KEPT) -> None:
        self.kept = kept
        self._peaks: dict[str, deque[int]] = {}

    def add(self, task: str, peak_mib: int) -> None:
        if peak_mib > 0:
            self._peaks.setdefault(task, deque(maxlen=self.kept)).append(peak_mib)

    def of(self, task: str) -> tuple[int, ...]:
        return tuple(self._peaks.get(task, ()))

    def copy(self) -> LearnedPeaks:
        out = LearnedPeaks(self.kept)
        out._peaks = {k: deque(v, maxlen=self.kept) for k, v in self._peaks.items()}
        return out

    def __len__(self) -> int:
        return len(self._peaks)


def learns_memory(estimator: str) -> bool:
    """Whether an estimator name puts learned peaks first (``history``, ``history+X``)."""
    return "history" in estimator.strip().lower().split("+")


def memory_estimator(config: SimConfig) -> MemoryEstimator:
    """The run's estimator; a learned estimate's margin reaches at most the largest GPU less the
    reserve, as the executor's (``executor/parts.py``)."""
    largest = max((g.memory_mib for g in config.gpus), default=0) - config.settings.reserve_mib
    return make_estimator(config.estimator, config.settings.floor_mib, largest if config.gpus else None)


__all__ = ["MAX_WARM_RUNS", "PEAKS_KEPT", "LearnedPeaks", "learns_memory", "memory_estimator"]
