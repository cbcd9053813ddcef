"""What the simulated placer knows, learned the way a driver learns on real GPUs.

Nothing here reads the simulator's truth (the sharing model's ``beta``, the activity scale).
Its inputs are what a monitor and ended tries give:

* **a try's activity, while it runs**: the monitor's per-process SM utilisation
  (``nvmlDeviceGetProcessUtilization``; the simulated GPUs report the catalogue activity, not
  the true demand) read while the try is its GPUs' only tenant for ``sample_s`` seconds after
  its memory ramp.  One sample per try, with the monitor's noise; the estimate of its task type
  is refreshed at once, and every waiting or running try of that type is told
  (:meth:`SchedulingCycle.learn_activity`), so the placer counts a running co-tenant at its
  measured activity from its first seconds alone, not from the next try of its type.
  A try that never ran alone that long is read beside its co-tenants when it ends, as the
  executor's telemetry keeps it (its own processes' utilisation while shared, marked ``shared``):
  its reported activity times its speed there against its speed alone.  A type with a reading
  alone leaves its shared ones out (:func:`~carma_airflow.core.activity.estimate_activity`).
* **a never-seen task type's activity**: borrowed, with low confidence, from learned types of
  the same code and batch size, else the same code or family
  (:func:`~carma_airflow.core.activity.similar_activity`): facts a DAG author knows.
* **interference**: each ended try that shared its GPU, as a stretch over a solo baseline
  against its co-tenancy segments (:class:`~carma_airflow.core.interference.CollocationObservation`).
  The baseline is the median run time of earlier tries of its type that ran alone throughout,
  or, where tries report progress (``progress``), the try's own speed while it was alone: then
  every shared segment of at least ``sample_s`` seconds is an observation of its own.

The segments are cut here too (:meth:`Knowledge.regroup`, called by the event loop whenever
tenants come or go): a run's time, split where its co-tenants' task types change, as a driver
records it from its own view of each GPU's tenants.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from carma_airflow.core.activity import (
    ActivityEstimate,
    ActivitySample,
    TaskTraits,
    estimate_activity,
    similar_activity,
)
from carma_airflow.core.interference import CollocationObservation, InterferenceModel, Segment
from carma_airflow.core.policies.predictive import PredictiveSettings
from carma_airflow.sim.workload import TaskType

if TYPE_CHECKING:
    from carma_airflow.sim.config import SimConfig
    from carma_airflow.sim.gpus import SimGpu, SimRun

Tell = Callable[[str, ActivityEstimate], object]  # tells a waiting or running try its type's new estimate

SAMPLE_S = 10.0  # seconds alone (after its ramp) that give a try's per-process activity sample
REFIT_BATCH_AFTER = 64  # observations after which refits are batched ...
REFIT_BATCH = 16  # ... this many at a time (or an eighth of those in, if more: a refit costs
# more the more it rests on, and a deep queue's thousands of tries would refit every few passes)
SURE = 0.3  # the predictive policy's default min_confidence, for the counts of note_placed


def traits_of(task: TaskType) -> TaskTraits:
    """The catalogue facts of a task type that its DAG's author knows."""
    return TaskTraits(task.script.strip().lower(), task.family.strip().lower(), task.batch_size)


@dataclass(slots=True)
class TrySegment:
    """Part of a try's run with one set of co-tenants: seconds, solo-seconds of work done, their types."""

    seconds: float
    work: float
    with_types: tuple[str, ...]


@dataclass(slots=True)
class _Alone:
    task: TaskType
    reported: float  # what the monitor's per-process reading shows of it alone
    since: float  # alone and past its ramp since


@dataclass(frozen=True, slots=True)
class _Unresolved:
    """A shared stretch seen before the activities that describe it were known: a try of ``task``
    ran ``stretch`` times slower than alone beside ``co_types`` (progress reports), or, without
    them, a whole try (``segments`` over ``duration``) whose solo baseline may come later."""

    gpu_model: str
    task: str
    co_types: tuple[str, ...] = ()
    stretch: float = 0.0
    duration: float = 0.0
    segments: tuple[TrySegment, ...] = ()


UNRESOLVED_KEPT = 512  # the fit's window: older unresolved stretches are let go


@dataclass
class Knowledge:
    """Activities and the interference model, as a driver learns them; see the module doc."""

    noise: float = 0.02
    seed: int = 0
    ramp_s: float = 20.0
    learn_interference: bool = True
    progress: bool = True  # tries report their progress (a training loop's step counter)
    sample_s: float = SAMPLE_S
    sure: float = SURE  # confidence the counts of note_placed call sure
    shared_readings: bool = True  # a try never alone is read beside its co-tenants (the executor's telemetry)
    activities: dict[str, ActivityEstimate] = field(default_factory=dict)
    interference: InterferenceModel = field(default_factory=InterferenceModel)
    observations: int = 0
    placed: dict[str, int] = field(default_factory=dict)  # what placed tries' decisions knew
    rng: random.Random = field(init=False)
    _samples: dict[str, list[ActivitySample]] = field(default_factory=dict)
    _traits: dict[str, TaskTraits] = field(default_factory=dict)
    # per (task type, GPU model): its runs alone there, the baseline of a whole shared try there
    # (another model's runs would put the pair's speed ratio into the interference fit)
    _solo_runs: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    _pending: dict[str, list[CollocationObservation]] = field(default_factory=dict)
    # shared segments whose own or co-tenants' activities were not known yet when the try ended:
    # kept and turned into observations once they are (:meth:`_resolve`), across days too
    _unresolved: list[_Unresolved] = field(default_factory=list)
    _grew: bool = False  # a task type's first activity or solo run time came in since the last resolve
    _alone: dict[str, _Alone] = field(default_factory=dict)  # try key -> alone since
    _sampled: set[str] = field(default_factory=set)  # try keys with a sample
    _live: dict[str, dict[str, TaskType]] = field(default_factory=dict)  # type -> keys waiting or running
    _told: dict[str, ActivityEstimate] = field(default_factory=dict)  # type -> what its tries were told

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @classmethod
    def of(cls, config: SimConfig, learn_interference: bool) -> Knowledge:
        """What one replay's placer learns: the monitor's noise and seed, the ramp and the
        confidence the predictive policy calls sure, from its config."""
        return cls(
            noise=config.telemetry_noise,
            seed=config.seed,
            ramp_s=config.sharing.ramp_s,
            learn_interference=learn_interference,
            progress=config.progress_reports,
            shared_readings=config.shared_readings,
            sure=(config.predictive or PredictiveSettings()).min_confidence,
        )

    def carry_from(self, earlier: Knowledge, activities: bool = True, runs: bool = True, fit: bool = True) -> None:
        """Start from what an earlier run learned and an executor's store keeps between runs: the
        activity samples (with the types' traits alike types borrow by), the solo run times and the
        interference fit with the stretches kept for it; nothing of that run's tries (sim/days.py).
        ``activities``/``runs``/``fit`` False: that piece starts afresh (bench/learning.py)."""
        if activities:
            self._samples = {n: list(v) for n, v in earlier._samples.items()}
            self._traits = dict(earlier._traits)
            self.activities = dict(earlier.activities)
        if runs:
            self._solo_runs = {n: list(v) for n, v in earlier._solo_runs.items()}
        if fit:
            self.interference, self.observations = earlier.interference, earlier.observations
            self._unresolved, self._grew = list(earlier._unresolved), True

    # -- activities ----------------------------------------------------------------------------
    def activity_of(self, task: TaskType) -> ActivityEstimate | None:
        """What is known of a task type's solo activity: learned, else borrowed from alike types."""
        est = self.activities.get(task.name)
        if est is None and self.activities:
            known = [(self._traits[name], a) for name, a in self.activities.items()]
            est = similar_activity(traits_of(task), known)
        if est is not None:
            self._told.setdefault(task.name, est)
        return est

    def note_placed(self, activity: ActivityEstimate | None) -> None:
        """Count what a placed try's decision knew of its activity (``placed``: none, learned,
        borrowed, and sure: confidence at least ``sure``)."""
        kind = "none" if activity is None else "learned" if activity.count else "borrowed"
        self.placed[kind] = self.placed.get(kind, 0) + 1
        if activity is not None and activity.confidence >= self.sure:
            self.placed["sure"] = self.placed.get("sure", 0) + 1

    def track(self, key: str, task: TaskType) -> None:
        """A try of ``task`` waits or runs under ``key``: tell it what is learned of its type."""
        self._live.setdefault(task.name, {})[key] = task

    def forget(self, key: str, task: TaskType) -> None:
        live = self._live.get(task.name)
        if live is not None:
            live.pop(key, None)
        self._alone.pop(key, None)
        self._sampled.discard(key)

    def alone(self, key: str, task: TaskType, reported: float, since: float, ramped_at: float) -> None:
        """Try ``key`` is its GPUs' only tenant from ``since`` on (its ramp ends at ``ramped_at``)."""
        if key not in self._sampled:
            self._alone[key] = _Alone(task, reported, max(since, ramped_at))

    def shared(self, key: str, now: float, tell: Tell) -> None:
        """Try ``key`` has co-tenants from ``now`` on (or ended): a sample if it was alone long enough."""
        entry = self._alone.pop(key, None)
        if entry is not None and now - entry.since >= self.sample_s:
            self._sample(key, entry, tell)

    def tick(self, now: float, tell: Tell) -> None:
        """A pass is about to run: sample every try alone for long enough."""
        if not self._alone:
            return
        due = [(k, e) for k, e in self._alone.items() if now - e.since >= self.sample_s]
        for key, entry in due:
            del self._alone[key]
            self._sample(key, entry, tell)

    def _sample(self, key: str, entry: _Alone, tell: Tell) -> None:
        self._sampled.add(key)
        self._learn(entry.task, ActivitySample(self._read(entry.reported), "process"), tell)

    def _read(self, value: float) -> float:
        """What the monitor's per-process reading shows of ``value``: with its noise, within [0, 1]."""
        return min(1.0, max(0.0, self.rng.gauss(value, self.noise)))

    def _shared_sample(self, r: SimRun) -> ActivitySample | None:
        """The reading of a try that never ran alone for ``sample_s``, as the executor's telemetry
        keeps it (executor/learning/telemetry.py: its own processes' SM utilisation while it shared,
        marked ``shared``): its reported activity times its speed beside its co-tenants against its
        speed alone (its processes hold the SMs that much less of the time; the same workload read
        0.28 shared and 0.50 alone, issue 41); None when it shared for less than ``sample_s``."""
        shared = [s for s in r.segments if s.with_types]
        seconds, work = sum(s.seconds for s in shared), sum(s.work for s in shared)
        if seconds < self.sample_s or work <= 0:
            return None
        slowed = min(1.0, work / seconds / max(1e-9, r.speed))
        return ActivitySample(self._read(_reported(r) * slowed), "process", shared=True)

    def _learn(self, task: TaskType, sample: ActivitySample, tell: Tell) -> None:
        """One more sample of ``task``'s type: its estimate refreshed, the tries it moves told."""
        name = task.name
        self._samples.setdefault(name, []).append(sample)
        self._traits[name] = traits_of(task)
        est = estimate_activity(self._samples[name])
        if name not in self.activities:
            self._grew = True  # a kept stretch may now be described (:meth:`_resolve`)
        self.activities[name] = est
        # tell the tries of this type, and of the unlearned types that borrow from it, where what
        # they are told moves (not for every sample: thousands may wait)
        for type_name, keys in self._live.items():
            if not keys or (type_name != name and type_name in self.activities):
                continue
            live = next(iter(keys.values()))
            now_est = est if type_name == name else self.activity_of(live)
            if now_est is None or not _moved(self._told.get(type_name), now_est):
                continue
            self._told[type_name] = now_est
            for live_key in keys:
                tell(live_key, now_est)

    # -- co-tenancy segments: a run, cut where its co-tenants change ------------------------------
    def regroup(self, gpus: Sequence[SimGpu], board: Sequence[SimGpu], now: float, tell: Tell) -> None:
        """Close the co-tenancy segment of every run on ``gpus`` whose co-tenants changed at ``now``
        (``board``: all the GPUs, by index)."""
        for g in gpus:
            for r in g.runs:
                with_now = tuple(sorted({o.arrival.task.name for i in r.gpus for o in board[i].runs if o is not r}))
                if with_now != r.seg_with:
                    _close_segment(r, now)
                    r.seg_with = with_now
                    if with_now:
                        self.shared(r.request.key, now, tell)
                    else:
                        self.run_alone(r, now)

    def run_alone(self, r: SimRun, now: float) -> None:
        """Run ``r`` is its GPUs' only tenant from ``now`` on: the monitor's reading of it may sample it."""
        self.alone(r.request.key, r.arrival.task, _reported(r), now, r.start + self.ramp_s)

    def run_ended(self, r: SimRun, now: float, tell: Tell, gpu_model: str) -> float | None:
        """Run ``r`` ended well at ``now``: its lessons (:meth:`ended`); returns how long it would
        have run alone, where a driver can know it (:func:`solo_duration`), else None."""
        _close_segment(r, now)
        key, task = r.request.key, r.arrival.task
        if not r.seg_with:
            self.shared(key, now, tell)  # its last seconds alone may give its sample
        if key not in self._sampled and self.shared_readings:
            sample = self._shared_sample(r)  # never alone long enough: its reading beside others
            if sample is not None:
                self._learn(task, sample, tell)
        self.forget(key, task)
        duration = now - r.start
        if r.resumed_work > 0:  # a try resumed from a checkpoint: its duration for the whole work
            duration *= task.solo_s / max(1e-9, task.solo_s - r.resumed_work)
        self.ended(key, task, duration, r.segments, gpu_model)
        return solo_duration(r.segments, duration, now - r.start, self.progress, self.sample_s)

    # -- interference ----------------------------------------------------------------------------
    def ended(self, key: str, task: TaskType, duration: float, segments: list[TrySegment], gpu_model: str) -> None:
        """A try ended after ``duration`` seconds with these co-tenancy segments: its lessons.

        Decision (issue 41): a shared stretch whose own or co-tenants' activity is not known yet
        is kept (:class:`_Unresolved`) and observed once they are, not dropped.  On day one of
        t1 most were dropped (54 of 61 shared segments: a co-tenant's type had not run alone
        yet), so a day of work left the fit at its prior and day two packed by it."""
        alone = sum(s.seconds for s in segments if not s.with_types)
        if alone >= duration - 1e-9:
            self._grew = self._grew or (task.name, gpu_model) not in self._solo_runs
            self._solo_runs.setdefault((task.name, gpu_model), []).append(duration)
            return
        if not self.learn_interference or duration <= 0:
            return
        if self.progress and self._from_progress(task.name, segments, gpu_model):
            return
        # without progress, or where it timed no shared segment against the try alone (as the
        # executor: executor/learning/learning.py), the whole try against its type's solo runs
        self._keep(_Unresolved(gpu_model, task.name, duration=duration, segments=tuple(segments)))

    def _from_progress(self, name: str, segments: list[TrySegment], gpu_model: str) -> bool:
        """Speed while alone against speed in each shared segment, from the try's own progress;
        False where no segment was long enough to time (nothing observed)."""
        solo = [s for s in segments if not s.with_types and s.seconds >= self.sample_s]
        seconds = sum(s.seconds for s in solo)
        if seconds <= 0:
            return False
        solo_rate = sum(s.work for s in solo) / seconds
        seen = False
        for s in segments:
            if not s.with_types or s.seconds < self.sample_s or s.work <= 0:
                continue
            stretch = solo_rate / (s.work / s.seconds)
            self._keep(_Unresolved(gpu_model, name, s.with_types, stretch))
            seen = True
        return seen

    def _keep(self, raw: _Unresolved) -> None:
        """Observe ``raw`` now if what describes it is known, else keep it for later."""
        obs = self._observation(raw)
        if obs is not None:
            self._pending.setdefault(raw.gpu_model, []).append(obs)
            return
        self._unresolved.append(raw)
        if len(self._unresolved) > UNRESOLVED_KEPT:
            del self._unresolved[0]

    def _observation(self, raw: _Unresolved) -> CollocationObservation | None:
        """``raw`` as an observation, or None while an activity (or the solo baseline) it needs is unknown."""
        own = self.activities.get(raw.task)
        if own is None:
            return None
        if not raw.segments:
            acts = self._learned(raw.co_types)
            if acts is None:
                return None
            return CollocationObservation.steady(
                raw.stretch, own.sm_activity, acts, task=raw.task, co_tasks=raw.co_types
            )
        solo = self._solo_runs.get((raw.task, raw.gpu_model))
        if not solo:
            return None
        parts = []
        for seg in raw.segments:
            acts = self._learned(seg.with_types)
            if acts is None:
                return None  # a co-tenant nobody knows yet: the observation would be a guess
            parts.append(Segment(seg.seconds / raw.duration, acts, seg.with_types))
        return CollocationObservation(raw.duration / statistics.median(solo), own.sm_activity, tuple(parts), raw.task)

    def _resolve(self) -> None:
        """Observe the kept stretches whose activities (and baselines) have become known."""
        if not (self._unresolved and self._grew):
            return
        self._grew = False
        left = []
        for raw in self._unresolved:
            obs = self._observation(raw)
            if obs is None:
                left.append(raw)
            else:
                self._pending.setdefault(raw.gpu_model, []).append(obs)
        self._unresolved = left

    def _learned(self, types: tuple[str, ...]) -> tuple[float, ...] | None:
        out = []
        for name in types:
            est = self.activities.get(name)
            if est is None:
                return None
            out.append(est.sm_activity)
        return tuple(out)

    def refit(self) -> InterferenceModel | None:
        """The interference model with the observations since the last call, or None (nothing new,
        or fewer than a batch once the fit rests on many: a refit costs milliseconds)."""
        self._resolve()
        waiting = sum(len(v) for v in self._pending.values())
        batch = max(REFIT_BATCH, self.observations // 8)
        if not waiting or (self.observations >= REFIT_BATCH_AFTER and waiting < batch):
            return None
        model = self.interference
        for spec, observations in self._pending.items():
            fit = model.fit_for(spec).observe_all(observations)
            model = InterferenceModel({**model.fits, fit.gpu_model: fit}, model.settings)
        self.observations += waiting
        self._pending = {}
        self.interference = model
        return model


def _reported(r: SimRun) -> float:
    """The activity the monitor reports of run ``r`` (telemetry's, else the truth's profile)."""
    return (r.reported or r.profile).sm_activity


def _close_segment(r: SimRun, now: float) -> None:
    if now > r.seg_start:
        r.segments.append(TrySegment(now - r.seg_start, r.seg_work - r.remaining, r.seg_with))
    r.seg_start, r.seg_work = now, r.remaining


def _moved(old: ActivityEstimate | None, new: ActivityEstimate) -> bool:
    """Whether an estimate moved enough to tell the tries that wait or run with the old one."""
    if old is None:
        return True
    return abs(old.sm_activity - new.sm_activity) > 0.01 or abs(old.confidence - new.confidence) > 0.05


def solo_duration(
    segments: Sequence[TrySegment], duration_s: float, ran_s: float, progress: bool, sample_s: float
) -> float | None:
    """How long an ended try (``duration_s`` for its whole work, ``ran_s`` on its GPUs) would have
    run alone, as a driver can know it: measured when it was alone all along, else (with progress
    reports) its work over its speed while alone, if it was alone long enough to measure; None when
    it cannot be known."""
    alone = [s for s in segments if not s.with_types]
    secs, work = sum(s.seconds for s in alone), sum(s.work for s in alone)
    if secs >= ran_s - 1e-9:
        return duration_s
    if progress and secs >= sample_s and work > 0:
        return float(duration_s / max(1e-9, ran_s) * sum(s.work for s in segments) * secs / work)
    return None
