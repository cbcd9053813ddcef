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

import statistics
from collections import deque
from collections.abc import Callable, Sequence
from math import inf
from typing import NamedTuple, Protocol

from carma_airflow.core.activity import DEFAULT_ACTIVITY_SETTINGS, ActivitySettings, unknown_activity
from carma_airflow.core.gpu import Tenant
from carma_airflow.core.interference import InterferenceFit, InterferenceModel
from carma_airflow.core.model_speed import SoloRunTimes
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.policies.durations import MOVED, SOLO_KEPT, DurationBook
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
    if isinstance(forecast, LearnedForecast):
        return forecast.finish_times(spec, occupants)  # the same, its speeds kept per set of occupants
    return play(forecast.speeds, spec, occupants)


def play(
    speeds: Callable[[str, Sequence[Occupant]], Sequence[float]],
    spec: str,
    occupants: Sequence[Occupant],
    table: dict[int, list[float]] | None = None,
) -> list[float]:
    """:func:`finish_times` from a forecast's ``speeds``.  ``table``: the rates (``max(MIN_SPEED,
    speed)``) of the occupants still running, by bit mask of who runs (bit i: occupant i), kept
    for this set of occupants' types and activities (:meth:`LearnedForecast.finish_times`): a
    play looks up the rates it finds there and keeps those it asks ``speeds`` for.  Without one
    (a fresh table: a play meets each mask once) ``speeds`` is asked at every step."""
    if table is None:
        table = {}
    n = len(occupants)
    if n == 1:  # alone: what the loop below gives (0.0 + its time), without the loop
        rates = table.get(1)
        if rates is None:
            rates = table[1] = [max(MIN_SPEED, s) for s in speeds(spec, occupants)]
        return [max(0.0, occupants[0].work) / rates[0]]
    left = [max(0.0, o.work) for o in occupants]
    alive = list(range(n))
    running = (1 << n) - 1  # bit i: occupant i still runs
    out = [0.0] * n
    t = 0.0
    while alive:
        rates = table.get(running)
        if rates is None:
            rates = table[running] = [max(MIN_SPEED, s) for s in speeds(spec, [occupants[i] for i in alive])]
        best_j, best_dt = 0, float("inf")
        for j, i in enumerate(alive):
            dt = left[i] / rates[j]
            if dt < best_dt:
                best_j, best_dt = j, dt
        t += best_dt
        for j, i in enumerate(alive):
            left[i] -= rates[j] * best_dt
        gone = alive[best_j]
        out[gone] = t
        running ^= 1 << gone
        del alive[best_j]
    return out


_Rows = list[tuple[str, float, float, float | None]]  # per occupant (type, activity, expected work, placed at)

# one occupant's row with its speed, floor of work left (MIN_LEFT x expected) and whether its
# type's run time is measured: (type, activity, expected work, placed at, speed, floor, measured)
_Plan = tuple[str, float, float, float | None, float, float, bool]

UNKNOWN = "\0unknown"  # the memo's name for a task type the fit has no term for (no label is this)

# an Occupant built by tuple's own constructor: the same value as ``Occupant(kind, activity, work)``
# without the named tuple's Python-level ``__new__`` (a pass builds hundreds of thousands)
_occupant = tuple.__new__


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
        self._any_learned: tuple[InterferenceModel, bool] | None = None
        self._known: dict[str, frozenset[str]] = {}  # per GPU model, its fit's known_types()
        self._memo: dict[tuple[object, ...], tuple[float, ...]] = {}
        # per set of occupants (model, and each one's type and activity, in order) the rates of each
        # subset still running as it is played forward (by bit mask of who runs): :meth:`finish_times`
        self._tables: dict[tuple[object, ...], dict[int, list[float]]] = {}
        # per GPU facts object: its occupants' (type, activity, expected work, placed at; None:
        # placed in this pass) and their speeds now; what moves with the clock is worked out per call
        # (from the same rows with their speed, their floor of work left and whether their type's
        # run time is measured: :meth:`occupants`)
        self._rows: dict[int, tuple[GpuFacts, list[tuple[str, float, float, float | None]], Sequence[float]]] = {}
        self._plans: dict[int, tuple[list[tuple[str, float, float, float | None]], list[_Plan]]] = {}
        # the same rows by tenants (the tuple object a view's GPU carries, kept by the reservation
        # ledger while its tenants stay) for a GPU without tries joined in the pass: a GPU whose
        # monitor state moves gets new facts on every pass, its rows do not change; kept with what
        # they were worked out from (:meth:`_stamp`), so they are what working them out again gives
        self._by_tenants: dict[int, tuple[tuple[Tenant, ...], str, tuple[object, ...], _Rows, Sequence[float]]] = {}
        # the bare rows (:meth:`_bare_rows`) by tenants likewise, which no interference model moves:
        # kept across a model's hand-over, where every GPU's speeds are predicted afresh
        self._bare_by_tenants: dict[int, tuple[tuple[Tenant, ...], str, tuple[object, ...], _Rows]] = {}
        self._works_moved = 0  # times a run time moved what :meth:`work_on` gives (the bare rows' work)
        self._activity_changes = 0  # times a request's activity moved ``_activities``
        self.version = 0  # moves when what the forecasts rest on moves (the model, an expectation)
        # a mixed fleet (several GPU models): solo run times per task type and model, and the
        # predicted run of a type on each model from them (:meth:`work_on`); on one model unused
        self.by_model = SoloRunTimes()
        self.fleet: tuple[str, ...] = ()  # the cluster's GPU models (several: the fleet is mixed)
        self._on: dict[tuple[str, str], float] = {}  # (type, model) -> predicted solo seconds
        self._bounds: dict[tuple[str, str], float] = {}  # (type, model) -> shortest shared try's duration
        self._books: dict[str, DurationBook] = {}  # per model, the measured types' runs there (:meth:`_pooled_on`)
        # type -> model -> runs alone estimated from its shared tries there (the newest SOLO_KEPT)
        self._estimates: dict[str, dict[str, deque[float]]] = {}

    def use_model(self, model: InterferenceModel) -> None:
        if model is not self.model:
            self.model = model
            self._fits = {}
            self._known = {}
            self._memo = {}
            self._tables = {}
            self._rows = {}
            self._by_tenants = {}
            self.version += 1

    def learn_duration(self, kind: str, seconds: float, model: str | None = None) -> None:
        """A try of ``kind`` that would have run ``seconds`` alone (measured alone, or its work
        over its speed alone), on GPU model ``model`` where known (its slowest GPU's)."""
        moved = self.durations.add(kind, seconds)
        if model is not None and seconds > 0:
            first_here = self.by_model.median(kind, model) is None
            before = self.by_model.predict(kind, model) if self.mixed else None
            self.by_model.add(kind, model, seconds)
            if self.mixed and first_here:  # its estimates from shared tries there, against its first run alone
                for e in self._estimates.get(kind, {}).get(model, ()):
                    self.durations.calibration.add(e, seconds)
            if self.mixed:  # a run on one model moves the type's prediction on every other, and the ratios
                after = self.by_model.predict(kind, model)
                shift = float("inf") if before is None or after is None else abs(after.seconds - before.seconds)
                moved = moved or shift > MOVED * (before.seconds if before is not None else 0.0)
                moved = moved or len(self.by_model.models_of(kind)) > 1
        if moved:
            self._rows = {}
            self._on = {}
            self._books = {}
            self._works_moved += 1
            self.version += 1

    def learn_bound(self, kind: str, seconds: float, model: str | None = None, estimate: float | None = None) -> None:
        """A try of ``kind`` ran ``seconds`` for its whole work shared (its run alone not known), on
        GPU model ``model`` where known: at most that long alone (:meth:`DurationBook.bound`);
        ``estimate``: its run alone as estimated from it (its duration over its predicted slowdown)."""
        moved = self.durations.bound(kind, seconds, estimate)
        if model is not None and seconds > 0:
            key = (kind, model)
            old = self._bounds.get(key)
            if old is None or seconds < old:
                self._bounds[key] = float(seconds)
                moved = moved or (self.mixed and not self.by_model.models_of(kind))
            if estimate is not None and estimate > 0:
                estimate = min(float(estimate), float(seconds))
                kept = self._estimates.setdefault(kind, {}).setdefault(model, deque(maxlen=SOLO_KEPT))
                kept.append(estimate)
                alone = self.by_model.median(kind, model)
                if self.mixed and alone is not None:  # measured there: how far off the estimates come out
                    moved = (self.durations.calibration.add(estimate, alone) and self._estimated_unmeasured()) or moved
                moved = moved or (self.mixed and not self.by_model.models_of(kind))
        if moved:
            self._rows = {}
            self._on = {}
            self._works_moved += 1
            self.version += 1

    @property
    def mixed(self) -> bool:
        """Whether the cluster has GPUs of several models (run times are then priced per model)."""
        return len(self.fleet) > 1

    def set_fleet(self, models: tuple[str, ...]) -> None:
        """The cluster's GPU models (the placer's, when its GPUs change)."""
        models = tuple(sorted(set(models)))
        if models != self.fleet:
            was = self.mixed
            self.fleet = models
            self.durations.calibrating = not self.mixed  # a mixed fleet's errors are taken per model
            if was or self.mixed:  # one model: nothing priced per model, nothing to forget
                self._rows, self._on, self._by_tenants, self._books = {}, {}, {}, {}
                self._works_moved += 1
                self.version += 1

    def work_on(self, kind: str, model: str) -> float:
        """The type's predicted solo seconds on ``model``: on one model its expectation
        (:meth:`_work`); on a mixed fleet its median there where it ran there, else its run on the
        model it ran on most times that pair's learned ratio (the spec sheets' until a type ran on
        both), else the median over the measured types of theirs on ``model``."""
        if not self.mixed:
            return self._work(kind)
        got = self._on.get((kind, model))
        if got is None:
            p = self.by_model.predict(kind, model)
            if p is not None:
                got = p.seconds
            else:
                got = self._estimated_on(kind, model)
                if got is None:
                    book = self._pooled_on(model)
                    pooled = book.expected(kind) if book is not None else None
                    got = pooled if pooled is not None else self._work(kind)
                cap = self._bounds.get((kind, model))  # it ran there, shared: at most that long alone
                got = got if cap is None else min(got, cap)
            self._on[(kind, model)] = got
        return got

    def _estimated_unmeasured(self) -> bool:
        """Whether a type never measured alone has estimates from shared tries (:meth:`_estimated_on`)."""
        return any(not self.by_model.models_of(k) for k in self._estimates)

    def _estimated_on(self, kind: str, model: str) -> float | None:
        """A type that never ran alone, from its shared tries' estimates (:meth:`DurationBook.bound`):
        their median on ``model`` where it ran there, else on the model where it ran shared most,
        moved by that pair's ratio (learned, else the spec sheets'); None where it has none."""
        per_model = self._estimates.get(kind)
        if not per_model:
            return None
        factor = self.durations.calibration.factor()  # how far off such estimates came out (durations.py)
        own = per_model.get(model)
        if own:
            return statistics.median(own) / factor
        base = max(sorted(per_model), key=lambda m: len(per_model[m]))
        return statistics.median(per_model[base]) * self.by_model.ratio(model, base).one_task()[0] / factor

    def _pooled_on(self, model: str) -> DurationBook | None:
        """The measured types' predicted runs on ``model``, as a :class:`DurationBook` whose pooled
        estimate prices a type that never ran alone there nor anywhere (its family's, else its
        nearest prefix's, else the median over the measured types; without ``pooled_runs``, the
        default, the median), as :meth:`_work` prices it on one model.  Kept until a run time moves
        (``_on`` is cleared then too)."""
        got = self._books.get(model)
        if got is None:
            got = DurationBook(pooled=self.durations.pooled)
            for k in self.by_model.tasks():
                q = self.by_model.predict(k, model)
                if q is not None:
                    got.add(k, q.seconds)
            self._books[model] = got
        return got if len(got) else None

    def fastest_run(self, kind: str) -> float:
        """The type's predicted solo run on the model where it runs fastest (on one model: :meth:`_work`)."""
        if not self.mixed:
            return self._work(kind)
        return min(self.work_on(kind, m) for m in self.fleet)

    def timed(self) -> bool:
        return len(self.durations) > 0

    def _work(self, kind: str) -> float:
        got = self.durations.expected(kind)
        return 1.0 if got is None else got

    def _stamp(self) -> tuple[object, ...]:
        """What rows are worked out from besides the GPU's tenants and model (the interference model
        forgets them all): the run times (and how they are pooled) and the activities of types."""
        durations = self.durations
        return (durations, durations.changes, durations.pooled, self._activity_changes, self._works_moved)

    def _kept_rows(self, facts: GpuFacts) -> tuple[_Rows, Sequence[float]] | None:
        """The GPU's rows and speeds where they are kept (for these facts, or for these tenants
        while what rows are worked out from stays), else None."""
        got = self._rows.get(id(facts))
        if got is not None and got[0] is facts:
            return got[1], got[2]
        if facts.joined is None:
            tenants = facts.state.tenants
            kept = self._by_tenants.get(id(tenants))
            if (
                kept is not None
                and kept[0] is tenants
                and kept[1] == facts.state.spec.name
                and kept[2] == self._stamp()
            ):
                self._keep_rows(facts, kept[3], kept[4])
                return kept[3], kept[4]
        return None

    def _rows_of(self, facts: GpuFacts) -> tuple[_Rows, Sequence[float]]:
        got = self._kept_rows(facts)
        if got is not None:
            return got
        rows = list(self._bare_kept(facts))  # a list of its own: plans are kept by it with these speeds
        occupants = [_occupant(Occupant, (k, a, w, None)) for k, a, w, _ in rows]
        sp = self.speeds(facts.state.spec.name, occupants) if rows else ()
        self._keep_rows(facts, rows, sp)
        if facts.joined is None:
            tenants, spec, stamp = facts.state.tenants, facts.state.spec.name, self._stamp()
            if len(self._by_tenants) > 20_000:
                self._by_tenants = {}
            self._by_tenants[id(tenants)] = (tenants, spec, stamp, rows, sp)  # the tuple kept alive
        return rows, sp

    def _bare_kept(self, facts: GpuFacts) -> _Rows:
        """:meth:`_bare_rows`, kept by tenants for a GPU without tries joined in the pass (the same
        list while its tenants and what rows are worked out from stay: :meth:`_stamp`)."""
        if facts.joined is not None:
            return self._bare_rows(facts)
        tenants, spec, stamp = facts.state.tenants, facts.state.spec.name, self._stamp()
        kept = self._bare_by_tenants.get(id(tenants))
        if kept is not None and kept[0] is tenants and kept[1] == spec and kept[2] == stamp:
            return kept[3]
        rows = self._bare_rows(facts)
        if len(self._bare_by_tenants) > 20_000:
            self._bare_by_tenants = {}
        self._bare_by_tenants[id(tenants)] = (tenants, spec, stamp, rows)  # the tuple kept alive
        return rows

    def _bare_rows(self, facts: GpuFacts) -> _Rows:
        """The GPU's occupants' rows (type, activity, expected work on its model, placed at), no speeds."""
        rows: _Rows = []
        model = facts.state.spec.name
        work = self.work_on
        for t in facts.state.tenants:
            kind = task_type(t.label)
            act = t.activity.sm_activity if t.activity is not None else self._activities.get(kind, self._prior)
            rows.append((kind, act, work(kind, model), t.placed_at))
        for label in facts.joined or ():
            kind = task_type(label)
            rows.append((kind, self._activities.get(kind, self._prior), work(kind, model), None))
        return rows

    def rows_of(self, facts: GpuFacts) -> object:
        """What a GPU's occupants' types and activities are worked out from (the same object while
        they stay): a caller keeps what it derived from them by it."""
        return self._rows_of(facts)[0]

    def _keep_rows(self, facts: GpuFacts, rows: _Rows, sp: Sequence[float]) -> None:
        if len(self._rows) > 20_000:
            self._rows = {}
        self._rows[id(facts)] = (facts, rows, sp)  # the facts kept alive: their id stays theirs

    def _plan(self, rows: _Rows, sp: Sequence[float]) -> list[_Plan]:
        """What does not move with the clock of a GPU's rows, kept for them (the same list object:
        a type turns measured only where the rows are forgotten, :meth:`learn_duration`)."""
        got = self._plans.get(id(rows))
        if got is None or got[0] is not rows:
            measured = self.durations.measured
            plan = [(k, a, w, p, s, MIN_LEFT * w, measured(k)) for (k, a, w, p), s in zip(rows, sp, strict=True)]
            if len(self._plans) > 20_000:
                self._plans = {}
            got = self._plans[id(rows)] = (rows, plan)  # the rows kept alive: their id stays theirs
        return got[1]

    def _works_left(self, plan: list[_Plan], now: float) -> list[float]:
        """Each row's work left: the expectation less what it did since it started, at today's
        predicted speed (:meth:`_left`, written out: this runs for every GPU a pass prices)."""
        out = []
        for _, _, w, p, s, least, measured_k in plan:
            done = 0.0 if p is None else max(0.0, now - p) * s
            out.append(max(w - done, least) if done < w else MIN_LEFT * done if measured_k else done)
        return out

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        rows, sp = self._rows_of(facts)
        if not rows:
            return []
        if not self.timed():
            return [Occupant(k, a, w) for k, a, w, _ in rows]
        plan = self._plan(rows, sp)
        works = self._works_left(plan, now)
        return [_occupant(Occupant, (r[0], r[1], work, None)) for r, work in zip(plan, works, strict=True)]

    def longest_left(self, facts: GpuFacts, now: float) -> float:
        """``max(o.work for o in self.occupants(facts, now))`` (0.0 without any), without building
        them: the drain order bounds every GPU with tenants by it, each pass."""
        rows, sp = self._rows_of(facts)
        return self._longest(rows, sp, now)

    def _longest(self, rows: _Rows, sp: Sequence[float], now: float) -> float:
        """:meth:`longest_left` of a GPU's rows and speeds."""
        if not rows:
            return 0.0
        if not self.timed():
            return max(w for _, _, w, _ in rows)
        # :meth:`_works_left`'s maximum, written out without its list (each pass, every GPU walked)
        longest = -inf
        for _, _, w, p, s, least, measured_k in self._plan(rows, sp):
            done = 0.0 if p is None else max(0.0, now - p) * s
            left = max(w - done, least) if done < w else MIN_LEFT * done if measured_k else done
            longest = max(longest, left)
        return longest

    def quick_left(self, facts: GpuFacts, now: float) -> tuple[float, bool]:
        """:meth:`longest_left` where the GPU's speeds are kept or no speed is needed (True), else
        a lower bound of it that predicts none (False): each occupant's work left as if it had run
        at solo speed since it started (no faster is predicted), and at least ``MIN_LEFT`` of its
        expectation (no row's work left is less; past it a row counts ``MIN_LEFT`` of its age or
        all of it, at least as much)."""
        if not self.timed():
            return self.longest_left(facts, now), True
        kept = self._kept_rows(facts)
        if kept is not None:
            return self._longest(kept[0], kept[1], now), True
        rows = self._bare_kept(facts)
        return max(
            (max(w - (0.0 if p is None else max(0.0, now - p)), MIN_LEFT * w) for _, _, w, p in rows), default=0.0
        ), False

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
        """On a mixed fleet: on the model where the type runs fastest."""
        return self.fastest_run(task_type(request.label))

    def newcomer(self, request: TaskRequest) -> Occupant:
        """On a mixed fleet its work is its run on the model where it runs fastest (:meth:`newcomer_on`
        gives it per model)."""
        kind = task_type(request.label)
        if request.activity is not None:
            act = request.activity.sm_activity
            if self._activities.get(kind) != act:
                self._activities[kind] = act
                self._activity_changes += 1
        else:
            act = self._activities.get(kind, self._prior)
        return Occupant(kind, act, self.fastest_run(kind))

    def newcomer_on(self, new: Occupant, model: str) -> Occupant:
        """The newcomer :meth:`newcomer` gave, its work on a GPU of ``model`` (itself on one model)."""
        if not self.mixed:
            return new
        return _occupant(Occupant, (new.kind, new.activity, self.work_on(new.kind, model), new.ref))

    def fit_learned(self, spec: str) -> bool:
        """Whether the interference model's fit for GPU model ``spec`` has left the cold prior."""
        return self._fit(spec).learned

    def any_learned(self) -> bool:
        """Whether the fit of any GPU model has left the cold prior (kept per model object)."""
        got = self._any_learned
        if got is None or got[0] is not self.model:
            got = self._any_learned = (self.model, any(f.learned for f in self.model.fits.values()))
        return got[1]

    def _fit(self, spec: str) -> InterferenceFit:
        fit = self._fits.get(spec)
        if fit is None:
            fit = self._fits[spec] = self.model.fit_for(spec)
        return fit

    def finish_times(self, spec: str, occupants: Sequence[Occupant]) -> list[float]:
        """:func:`finish_times` of these occupants, the same floats: the rates of the occupants
        still running are kept per set of occupants' types and activities (:func:`play`'s
        table), so playing a GPU forward looks its speeds up once (the completion-time policy
        plays hundreds of thousands)."""
        key = self._set_key(spec, occupants)
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) > 50_000:
                self._tables = {}
            table = self._tables[key] = {}
        return play(self.speeds, spec, occupants, table)

    def _set_key(self, spec: str, occupants: Sequence[Occupant]) -> tuple[object, ...]:
        """What a set of occupants' speeds are kept by: the model, each one's type and activity, a
        type the fit has no term for as :data:`UNKNOWN` (the fit predicts every such type alike:
        a new deployment's GPUs, whose types are all unknown, share predictions by activities)."""
        known = self._known.get(spec)
        if known is None:
            known = self._known[spec] = self._fit(spec).known_types()
        return (spec, *[(o.kind if o.kind in known or not o.kind else UNKNOWN, o.activity) for o in occupants])

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        key = self._set_key(spec, occupants)
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


__all__ = ["DurationBook", "Forecast", "LearnedForecast", "Occupant", "finish_times", "play", "task_type"]
