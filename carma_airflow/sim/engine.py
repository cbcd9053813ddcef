"""Discrete-event replay of a trace through the same scheduling cycle the executor uses.

Events: arrivals, memory ramp-ups (where a CUDA OOM can happen), finishes, and wake-ups
(lock expiry, a metric window settling, a starvation bound passing).  After the events of one
instant are handled, one pass of the core's :class:`~carma_airflow.core.cycle.SchedulingCycle`
runs if anything changed: it owns the waiting tries, the reservations and the recovery after an
OOM; the simulation only plays the GPUs.  The GPU sharing model
(:mod:`carma_airflow.core.sharing`) decides slowdowns, telemetry, power and OOMs.

Truth apart from knowledge.  The *truth* is ``SimConfig.sharing`` (its ``beta``) and
``SimConfig.activity_scale``: a task whose catalogue activity is ``a`` demands ``S * a`` of its
GPU, and the slowdowns follow from those.  The monitor reports the catalogue activity (NVML busy
time over-states real demand), so ``S`` is what the learned interference model's activity scale
has to find.  The placer never reads the truth: per task type (the trace's task name, the
executor's Airflow task) it gets an activity estimate learned from the telemetry of earlier tries
that ran alone for a while (with a monitor's noise), and, for policies that predict, an
:class:`~carma_airflow.core.interference.InterferenceModel` updated as tries end, from each try's
stretch over the solo duration of earlier solo runs of its type and the co-tenants it had.
With a ``history`` estimator, a task type's memory is learned from the peaks its ended tries
held on the simulated GPUs (:mod:`carma_airflow.sim.memory`), as the executor learns it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.gpu import GpuSpec, GpuState
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.predictive import Predictive, PredictiveSettings
from carma_airflow.core.queueing import make_queue
from carma_airflow.core.recovery import Failure, FailureKind, GiveUp, RetryMode
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.risk import MetricWindow
from carma_airflow.core.sharing import ActivityProfile
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim.config import SimConfig
from carma_airflow.sim.learning import Knowledge, TrySegment
from carma_airflow.sim.memory import LearnedPeaks, memory_estimator, warm_peaks
from carma_airflow.sim.metrics import GpuIntegrals, NeverFit, SimResult, TaskRecord, TimelineEntry
from carma_airflow.sim.workload import Arrival

ARRIVE, RAMP, FINISH, WAKE = 0, 1, 2, 3


@dataclass(eq=False, slots=True)
class _Run:
    arrival: Arrival
    request: TaskRequest
    gpus: list[int]
    start: float
    profile: ActivityProfile  # the truth: what it demands of its GPU
    remaining: float  # solo seconds of work left
    reported: ActivityProfile | None = None  # what the monitor reports of it (telemetry)
    rate: float = 1.0
    last: float = 0.0
    version: int = 0
    ramped: bool = False
    held: int = 0
    alive: bool = True
    # co-tenancy as the driver would record it: seconds, work done, co-tenant task types
    seg_start: float = 0.0
    seg_work: float = 0.0  # ``remaining`` when the segment began
    seg_with: tuple[str, ...] = ()
    segments: list[TrySegment] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class _Gpu:
    index: int
    spec: GpuSpec
    uuid: str
    runs: list[_Run] = field(default_factory=list)
    used: int = 0
    smact: float = 0.0
    smocc: float = 0.0
    drama: float = 0.0
    changed_at: float = -1e18
    history: list[tuple[float, float, float, float]] = field(default_factory=list)
    integ: GpuIntegrals = field(default_factory=GpuIntegrals)
    since: float = 0.0
    cached: GpuState | None = None


@dataclass(slots=True)
class _Job:
    arrival: Arrival
    tries: int = 0
    ooms: int = 0
    first_start: float | None = None
    waited: float = 0.0
    end: float | None = None
    outcome: str = "pending"
    last_run_s: float = 0.0
    gpus: tuple[int, ...] = ()


class Simulation:
    def __init__(self, config: SimConfig, peaks: LearnedPeaks | None = None) -> None:
        self.cfg = config
        policy = make_policy(config.policy)
        if isinstance(policy, Predictive) and config.predictive is not None:
            policy = Predictive(settings=config.predictive)
        self.placer = Placer(policy, config.settings)
        self.queue = make_queue(config.queue)
        # the simulation knows when each process allocates (the ramp): it observes its tenants
        # itself, none is assumed seen after the lock time
        self.cycle = SchedulingCycle(
            self.placer,
            self.queue,
            reservations=Reservations(seen_after_s=None),
            recovery=config.recovery_settings,
            retry_mode=RetryMode(config.recovery_mode()),
        )
        self.estimator = memory_estimator(config)
        self.peaks = peaks.copy() if peaks is not None else LearnedPeaks()  # learned memory (sim/memory.py)
        self.model = config.sharing
        self.window = config.settings.risk.window
        self.gpus = [_Gpu(i, s, f"SIM-GPU-{i:04d}") for i, s in enumerate(config.gpus)]
        self.by_uuid = {g.uuid: g for g in self.gpus}
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = itertools.count()
        self.jobs: dict[int, _Job] = {}
        self.req_arrival: dict[str, Arrival] = {}
        self.timeline: list[TimelineEntry] = []
        self.oom_crashes = 0
        self.retries = 0
        self.passes = 0
        self.now = 0.0
        self.wakes: set[float] = set()
        self.never_fits: list[NeverFit] = []
        # knowledge, learned from simulated telemetry and ended tries only (see the module doc)
        self.predictive = policy if isinstance(policy, Predictive) else None
        self.know = Knowledge(
            noise=config.telemetry_noise,
            seed=config.seed,
            ramp_s=config.sharing.ramp_s,
            learn_interference=self.predictive is not None,
            progress=config.progress_reports,
            sure=(config.predictive or PredictiveSettings()).min_confidence,
        )
        self._tell = self.cycle.learn_activity

    @property
    def activities(self) -> dict[str, ActivityEstimate]:
        """Per task type, the activity learned so far."""
        return self.know.activities

    @property
    def interference(self) -> InterferenceModel:
        """The interference model learned so far."""
        return self.know.interference

    # -- events ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: object) -> None:
        heapq.heappush(self.events, (t, next(self.seq), kind, payload))

    def run(self, arrivals: list[Arrival]) -> SimResult:
        if self.cfg.warm_runs:
            self.peaks = warm_peaks(self.cfg, arrivals)
        for a in arrivals:
            self._push(a.submit_s, ARRIVE, a)
            self.jobs[a.job_id] = _Job(a)
        while self.events:
            t = self.events[0][0]
            self.now = t
            changed = False
            while self.events and self.events[0][0] == t:
                _, _, kind, payload = heapq.heappop(self.events)
                changed |= self._handle(kind, payload)
            if changed and len(self.cycle):
                self._schedule()
        return self._result(arrivals)

    def _handle(self, kind: int, payload: object) -> bool:
        if kind == ARRIVE:
            assert isinstance(payload, Arrival)
            self._submit(self._request(payload))
            return True
        if kind == WAKE:
            self.wakes.discard(self.now)
            return True
        assert isinstance(payload, tuple)
        run, version = payload
        if not run.alive:
            return False
        if kind == RAMP:
            self._ramp(run)
        elif version == run.version and run.ramped:
            self._finish(run)
        else:
            return False
        return True

    def _request(self, arrival: Arrival) -> TaskRequest:
        hist = self.peaks.of(arrival.task.name)
        need = self.estimator.estimate(arrival.task.memory_info(arrival.declared_mib, hist))
        assert need is not None  # the chain ends with the floor
        return TaskRequest(
            key=f"job{arrival.job_id}#1",
            label=f"{arrival.task.name}[{arrival.job_id}]",
            memory=need,
            gpus=arrival.task.gpus,
            submitted_at=arrival.submit_s,
            activity=self.know.activity_of(arrival.task),
        )

    def _submit(self, request: TaskRequest) -> None:
        self.cycle.submit(request, self.now)
        arrival = self.jobs[int(request.key[3:].split("#")[0])].arrival
        self.req_arrival[request.key] = arrival
        self.know.track(request.key, arrival.task)

    # -- scheduling --------------------------------------------------------------------
    def _states(self) -> list[GpuState]:
        """The GPUs as a monitor would read them (the cycle adds the tenants); a settled GPU's
        state is kept, so the cycle's view reuses it too."""
        states = []
        for g in self.gpus:
            settled = self.now - g.changed_at >= self.window
            if g.cached is None or not settled:
                g.cached = self._state(g, settled)
            states.append(g.cached)
        return states

    def _state(self, g: _Gpu, settled: bool) -> GpuState:
        risk = self.cfg.settings.risk
        if settled:
            window = MetricWindow.constant(g.smact, g.smocc, g.drama, risk)
        else:
            times = [h[0] for h in g.history]
            samples = []
            for s in range(self.window - 1, -1, -1):  # oldest sample first
                k = max(0, bisect.bisect_right(times, self.now - s) - 1)
                samples.append(g.history[k])
            window = MetricWindow(
                tuple(x[1] for x in samples), tuple(x[2] for x in samples), tuple(x[3] for x in samples), risk
            )
        return GpuState(
            uuid=g.uuid,
            index=g.index,
            spec=g.spec,
            free_mib=g.spec.memory_mib - g.used,
            used_mib=g.used,
            window=window,
        )

    def _schedule(self) -> None:
        self.passes += 1
        if self.know.pending:
            model = self.know.refit()
            if model is not None and self.predictive is not None:
                self.predictive.use_model(model)
        self.know.tick(self.now, self._tell)
        result = self.cycle.run(self.now, self._states(), waiting_decisions=False)
        for p in result.placed:
            self._start(p.request, [self.by_uuid[u].index for u in p.decision.gpu_uuids], p.waited_s)
        for nf in result.never_fits:
            arrival = self.req_arrival[nf.request.key]
            self.never_fits.append(NeverFit(arrival.job_id, arrival.task.name, nf.decision.summary))
            self.know.forget(nf.request.key, arrival.task)
            self._lose(arrival.job_id)
        if len(self.cycle):
            moving = [g.changed_at + self.window for g in self.gpus if self.now - g.changed_at < self.window]
            if moving and self.placer.policy.checks_risk:
                self._wake(min(moving))
            starving_at = self.cycle.next_starvation_at(self.now)
            if starving_at is not None:
                self._wake(starving_at + 1e-6)

    def _wake(self, t: float) -> None:
        if t > self.now and t not in self.wakes:
            self.wakes.add(t)
            self._push(t, WAKE, None)

    # -- runs --------------------------------------------------------------------------
    def _closure(self, gpus: list[_Gpu]) -> list[_Gpu]:
        seen = {g.index: g for g in gpus}
        for g in gpus:
            for r in g.runs:
                for i in r.gpus:
                    seen.setdefault(i, self.gpus[i])
        return list(seen.values())

    def _advance(self, gpus: list[_Gpu]) -> None:
        """Bring integrals and progress of these GPUs (and their runs) up to now."""
        for g in gpus:
            dt = self.now - g.since
            if dt > 0:
                power = self.model.power_w(g.spec, bool(g.runs), g.smact, g.drama)
                g.integ.add(dt, g.smact, g.smocc, g.drama, g.used / g.spec.memory_mib, power, bool(g.runs))
                g.since = self.now
            for r in g.runs:
                if r.last < self.now:
                    r.remaining -= r.rate * (self.now - r.last)
                    r.last = self.now

    def _rerate(self, changed: list[_Gpu], closure: list[_Gpu]) -> None:
        """Recompute slowdowns on changed GPUs and telemetry on every GPU they touch."""
        worst: dict[int, float] = {}
        for g in closure:
            if not g.runs:
                continue
            for r, s in zip(g.runs, self.model.slowdowns([r.profile for r in g.runs]), strict=True):
                worst[id(r)] = max(worst.get(id(r), 1.0), s)
        for g in changed:
            for r in g.runs:
                rate = 1.0 / worst.get(id(r), 1.0)
                if abs(rate - r.rate) > 1e-12:
                    r.rate = rate
                    r.version += 1
                    if r.ramped:
                        self._push(self.now + max(0.0, r.remaining) / r.rate, FINISH, (r, r.version))
        self._mark(closure)
        self._regroup(closure)

    def _regroup(self, gpus: list[_Gpu]) -> None:
        """Close the co-tenancy segment of every run on these GPUs whose co-tenants changed."""
        for g in gpus:
            for r in g.runs:
                names = sorted({o.arrival.task.name for i in r.gpus for o in self.gpus[i].runs if o is not r})
                with_now = tuple(names)
                if with_now != r.seg_with:
                    self._close_segment(r)
                    r.seg_with = with_now
                    if with_now:
                        self.know.shared(r.request.key, self.now, self._tell)
                    else:
                        self._alone(r)

    def _close_segment(self, r: _Run) -> None:
        if self.now > r.seg_start:
            r.segments.append(TrySegment(self.now - r.seg_start, r.seg_work - r.remaining, r.seg_with))
        r.seg_start, r.seg_work = self.now, r.remaining

    def _alone(self, r: _Run) -> None:
        reported = (r.reported or r.profile).sm_activity
        self.know.alone(r.request.key, r.arrival.task, reported, self.now, r.start + self.model.ramp_s)

    def _mark(self, gpus: list[_Gpu]) -> None:
        for g in gpus:
            smact, smocc, drama = self.model.telemetry(
                [r.reported or r.profile for r in g.runs], [r.rate for r in g.runs]
            )
            g.smact, g.smocc, g.drama = smact, smocc, drama
            g.changed_at = self.now
            g.history.append((self.now, smact, smocc, drama))
            if len(g.history) > 4 * self.window:
                cut = bisect.bisect_right([h[0] for h in g.history], self.now - self.window) - 1
                if cut > 0:
                    del g.history[:cut]
            g.cached = None

    def _start(self, request: TaskRequest, gpu_ids: list[int], waited_s: float) -> None:
        arrival = self.req_arrival[request.key]
        job = self.jobs[arrival.job_id]
        job.tries += 1
        job.waited += waited_s
        self.know.note_placed(request.activity)
        if job.first_start is None:
            job.first_start = self.now
        job.gpus = tuple(gpu_ids)
        reported = arrival.task.profile
        scale = self.cfg.activity_scale
        true = reported if scale == 1.0 else _scaled(reported, scale)
        run = _Run(
            arrival, request, gpu_ids, self.now, true, arrival.task.solo_s, reported, last=self.now, seg_start=self.now
        )
        run.seg_work = run.remaining
        gpus = [self.gpus[i] for i in gpu_ids]
        closure = self._closure(gpus)
        self._advance(closure)
        for g in gpus:
            g.runs.append(run)
        self._rerate(gpus, self._closure(gpus))
        if not run.seg_with:
            self._alone(run)
        self._push(self.now + self.model.ramp_s, RAMP, (run, -1))
        if self.placer.policy.uses_lock:
            self._wake(self.now + self.cfg.settings.lock_s)

    def _ramp(self, run: _Run) -> None:
        if not run.alive:
            return
        gpus = [self.gpus[i] for i in run.gpus]
        peak = run.arrival.task.peak_mib
        free = min(g.spec.memory_mib - g.used for g in gpus)
        closure = self._closure(gpus)
        self._advance(closure)
        if self.model.oom_at_ramp(peak, free):
            self._crash(run, gpus, reached=max(0, free))
            return
        run.ramped = True
        run.held = peak
        self.cycle.observe(run.request.key, peak)
        for g in gpus:
            g.used += peak
        self._mark(gpus)
        self._push(self.now + max(0.0, run.remaining) / run.rate, FINISH, (run, run.version))

    def _remove(self, run: _Run, gpus: list[_Gpu]) -> None:
        closure = self._closure(gpus)
        self._advance(closure)
        run.alive = False
        for g in gpus:
            g.runs.remove(run)
            g.used -= run.held
        self._rerate(gpus, closure)

    def _finish(self, run: _Run) -> None:
        gpus = [self.gpus[i] for i in run.gpus]
        self._remove(run, gpus)
        self.cycle.release(run.request.key)
        self._learn_from(run)
        job = self.jobs[run.arrival.job_id]
        job.end = self.now
        job.outcome = "success"
        job.last_run_s = self.now - run.start
        self.peaks.add(run.arrival.task.name, run.held)  # what the GPU held for it (telemetry)
        self.timeline.append(
            TimelineEntry(run.arrival.job_id, run.arrival.task.name, tuple(run.gpus), run.start, self.now, "success")
        )

    def _crash(self, run: _Run, gpus: list[_Gpu], reached: int) -> None:
        self._remove(run, gpus)
        self.oom_crashes += 1
        job = self.jobs[run.arrival.job_id]
        job.ooms += 1
        self.timeline.append(
            TimelineEntry(run.arrival.job_id, run.arrival.task.name, tuple(run.gpus), run.start, self.now, "oom")
        )
        self.know.forget(run.request.key, run.arrival.task)
        # the cycle releases the try's GPUs, plans the next try in the configured mode (it counts
        # the OOM tries itself) and queues it
        plan = self.cycle.recover(
            run.request.key,
            Failure(FailureKind.CUDA_OOM, "simulated CUDA out of memory"),
            now=self.now,
            peak_mib=reached,
        )
        if isinstance(plan, GiveUp):
            self._lose(run.arrival.job_id)
            return
        self.retries += 1
        self.req_arrival[plan.request.key] = run.arrival
        self.know.track(plan.request.key, run.arrival.task)

    # -- learning (what a driver can know: telemetry and ended tries) ---------------------
    def _learn_from(self, run: _Run) -> None:
        """An ended try's lessons (:class:`~carma_airflow.sim.learning.Knowledge`)."""
        self._close_segment(run)
        key, task = run.request.key, run.arrival.task
        if not run.seg_with:
            self.know.shared(key, self.now, self._tell)  # its last seconds alone may give its sample
        self.know.forget(key, task)
        self.know.ended(key, task, self.now - run.start, run.segments, self.gpus[run.gpus[0]].spec.name)

    def _lose(self, job_id: int) -> None:
        job = self.jobs[job_id]
        job.outcome = "lost"
        job.end = self.now

    # -- result ------------------------------------------------------------------------
    def _result(self, arrivals: list[Arrival]) -> SimResult:
        ends = [j.end for j in self.jobs.values() if j.end is not None and j.outcome == "success"]
        start = min((a.submit_s for a in arrivals), default=0.0)
        makespan = (max(ends) - start) if ends else 0.0
        self.now = start + makespan
        self._advance(self.gpus)
        records = tuple(
            TaskRecord(
                job_id=j.arrival.job_id,
                task=j.arrival.task.name,
                gpus=j.arrival.task.gpus,
                submit_s=j.arrival.submit_s,
                first_start_s=j.first_start,
                end_s=j.end,
                wait_s=j.waited,
                run_s=j.last_run_s,
                solo_s=j.arrival.task.solo_s,
                tries=j.tries,
                oom_crashes=j.ooms,
                outcome="success" if j.outcome == "success" else "lost",
            )
            for j in sorted(self.jobs.values(), key=lambda j: j.arrival.job_id)
        )
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g.spec.name] = counts.get(g.spec.name, 0) + 1
        return SimResult(
            policy=self.placer.policy.name,
            estimator=self.estimator.name,
            queue=self.queue.name,
            recovery=self.cfg.recovery_mode(),
            gpus=",".join(f"{n}x{name}" for name, n in counts.items()),
            tasks=records,
            timeline=tuple(self.timeline),
            integrals=tuple(g.integ for g in self.gpus),
            makespan_s=makespan,
            oom_crashes=self.oom_crashes,
            retries=self.retries,
            passes=self.passes,
            never_fits=tuple(self.never_fits),
        )


def _scaled(p: ActivityProfile, scale: float) -> ActivityProfile:
    return ActivityProfile(
        min(1.0, p.sm_activity * scale), min(1.0, p.sm_occupancy * scale), min(1.0, p.dram_activity * scale)
    )


def simulate(config: SimConfig, arrivals: list[Arrival]) -> SimResult:
    """Run one simulation."""
    return Simulation(config).run(arrivals)


__all__ = ["SimConfig", "Simulation", "simulate"]
