"""Solo run times per task and GPU model, and the speed ratios between GPU models learned from them.

A task's solo run time is measured on the GPU model it ran on.  On a fleet of several models the
placer needs it on the others too.  Per pair of models ``(a, b)`` the *time ratio* ``t_a / t_b``
is learned from the tasks measured alone on both: the median of their per-task ratios (each task's
median run on each model), taken in logs, with a 90 % interval from their spread (a t-like
``1.645 x sd / sqrt(n)`` around the median, at least ``MIN_HALF_LOG`` wide).  Until a pair has
such a task, its ratio is the spec sheets' (:func:`~carma_airflow.core.speed.spec_time_ratio`, half
compute, half memory traffic) with the interval the spec sheets allow (every compute share between
``LOW_SHARE`` and ``HIGH_SHARE``).

A task measured on model ``b`` is predicted on ``a`` as its median there times the pair's ratio,
from the model it ran on most; a task measured on ``a`` itself keeps its own median.  The ratio a
*new* task is priced at is the pair's expectation for one task, not the median over the tasks: the
tasks' log ratios spread (a memory-bound task gains nothing from a faster-compute model, a
compute-bound one gains the whole factor), so one task's ratio is log-normal around the median with
that spread, and its expected run is the median times ``exp(sd^2 (1 + 1/n) / 2)`` (``n`` tasks
measured on both: the median's own uncertainty too); its 90 % range is the
prediction interval for one task (``1.645 x sd x sqrt(1 + 1/n)``), not the median's.

Decision (issue 44): the completion-time rule sums completion times, which are linear in a run, so
a run is priced at its expectation.  With the median, a type whose ratio lies far out (Inception on
a T4 beside an A100 under the ``table`` speeds: 7.1x, where the pair's median over the measured types
was 1.6x) was priced at a fraction of its run and took the slow GPU rather than wait for the fast
one (4xA100-80GB + 4xT4, s101: a 25,000 s run that set the day's makespan at 1.62x
most-free-memory's).

Pure: the executor feeds it from the store's rows (``carma_activity_history.gpu_model``), the
simulator from ended tries.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

from carma_airflow.core.gpu import GPU_CATALOGUE, GpuSpec
from carma_airflow.core.speed import spec_time_ratio

KEPT = 20  # solo runs kept per task and model (the newest)
MIN_HALF_LOG = math.log(1.05)  # a learned interval is at least +-5 %
LOW_SHARE, HIGH_SHARE = 0.1, 0.9  # the compute shares the prior's interval spans
Z90 = 1.645


@dataclass(frozen=True, slots=True)
class PairRatio:
    """How much longer a task runs on ``slow`` than on ``fast`` (``ratio`` >= 1 unless learned otherwise).

    ``source``: ``learned`` (from ``tasks`` tasks measured on both) or ``spec`` (the prior).
    ``spread``: the standard deviation of the tasks' log ratios (0 for the prior and for one task):
    :meth:`one_task` prices a task not measured on both from it."""

    slow: str
    fast: str
    ratio: float
    low: float
    high: float
    tasks: int
    source: str
    spread: float = 0.0

    def one_task(self) -> tuple[float, float, float]:
        """(expected, low, high) ratio of one task not measured on both: log-normal around the
        median with the tasks' spread (and the median's own uncertainty), its 90 % prediction
        interval at least as wide as the median's."""
        if self.source != "learned" or self.spread <= 0.0:
            return self.ratio, self.low, self.high
        var = self.spread**2 * (1.0 + 1.0 / self.tasks)
        half = Z90 * math.sqrt(var)
        low = min(self.low, self.ratio * math.exp(-half))
        high = max(self.high, self.ratio * math.exp(half))
        return self.ratio * math.exp(var / 2.0), low, high

    def text(self) -> str:
        how = f"learned from {self.tasks} task(s) run on both" if self.source == "learned" else "spec-sheet prior"
        return (
            f"{self.slow} vs {self.fast}: {self.ratio:.2f}x the run time "
            f"(90 % range {self.low:.2f}-{self.high:.2f}; {how})"
        )


@dataclass(frozen=True, slots=True)
class PredictedRun:
    """A task's predicted solo run on one model: seconds, its 90 % range, and from what."""

    model: str
    seconds: float
    low: float
    high: float
    source: str  # "measured" (on this model), "learned" or "spec" (moved by a pair's ratio)


def _spec(name: str) -> GpuSpec | None:
    return GPU_CATALOGUE.get(name.strip().lower())


def prior_ratio(slow: str, fast: str) -> PairRatio:
    """The spec sheets' time ratio of ``slow`` over ``fast``, with the range of compute shares."""
    a, b = _spec(slow), _spec(fast)
    if a is None or b is None:  # a model the catalogue lacks: alike, and unsure
        return PairRatio(slow, fast, 1.0, 0.5, 2.0, 0, "spec")
    ends = sorted((spec_time_ratio(a, b, LOW_SHARE), spec_time_ratio(a, b, HIGH_SHARE)))
    return PairRatio(slow, fast, spec_time_ratio(a, b), ends[0], ends[1], 0, "spec")


class SoloRunTimes:
    """Solo run times per (task, GPU model), the newest ``KEPT`` of each."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], deque[float]] = {}
        self._models: dict[str, set[str]] = {}

    def add(self, task: str, model: str, seconds: float) -> None:
        if not (math.isfinite(seconds) and seconds > 0):
            return
        self._runs.setdefault((task, model), deque(maxlen=KEPT)).append(seconds)
        self._models.setdefault(task, set()).add(model)

    def tasks(self) -> list[str]:
        """The tasks with a run on some model, sorted."""
        return sorted(self._models)

    def models_of(self, task: str) -> frozenset[str]:
        """The models the task ran alone on."""
        return frozenset(self._models.get(task, ()))

    def models(self) -> list[str]:
        return sorted({m for ms in self._models.values() for m in ms})

    def median(self, task: str, model: str) -> float | None:
        runs = self._runs.get((task, model))
        return statistics.median(runs) if runs else None

    def ratio(self, slow: str, fast: str) -> PairRatio:
        """The learned time ratio of ``slow`` over ``fast`` (the prior until a task ran on both)."""
        if slow == fast:
            return PairRatio(slow, fast, 1.0, 1.0, 1.0, 0, "learned")
        logs = []
        for task, ms in self._models.items():
            if slow in ms and fast in ms:
                a, b = self.median(task, slow), self.median(task, fast)
                if a is not None and b is not None:
                    logs.append(math.log(a / b))
        if not logs:
            return prior_ratio(slow, fast)
        mid = statistics.median(logs)
        spread = statistics.stdev(logs) if len(logs) > 1 else 0.0
        half = max(MIN_HALF_LOG, Z90 * spread / math.sqrt(len(logs)))
        if len(logs) == 1:  # one task says little of the others: at least the prior's width
            prior = prior_ratio(slow, fast)
            half = max(half, math.log(max(prior.high / prior.ratio, prior.ratio / prior.low)))
        mid_ratio, low, high = math.exp(mid), math.exp(mid - half), math.exp(mid + half)
        return PairRatio(slow, fast, mid_ratio, low, high, len(logs), "learned", spread)

    def ratios(self) -> list[PairRatio]:
        """Every pair of models seen, slower (by ratio) first in each."""
        out = []
        models = self.models()
        for i, a in enumerate(models):
            for b in models[i + 1 :]:
                r = self.ratio(a, b)
                out.append(r if r.ratio >= 1.0 else self.ratio(b, a))
        return out

    def predict(self, task: str, model: str) -> PredictedRun | None:
        """The task's solo run on ``model``: its own median there, else moved from the model it ran on
        most by that pair's ratio (its expectation for one task, :meth:`PairRatio.one_task`); None
        where it never ran alone."""
        own = self.median(task, model)
        if own is not None:
            return PredictedRun(model, own, own, own, "measured")
        seen = self._models.get(task)
        if not seen:
            return None
        base = max(sorted(seen), key=lambda m: len(self._runs[(task, m)]))
        t = self.median(task, base)
        assert t is not None
        r = self.ratio(model, base)
        expected, low, high = r.one_task()
        return PredictedRun(model, t * expected, t * low, t * high, r.source)


def duration_text(seconds: float) -> str:
    """Seconds as `carma why` prints a run: s under 2 min, min under 2 h, else h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def predicted_line(runs: SoloRunTimes, task: str, models: list[str] | None = None) -> str | None:
    """``carma why``'s line for a mixed fleet: the task's predicted solo run on each model (``models``, else
    every model with a solo run), with its range and source; None on one model or where it never ran alone."""
    models = runs.models() if models is None else models
    if len(models) < 2:
        return None
    got = [p for m in models if (p := runs.predict(task, m)) is not None]
    if not got:
        return None
    how = {"measured": "measured", "learned": "learned ratio", "spec": "spec-sheet ratio"}
    dur = duration_text
    parts = [
        f"{p.model} {dur(p.seconds)}"
        + (f" ({how[p.source]})" if p.source == "measured" else f" ({dur(p.low)}-{dur(p.high)}, {how[p.source]})")
        for p in sorted(got, key=lambda p: p.seconds)
    ]
    return "predicted run alone by GPU model: " + "; ".join(parts)


__all__ = ["KEPT", "PairRatio", "PredictedRun", "SoloRunTimes", "duration_text", "predicted_line", "prior_ratio"]
