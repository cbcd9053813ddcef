"""Completion time: collocate, or wait, where the predicted completion times suffer least.

For a try that no idle GPU can take, every option is priced in seconds of summed completion time:

* **a GPU set** (collocation candidates that pass the memory, tenant-cap and fencing filters of
  the placer): the newcomer's predicted completion there, plus how much later each try already
  on those GPUs is predicted to finish because of it.  Each GPU is played forward with the
  forecast's speeds (:func:`~carma_airflow.core.policies.forecast.finish_times`), with and
  without the newcomer; a try on several GPUs goes at its slowest GPU's pace.
* **waiting**: the predicted time until a GPU set that could take it has drained (its tenants
  played forward without the newcomer), then the newcomer's work alone.  Waiting slows nobody.

Each option also carries the queue's share: every second it keeps a GPU busy (a collocation: how
much later the GPU drains; waiting: the newcomer's whole run on a GPU of its own) delays about
``queue x (waiting tries - 1) / GPUs`` tries of the queue.  The cheapest option wins; an idle
GPU (the newcomer alone, nobody slowed) comes first as with every policy.

The forecast (:mod:`carma_airflow.core.policies.forecast`) is the learned one in the executor
and the simulator: the interference model learned per GPU model, the tasks' learned activities
and solo run times, with speeds pulled toward the low end of their prediction intervals by
``caution x (1 - confidence)`` (robust where the model is unsure, bold where it is sure).  Until
a run time is known the options are priced in units of one try's work and waiting is never
chosen (nothing to price it by).  ``bench/oracle.py`` runs the same rule on the simulator's
truth: the bench's oracle.

Pruning keeps a decision cheap on a large cluster: the collocation candidates are visited in the
order of interference-aware's cheap bound (projected SM activity in bands, then tightest memory
fit) and at most ``candidates`` feasible ones (per GPU asked for) are priced; waiting is priced
only where it could win (it costs at least the newcomer's run alone and its queue share); the
drain times that price it are bounded below by the longest work left on each GPU (speeds are at
most solo; until its speeds are predicted, as if at solo speed since it started), or by the drain
itself kept from an earlier pass, in an order the placer keeps from pass to pass
(:mod:`carma_airflow.core.drain_order`), so only the GPUs whose bound beats the soonest drain
found are played forward.  Predicted speeds are memoised per set of (task type,
activity) co-tenants, finish times per set of (type, activity, work left to the second).

Which waiting try a freed GPU goes to is the queue's order, and the policy ranks it
(:meth:`CompletionTime.ranker`, used by :mod:`carma_airflow.core.queueing`'s backfill): inside one
priority, shortest predicted run alone first (the summed-completion-time rule for one machine),
until a try has waited ``overdue_runs`` times its predicted run (or the queue's starvation bound):
then it goes ahead of its priority's ranked tries, by arrival, and ages.  Priority order holds.

Opt-in, ``track_record``: each option's cost is multiplied by how this deployment's tries that
chose its kind (waiting, sharing) completed against their predictions
(:mod:`carma_airflow.core.track_record`); the driver tells the policy of each try's end
(:meth:`CompletionTime.try_ended`).  Not the default: on every bench it moved the figures within
the grid's own noise (docs/placement.md).

The paper's risk rule (a busy GPU takes no new tenant) is off: the prediction decides whether a
busy GPU is worth sharing.  ``risk_rule=True`` keeps it.  Every priced option goes into the
decision's reasons (``carma why``): ``GPU 2 (A100-40GB): interference: predicted 1.42x slower,
done in 1.3 h; co-tenants +0.4 h; cost 2.1 h (chose waiting at 1.6 h)``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from carma_airflow.core.activity import DEFAULT_ACTIVITY_SETTINGS, ActivitySettings
from carma_airflow.core.gpu_sets import paced
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.floor import GainFloor, floor_cheapest, has_floor
from carma_airflow.core.policies.forecast import Forecast, LearnedForecast, Occupant, finish_times
from carma_airflow.core.policies.predictive import task_type
from carma_airflow.core.policies.priced import Choice, Option
from carma_airflow.core.scarce import capability_key, speed_key
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.track_record import SHARE, WAIT, TrackRecord

PLACED_KEPT = 50_000  # tries' slowdowns kept from their pricing until they end (take_slowdown)


@dataclass(frozen=True, slots=True)
class CompletionSettings:
    """The policy's knobs."""

    candidates: int = 4  # feasible collocation candidates priced per decision (cheap-bound order)
    max_tenants: int = 3
    activity_band: float = 0.25  # the cheap bound's activity band (interference-aware's)
    risk_rule: bool = False  # True: the paper's risk rule filters busy GPUs first
    caution: float = 0.25  # how far an unsure speed is pulled toward its interval's low end
    waits: bool = True  # False: never wait while a GPU set can take the try
    queue: float = 0.35  # weight of the queue's delay (0: only the newcomer and the tries already there)
    # GPU sets within this share of the cheapest cost tie: the first in the cheap bound's order wins
    tolerance: float = 0.0
    # the queue: inside one priority, waiting tries by shortest predicted run first, until a try has
    # waited ``overdue_runs`` times its predicted run (or the queue's starvation bound): then it goes
    # first, by arrival (False: the queue's own order, as for every other policy)
    shortest_first: bool = True
    overdue_runs: float = 0.5
    # on GPUs of several sizes: the least capable idle GPU first, and the larger ones kept for the
    # waiting tries only they can hold (core/scarce.py); False: the lowest index, as every policy
    keep_scarce: bool = True
    # on GPUs of several models, once run times per model are known: an idle GPU kept from a try that
    # runs faster on another idle model, or for the tries of the pass that gain more from its model
    # (core/speed_keep.py); False: the idle order alone
    speed_keep: bool = True
    # on GPUs of several models, once run times are known: a one-GPU try whose first idle GPU is of a
    # model it is predicted to run slower on than another model of the fleet has that idle GPU priced
    # beside sharing the faster models' GPUs and waiting for one (its drain, behind the tries of the
    # pass that wait for it, plus the run there), not taken unpriced (core/speed_keep.py,
    # SpeedKeep.slower; round 52, docs/placement.md); False: taken, and a try waits for a faster busy
    # GPU only where that GPU's drain plus its run there beats the idle one by WAIT_MARGIN
    price_slow_idle: bool = True
    # on GPUs of several models: the fastest idle GPU first by the spec sheets (then the least
    # capable by size, then index: on one model the index order); False: the least capable first
    fastest_idle: bool = True
    # a task type without run times of its own: False, the median over the measured types; True,
    # pooled by its label's family and size (core/policies/durations.py; not the default: on
    # bench/robustness.py it met fewer targets, docs/placement.md)
    pooled_runs: bool = False
    # opt-in floor: once run times are known, a collocation must raise its GPU's summed predicted
    # speed (the tenants' and the newcomer's, solo = 1.0 each, cautious where unsure) by at least
    # this much, else it is refused and the try waits or goes elsewhere (None: no floor; 0.3 met
    # one more gain target on bench/robustness.py but costs deep queues 6x: docs/placement.md)
    min_gain: float | None = None
    # the floor lifted while the cluster is saturated: more tries wait than the GPUs hold at the tenant
    # cap (waiting - 1 >= max_tenants x GPUs), where what a collocation takes from later arrivals is in
    # the waiting option's queue weight already (docs/placement.md's candidate; measured, not the default)
    lift_floor_saturated: bool = False
    # the floor once the interference model has learned a GPU model (its fit left the cold prior): a
    # collocation on a GPU of that model must add at least this to the GPU's summed predicted speed,
    # cautious where unsure (0.0: it may not lower what the GPU gets done per second; a mild prior
    # cannot say that, a learned fit can; issue 41, round 54, docs/placement.md); None: no floor but
    # min_gain's, which, where set, applies instead on every GPU
    learned_floor: float | None = 0.0
    # opt-in: each option's cost multiplied by how this deployment's tries that chose its kind (wait,
    # share) completed against their predictions (core/track_record.py; measured, not the default:
    # within the grid's noise on every bench, docs/placement.md)
    track_record: bool = False

    def __post_init__(self) -> None:
        if not (self.overdue_runs > 0 and self.overdue_runs < float("inf")):
            raise ValueError(
                f"CompletionSettings.overdue_runs must be a positive, finite number of predicted runs,"
                f" got {self.overdue_runs!r}"
            )
        if not 0.0 <= self.caution <= 1.0:
            raise ValueError(f"CompletionSettings.caution must be between 0 and 1, got {self.caution!r}")
        if self.candidates < 1:
            raise ValueError(f"CompletionSettings.candidates must be at least 1, got {self.candidates!r}")
        if not self.queue >= 0:
            raise ValueError(f"CompletionSettings.queue must be 0 or more, got {self.queue!r}")
        for name in ("min_gain", "learned_floor"):
            value = getattr(self, name)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ValueError(
                    f"CompletionSettings.{name} must be None or between -1 and 1 (solo speeds), got {value!r}"
                )


DEFAULT_COMPLETION_SETTINGS = CompletionSettings()


class CompletionTime(Policy):
    name = "completion-time"
    aliases = ("jct", "ct", "completion")
    description = (
        "idle GPUs first; then, of every GPU set that fits and waiting for one to drain, the option with the "
        "lowest predicted summed completion time of the newcomer and the tries already there (learned model)"
    )
    uses_lock = False
    uses_reservations = True
    prices_options = True
    free_key_at = 1  # key: (activity level, usable MiB, index)

    def __init__(
        self,
        model: InterferenceModel | None = None,
        settings: CompletionSettings = DEFAULT_COMPLETION_SETTINGS,
        activity: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS,
    ) -> None:
        self.settings = settings
        self.max_tenants = settings.max_tenants
        self.checks_risk = settings.risk_rule
        self.learned = LearnedForecast(model, activity, settings.caution, settings.pooled_runs)
        self.forecast: Forecast = self.learned
        self.now = 0.0
        self.queue_weight = 0.0  # waiting tries per GPU: what a GPU-second taken costs the queue
        self.saturated = False  # more tries wait than the GPUs hold at the tenant cap (this pass)
        self._occ: dict[int, tuple[GpuFacts, list[Occupant]]] = {}
        # per GPU facts object (this pass) the key its occupants' plays are kept by (:meth:`_play_key`)
        self._keys: dict[int, tuple[GpuFacts, tuple[object, ...]]] = {}
        self._base: dict[int, tuple[GpuFacts, float, float]] = {}  # summed completions, drain
        # finish times by (GPU model, occupants with their work to the second): equivalent GPUs
        # (same model, same tenants' types and work left) are played forward once
        self._played: dict[tuple[object, ...], list[float]] = {}
        self._played_by: Forecast | None = None
        self._kept: dict[int, tuple[GpuFacts, object, float, float]] = {}  # drain times, from pass to pass
        self._runs: dict[str, float] = {}  # predicted runs alone by try, for the queue's rank
        self.floor = GainFloor()  # the opt-in floor on a collocation's gain, its verdicts kept
        self._placed_slowdown: dict[str, float] = {}  # per try priced to share, its predicted slowdown then
        self.record = TrackRecord()  # how the tries' chosen options completed against their predictions
        self._rank_token: object = None

    # -- what the driver tells it ----------------------------------------------------------
    def use_model(self, model: InterferenceModel) -> None:
        """Decide with a newer learned model from now on (the driver calls it as tries end)."""
        self.learned.use_model(model)
        self._played = {}

    def learn_duration(self, task_type: str, seconds: float, gpu_model: str | None = None) -> None:
        """A try of ``task_type`` would have taken ``seconds`` alone on a GPU of ``gpu_model`` (its
        slowest GPU's; None: not known) (the driver, as tries end)."""
        self.learned.learn_duration(task_type, seconds, gpu_model)

    def learn_bound(
        self, task_type: str, seconds: float, gpu_model: str | None = None, estimate: float | None = None
    ) -> None:
        """A try of ``task_type`` ran ``seconds`` shared all along on a GPU of ``gpu_model`` (its
        slowest GPU's): its run alone is at most that (the driver, as tries end).  ``estimate``: its
        run alone estimated from it (:func:`~.durations.alone_from_shared` of :meth:`take_slowdown`)."""
        self.learned.learn_bound(task_type, seconds, gpu_model, estimate)

    def take_slowdown(self, key: str) -> float | None:
        """The slowdown try ``key`` was predicted to run at when it was priced to share a GPU set,
        taken (None: it was not, or was placed alone): the driver asks it as the try ends, before
        :meth:`try_ended`, to estimate a shared try's run alone."""
        return self._placed_slowdown.pop(key, None)

    def see_fleet(self, models: tuple[str, ...]) -> None:
        """The cluster's GPU models (the placer's, as its GPUs change): on several, every option is
        priced on the run its GPUs' model is predicted to give (:meth:`LearnedForecast.work_on`)."""
        self.learned.set_fleet(models)
        see = getattr(self.forecast, "set_fleet", None)
        if self.forecast is not self.learned and callable(see):
            see(models)

    def speed_keeps(self) -> bool:
        """Whether a pass on GPUs of several models keeps idle GPUs by the tries' speeds (core/speed_keep.py)."""
        return self.settings.keep_scarce and self.settings.speed_keep and self.forecast.timed()

    def run_on(self, request: TaskRequest, model: str) -> tuple[float, bool]:
        """The request's predicted solo run on ``model`` and whether it rests on run times measured
        on that model or a ratio learned from tasks run on both (not the spec sheets' prior)."""
        fc = self.forecast
        kind = task_type(request.label)
        if isinstance(fc, LearnedForecast):
            p = fc.by_model.predict(kind, model)
            return fc.work_on(kind, model), p is not None and p.source != "spec"
        on = getattr(fc, "work_on", None)
        if callable(on):
            seconds = on(kind, model)
            return (float(seconds), True) if seconds is not None else (fc.run_alone(request), False)
        return fc.run_alone(request), False

    def _on_model(self) -> Callable[[Occupant, str], Occupant] | None:
        """The forecast's newcomer per GPU model where it prices a mixed fleet per model, else None."""
        fc = self.forecast
        if isinstance(fc, LearnedForecast):
            return fc.newcomer_on if fc.mixed else None
        on = getattr(fc, "newcomer_on", None)
        return on if callable(on) else None

    def paces(self) -> bool:
        """Whether options are priced on each GPU model's speed (a fleet of several models): a
        multi-GPU try's sets are then formed per model first (core/gpu_sets.py)."""
        return self._on_model() is not None

    def runs_by_model(self, request: TaskRequest) -> Callable[[str], float]:
        """The request's predicted run alone on a GPU of a model, as :meth:`choose` prices it (on
        one model: its run wherever)."""
        new = self.forecast.newcomer(request)
        on = self._on_model()
        if on is None:
            return lambda _model: new.work
        return _runs_from(new, on)

    def predicted_runs(self, request: TaskRequest) -> list[tuple[str, float]]:
        """The request's predicted solo run on each of the fleet's models (empty on one model, or
        before run times are known): what ``carma why`` shows for a mixed fleet."""
        fc = self.learned
        if not (fc.mixed and fc.timed()):
            return []
        kind = task_type(request.label)
        return [(m, fc.work_on(kind, m)) for m in fc.fleet]

    def begin_pass(self, now: float, waiting: int = 0, gpus: int = 1) -> None:
        """A pass starts at ``now`` over ``waiting`` tries on ``gpus`` GPUs (the placer calls
        it): tenants' work left moves with the clock; each GPU-second an option takes from a GPU
        delays about ``waiting / gpus`` tries of the queue (its share of them per GPU)."""
        self.now = now
        self.queue_weight = self.settings.queue * max(0, waiting - 1) / max(1, gpus)
        self.saturated = max(0, waiting - 1) >= self.settings.max_tenants * max(1, gpus)
        self._occ, self._keys, self._base = {}, {}, {}
        if self._played_by is not self.forecast or len(self._played) > 50_000:
            self._played = {}
            self._played_by = self.forecast

    def pricer(self) -> CompletionTime:
        return self

    def keeps_scarce_gpus(self) -> bool:
        return self.settings.keep_scarce

    def idle_key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        """On GPUs of several models the fastest idle GPU first by the spec sheets, then the least
        capable (:func:`~carma_airflow.core.scarce.speed_key`; ``fastest_idle`` off: the least capable
        first, :func:`~carma_airflow.core.scarce.capability_key`): on a cluster of one model the index
        order, as every policy's."""
        if not self.settings.keep_scarce:
            return (float(facts.index),)
        if self.settings.fastest_idle:
            return speed_key(facts.state.spec, facts.index)
        return capability_key(facts.state.spec, facts.index)

    # -- the queue's order inside a priority --------------------------------------------------
    def ranker(self) -> Callable[[TaskRequest, float], float | None] | None:
        """Rank the waiting tries shortest predicted run first once run times are known (None
        before: every try is one unit of work).  A try's rank is its predicted run alone (seconds,
        one value per task type, as the queue's classes need): shortest first minimises the summed
        completion times of the tries one freed GPU could take; None once it waited more than
        ``overdue_runs`` times that (it then goes ahead, by arrival).  Runs are kept per try while
        the forecast and its version stay, so a pass over 10,000 waiting looks each up once."""
        fc = self.forecast
        if not (self.settings.shortest_first and fc.timed()):
            return None
        token = (id(fc), getattr(fc, "version", None))
        if token != self._rank_token or len(self._runs) > 200_000:
            self._runs, self._rank_token = {}, token
        runs, bound = self._runs, self.settings.overdue_runs

        def rank(request: TaskRequest, waited: float) -> float | None:
            work = runs.get(request.key)
            if work is None:
                work = runs[request.key] = fc.run_alone(request)
            return None if waited > bound * work else work

        return rank

    # -- the pool order (the cheap bound) --------------------------------------------------
    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        band = self.settings.activity_band
        level = int(facts.smact / band) if band > 0 else 0
        return (float(level), float(facts.usable_free_mib), float(facts.index))

    def pool_token(self) -> Hashable | None:
        flags = (self.collocates, self.checks_memory, self.checks_risk, self.uses_lock, self.uses_reservations)
        return (type(self), flags, self.max_tenants, self.settings.activity_band)

    # -- pricing ----------------------------------------------------------------------------
    def occupants_of(self, f: GpuFacts) -> list[Occupant]:
        got = self._occ.get(id(f))
        if got is None or got[0] is not f:
            got = self._occ[id(f)] = (f, self.forecast.occupants(f, self.now))
        return got[1]

    def _play(self, spec: str, occupants: Sequence[Occupant]) -> list[float]:
        return self._play_as(_key(spec, occupants), spec, occupants)

    def _play_as(self, key: tuple[object, ...], spec: str, occupants: Sequence[Occupant]) -> list[float]:
        """The occupants' finish times, kept by ``key`` (:func:`_key` of them)."""
        got = self._played.get(key)
        if got is None:
            got = self._played[key] = finish_times(self.forecast, spec, occupants)
        return got

    def _play_key(self, f: GpuFacts) -> tuple[object, ...]:
        """:func:`_key` of a GPU's occupants, kept for the pass: its price with each newcomer
        extends it by one occupant."""
        got = self._keys.get(id(f))
        if got is None or got[0] is not f:
            got = self._keys[id(f)] = (f, _key(f.state.spec.name, self.occupants_of(f)))
        return got[1]

    def _base_of(self, f: GpuFacts) -> tuple[float, float]:
        """(summed completions, drain time) of a GPU's occupants without the newcomer, played from
        the same occupants as its price with the newcomer (this pass)."""
        got = self._base.get(id(f))
        if got is None or got[0] is not f:
            done = self._play_as(self._play_key(f), f.state.spec.name, self.occupants_of(f))
            got = self._base[id(f)] = (f, sum(done), max(done, default=0.0))
            if len(self._kept) > 20_000:
                self._kept = {}
            self._kept[id(f)] = (f, getattr(self.forecast, "version", None), self.now, got[2])
        return got[1], got[2]

    def _kept_drain(self, f: GpuFacts) -> float | None:
        """The GPU's drain time kept from an earlier pass, moved on by the clock, while its facts
        and the forecast stay (its tenants then only moved on by the clock); else None."""
        kept = self._kept.get(id(f))
        version = getattr(self.forecast, "version", None)
        if kept is None or kept[0] is not f or version is None or kept[1] != version:
            return None
        return max(0.0, kept[3] - (self.now - kept[2]))

    def _price(self, f: GpuFacts, new: Occupant) -> tuple[float, float, float]:
        """(tenants' summed delay, newcomer's completion, how much later the GPU drains) if the
        newcomer joins this GPU."""
        key = (*self._play_key(f), (new.kind, new.activity, round(new.work)))
        done = self._played.get(key)
        if done is None:  # :meth:`_play_as`, the occupants listed only where they are played
            done = self._played[key] = finish_times(self.forecast, f.state.spec.name, [*self.occupants_of(f), new])
        base, drain = self._base_of(f)
        return sum(done[:-1]) - base, done[-1], max(done) - drain

    def bound(self, f: GpuFacts) -> float:
        """A lower bound of the GPU's drain time: the drain itself where it is kept from an earlier
        pass, else its longest work left (speeds are at most solo)."""
        kept = self._kept_drain(f)
        if kept is not None:
            return kept
        if isinstance(self.forecast, LearnedForecast):  # the same, without building its occupants
            return self.forecast.longest_left(f, self.now)
        return max((o.work for o in self.occupants_of(f)), default=0.0)

    def quick_bound(self, f: GpuFacts) -> tuple[float, bool]:
        """(:meth:`bound`, True), or where that would predict speeds not at hand, a lower bound of
        it that predicts none and False (the drain order's loose entries: core/drain_order.py)."""
        if isinstance(self.forecast, LearnedForecast) and self._kept_drain(f) is None:
            return self.forecast.quick_left(f, self.now)
        return self.bound(f), True

    def settled_bound(self, f: GpuFacts, at: float) -> float:
        """The bound a loose one taken at ``at`` stands for: :meth:`bound` as it was then."""
        assert isinstance(self.forecast, LearnedForecast)  # the only forecast with loose bounds
        return self.forecast.longest_left(f, at)

    def try_ended(self, key: str, now: float, ok: bool) -> None:
        """Try ``key`` ended at ``now`` (``ok``: it completed) (the driver, as tries end): how the
        option it chose came out goes into the track record."""
        self.record.ended(key, now, ok)
        self._placed_slowdown.pop(key, None)

    def factors(self) -> tuple[float, float]:
        """(waiting's, sharing's) track-record factor (1.0 each with ``track_record`` off)."""
        if not self.settings.track_record:
            return 1.0, 1.0
        return self.record.factor(WAIT), self.record.factor(SHARE)

    def wait_version(self) -> object:
        """What a wait by choice kept from pass to pass rests on: the forecast and the track record."""
        return (self.forecast_version(), self.record.version if self.settings.track_record else 0)

    def forecast_version(self) -> object:
        """What the drain bounds kept from pass to pass rest on: the forecast and its version."""
        return (id(self.forecast), getattr(self.forecast, "version", 0))

    def drained(self, f: GpuFacts) -> float:
        """Predicted seconds until the GPU's tenants have all finished."""
        got = self._base.get(id(f))  # asked of many GPUs a pass: the kept answer without a call
        if got is not None and got[0] is f:
            return got[2]
        return self._base_of(f)[1]

    def price_one(self, request: TaskRequest, f: GpuFacts) -> tuple[float, float]:
        """A one-GPU request's collocation on ``f``: (its cost less the queue's share, the
        GPU-seconds it takes from the queue), as :meth:`choose` prices it."""
        new = self.forecast.newcomer(request)
        on = self._on_model()
        if on is not None:
            new = on(new, f.state.spec.name)
        if self.floor_refuses(f, new) is not None:  # refused: not played with it (never cheaper)
            self.drained(f)  # what pricing it keeps (its drain, which the drain order is built by)
            return float("inf"), 0.0
        delay, done, longer = self._price(f, new)
        return (done + delay) * self.factors()[1], longer

    def has_floor(self) -> bool:
        """Whether a floor may refuse a collocation now (:func:`.floor.has_floor`)."""
        return has_floor(self)

    def floor_refuses(self, f: GpuFacts, new: Occupant) -> tuple[float, float] | None:
        """(the gain, the floor) where the floor refuses the newcomer on ``f``, else None (:mod:`.floor`)."""
        return self.floor.refuses(self, f, new)

    def choose(
        self,
        request: TaskRequest,
        candidates: Sequence[GpuFacts],
        drain: Callable[[], tuple[float, GpuFacts | None]],
        n: int,
    ) -> Choice:
        """The cheapest of: each GPU set of ``n`` candidates on one host, and waiting ``drain()``
        (:meth:`drain` of the GPUs that could take it) for a GPU set to drain.  ``drain`` is asked
        only where waiting could win: its cost is at least the newcomer's work alone plus the
        queue's share, so a GPU set cheaper than that is taken without it."""
        fc = self.forecast
        timed = fc.timed()
        new = fc.newcomer(request)
        on = self._on_model()
        work = max(new.work, 1e-9)  # on a mixed fleet: on the model where it runs fastest
        options: list[Option] = []
        qw = self.queue_weight if timed else 0.0
        inf = float("inf")
        fw, fs = self.factors() if timed else (1.0, 1.0)  # the track record's, per kind of option
        if n == 1:
            heres = []
            for f in candidates:
                here = new if on is None else on(new, f.state.spec.name)
                delay, done, longer = self._price(f, here)
                q = qw * longer
                slow = done / max(here.work, 1e-9)
                options.append(
                    Option((f,), (done + delay) * fs + q, done, delay, slow, queue=q, taken=longer, factor=fs)
                )
                heres.append(here)
            floor_cheapest(self, options, heres)
        else:
            hosts: dict[str, list[GpuFacts]] = {}
            for f in candidates:
                hosts.setdefault(f.state.host, []).append(f)
            pace = None if on is None else _runs_from(new, on)  # the newcomer above, per model
            for gpus in hosts.values():
                if len(gpus) < n:
                    continue
                # on one model, one pace; on several, per pace: the GPUs of a model or faster, each
                # priced with the newcomer at that model's pace (a set goes at its slowest GPU's)
                if on is None or pace is None:
                    options.append(self._set_option(gpus, n, new, fs, qw, work))
                    continue
                for model, eligible in paced(gpus, n, pace):
                    options.append(self._set_option(eligible, n, on(new, model), fs, qw, work, pace))
        cheapest = min((o.cost for o in options), default=inf)
        if timed and self.settings.waits and cheapest > work * fw + qw * work * n:
            seconds, where = drain()
            if seconds < inf:
                # its run on the drained GPU's model (a multi-GPU try: its slowest, which the drain times)
                alone = work if on is None or where is None else max(on(new, where.state.spec.name).work, 1e-9)
                q = qw * alone * n
                total = seconds + alone
                options.append(Option((), total * fw + q, total, 0.0, total / alone, where, q, alone * n, factor=fw))
        open_options = [o for o in options if not o.refused]
        if not open_options:  # nothing, or every GPU set refused and waiting not priced: it waits
            return Choice(None, tuple(options), timed)
        best = min(open_options, key=lambda o: o.cost)  # first of equal costs: the cheap bound's order
        if not best.waits and self.settings.tolerance > 0:
            near = best.cost * (1.0 + self.settings.tolerance)
            best = next(o for o in open_options if not o.waits and o.cost <= near)
        if timed and self.settings.track_record:
            self.record.chose(request.key, WAIT if best.waits else SHARE, self.now, best.done_in)
        if timed and not best.waits:  # the slowdown it is placed at, if it is (take_slowdown)
            kept = self._placed_slowdown
            kept.pop(request.key, None)
            kept[request.key] = best.slowdown
            if len(kept) > PLACED_KEPT:  # tries withdrawn or never ended: the oldest go
                del kept[next(iter(kept))]
        return Choice(best, tuple(options), timed)

    def _set_option(
        self,
        gpus: Sequence[GpuFacts],
        n: int,
        here: Occupant,
        fs: float,
        qw: float,
        work: float,
        pace: Callable[[str], float] | None = None,
    ) -> Option:
        """The cheapest ``n`` of one host's ``gpus`` for a multi-GPU try whose newcomer there is
        ``here`` (its work at the set's pace): the tenants' delays summed, the newcomer done when
        its last GPU is (``work``: its run on its fastest model, the slowdown's base).  ``pace``:
        its run per model (a fleet priced per model): of equal costs the slower model's GPU comes
        first, since at the set's pace a faster GPU would only idle part of the run."""
        rows = []
        for f in gpus:
            delay, done, longer = self._price(f, here)
            short = self.floor_refuses(f, here)
            cost = float("inf") if short is not None else (delay + done) * fs + qw * longer
            rows.append((cost, delay, done, longer, f, short))
        if pace is None:
            rows.sort(key=lambda t: t[0])
        else:
            rows.sort(key=lambda t: (t[0], -pace(t[4].state.spec.name)))
        top = rows[:n]
        delay = sum(t[1] for t in top)
        done = max(t[2] for t in top)
        taken = sum(t[3] for t in top)
        q = qw * taken
        shorts = [t[5] for t in top if t[5] is not None]
        short = min(shorts) if shorts else None
        cost = float("inf") if short is not None else (done + delay) * fs + q
        chosen = tuple(t[4] for t in top)
        return Option(chosen, cost, done, delay, done / work, queue=q, taken=taken, short=short, factor=fs)


def _runs_from(new: Occupant, on: Callable[[Occupant, str], Occupant]) -> Callable[[str], float]:
    """The newcomer ``new``'s run alone per GPU model (``on``: the forecast's newcomer on a model),
    each model asked once."""
    memo: dict[str, float] = {}

    def run(model: str) -> float:
        got = memo.get(model)
        if got is None:
            got = memo[model] = on(new, model).work
        return got

    return run


def _key(spec: str, occupants: Sequence[Occupant]) -> tuple[object, ...]:
    """What a GPU's finish times are kept by: its model and per occupant its type, activity and
    work left to the second (equivalent GPUs are played forward once)."""
    return (spec, *[(o.kind, o.activity, round(o.work)) for o in occupants])


__all__ = ["DEFAULT_COMPLETION_SETTINGS", "CompletionSettings", "CompletionTime"]
