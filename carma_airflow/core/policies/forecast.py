"""What the completion-time policy predicts with: a GPU's tenants as work left at predicted speeds.

A :class:`Forecast` turns a GPU's tenants and a newcomer into :class:`Occupant` rows (task
type, solo SM activity, solo seconds of work left) and predicts the speed of each occupant of a
set sharing one GPU.  :func:`finish_times` plays the set forward (the speeds re-predicted each
time one finishes), which gives each occupant's completion time from now.

:class:`LearnedForecast` is what the executor and the simulator's placer know: the interference
model learned per GPU model (:mod:`carma_airflow.core.interference`), the tasks' learned
activities, and per task type the solo run time of its earlier tries (:class:`DurationBook`; a
type without any: the median of the measured ones, or with ``pooled_runs`` its family's,
:mod:`carma_airflow.core.policies.durations`).
Its speeds are *cautious where the model is unsure*: each predicted speed is pulled toward the
low end of its prediction interval by one minus the prediction's confidence, so a collocation
the model knows well is scored near its point prediction and one it does not near its worst
case.  ``bench/oracle.py`` implements the same protocol from the simulator's truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from carma_airflow.core.activity import DEFAULT_ACTIVITY_SETTINGS, ActivitySettings, unknown_activity
from carma_airflow.core.interference import InterferenceFit, InterferenceModel
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.policies.durations import DurationBook
from carma_airflow.core.policies.predictive import task_type
from carma_airflow.core.task import TaskRequest

MIN_LEFT = 0.1  # a tenant past its measured run time counts this share of it (or of its age) still to do
MIN_SPEED = 1e-3


class Occupant(NamedTuple):
    """One try on a GPU as the forecast sees it; ``ref``: whatever a forecast keeps besides."""

    kind: str  # task type
    activity: float  # solo SM activity
    work: float  # solo seconds of work left
    ref: object = None


class Forecast(Protocol):
    """What the completion-time policy asks (see the module doc)."""

    def timed(self) -> bool:
        """True: work is in seconds (run times are known), so waiting can be priced; False:
        every try counts one unit of work and waiting is never chosen."""
        ...

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        """The GPU's tenants (and tries placed on it earlier in this pass) with their work left."""
        ...

    def newcomer(self, request: TaskRequest) -> Occupant:
        """The request as an occupant (its whole work left)."""
        ...

    def run_alone(self, request: TaskRequest) -> float:
        """The request's predicted run alone (its newcomer's work), without touching what the
        forecast keeps: the queue's rank asks it of waiting tries."""
        ...

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        """Speed relative to solo of each occupant of one GPU of model ``spec`` (the scoring speeds)."""
        ...


def finish_times(forecast: Forecast, spec: str, occupants: Sequence[Occupant]) -> list[float]:
    """Seconds from now until each occupant finishes, playing the GPU forward: speeds hold until
    the next one finishes, then the rest are re-predicted without it."""
    left = [max(0.0, o.work) for o in occupants]
    alive = list(range(len(occupants)))
    out = [0.0] * len(occupants)
    t = 0.0
    while alive:
        sp = forecast.speeds(spec, [occupants[i] for i in alive])
        best_j, best_dt = 0, float("inf")
        for j, i in enumerate(alive):
            dt = left[i] / max(MIN_SPEED, sp[j])
            if dt < best_dt:
                best_j, best_dt = j, dt
        t += best_dt
        for j, i in enumerate(alive):
            left[i] -= max(MIN_SPEED, sp[j]) * best_dt
        out[alive[best_j]] = t
        del alive[best_j]
    return out


class LearnedForecast:
    """The forecast from what is learned: the interference model, activities, solo run times."""

    def __init__(
        self,
        model: InterferenceModel | None = None,
        activity: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS,
        caution: float = 1.0,
        pooled_runs: bool = False,
    ) -> None:
        self.model = model if model is not None else InterferenceModel()
        self.durations = DurationBook(pooled=pooled_runs)  # pooled: run times of rare types by family
        self.caution = caution  # 0: point predictions; 1: pulled toward the low end by 1 - confidence
        self._prior = unknown_activity(activity).sm_activity
        self._activities: dict[str, float] = {}  # per task type, the last activity a request carried
        self._fits: dict[str, InterferenceFit] = {}
        self._memo: dict[tuple[object, ...], tuple[float, ...]] = {}
        # per GPU facts object: its occupants' (type, activity, expected work, placed at; None:
        # placed in this pass) and their speeds now; what moves with the clock is worked out per call
        self._rows: dict[int, tuple[GpuFacts, list[tuple[str, float, float, float | None]], Sequence[float]]] = {}
        self.version = 0  # moves when what the forecasts rest on moves (the model, an expectation)

    def use_model(self, model: InterferenceModel) -> None:
        if model is not self.model:
            self.model = model
            self._fits = {}
            self._memo = {}
            self._rows = {}
            self.version += 1

    def learn_duration(self, kind: str, seconds: float) -> None:
        """A try of ``kind`` that would have run ``seconds`` alone (measured alone, or its work
        over its speed alone)."""
        if self.durations.add(kind, seconds):
            self._rows = {}
            self.version += 1

    def timed(self) -> bool:
        return len(self.durations) > 0

    def _work(self, kind: str) -> float:
        got = self.durations.expected(kind)
        return 1.0 if got is None else got

    def _rows_of(self, facts: GpuFacts) -> tuple[list[tuple[str, float, float, float | None]], Sequence[float]]:
        got = self._rows.get(id(facts))
        if got is not None and got[0] is facts:
            return got[1], got[2]
        rows: list[tuple[str, float, float, float | None]] = []
        for t in facts.state.tenants:
            kind = task_type(t.label)
            act = t.activity.sm_activity if t.activity is not None else self._activities.get(kind, self._prior)
            rows.append((kind, act, self._work(kind), t.placed_at))
        for label in facts.joined or ():
            kind = task_type(label)
            rows.append((kind, self._activities.get(kind, self._prior), self._work(kind), None))
        sp = self.speeds(facts.state.spec.name, [Occupant(k, a, w) for k, a, w, _ in rows]) if rows else ()
        if len(self._rows) > 20_000:
            self._rows = {}
        self._rows[id(facts)] = (facts, rows, sp)  # the facts kept alive: their id stays theirs
        return rows, sp

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        rows, sp = self._rows_of(facts)
        if not rows:
            return []
        if not self.timed():
            return [Occupant(k, a, w) for k, a, w, _ in rows]
        # work left: the expectation less what it did since it started, at today's predicted speed
        left = self._left
        return [
            Occupant(k, a, left(k, w, 0.0 if p is None else max(0.0, now - p) * s))
            for (k, a, w, p), s in zip(rows, sp, strict=True)
        ]

    def _left(self, kind: str, expected: float, done: float) -> float:
        """Solo seconds left of a try that did ``done`` of an expected ``expected``.  Past its own
        type's measured run time: a tenth of the larger of the two; past a borrowed expectation (a
        type never measured): as much again as it did (a long-running try tends to run long)."""
        if done < expected:
            return max(expected - done, MIN_LEFT * expected)
        if self.durations.measured(kind):
            return MIN_LEFT * done
        return done

    def run_alone(self, request: TaskRequest) -> float:
        return self._work(task_type(request.label))

    def newcomer(self, request: TaskRequest) -> Occupant:
        kind = task_type(request.label)
        if request.activity is not None:
            act = self._activities[kind] = request.activity.sm_activity
        else:
            act = self._activities.get(kind, self._prior)
        return Occupant(kind, act, self._work(kind))

    def _fit(self, spec: str) -> InterferenceFit:
        fit = self._fits.get(spec)
        if fit is None:
            fit = self._fits[spec] = self.model.fit_for(spec)
        return fit

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        key = (spec, *((o.kind, o.activity) for o in occupants))
        got = self._memo.get(key)
        if got is not None:
            return got
        fit = self._fit(spec)
        acts = [o.activity for o in occupants]
        kinds = [o.kind for o in occupants]
        out = []
        for i, o in enumerate(occupants):
            p = fit.predict(o.activity, acts[:i] + acts[i + 1 :], o.kind, kinds[:i] + kinds[i + 1 :])
            pull = self.caution * (1.0 - p.confidence)
            out.append(min(1.0, max(MIN_SPEED, p.speed - pull * (p.speed - p.low))))
        got = self._memo[key] = tuple(out)
        if len(self._memo) > 100_000:
            self._memo.clear()
        return got


__all__ = ["DurationBook", "Forecast", "LearnedForecast", "Occupant", "finish_times", "task_type"]
