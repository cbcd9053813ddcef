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
has to find.  The placer never reads the truth: what it knows of activities and interference is
learned from telemetry and ended tries, as a driver learns it (:mod:`carma_airflow.sim.learning`),
and, with a ``history`` estimator, a task type's memory from the peaks its ended tries held on the
simulated GPUs (:mod:`carma_airflow.sim.memory`), as the executor learns it.

Where things live: this module is the event loop (arrivals, ramps, finishes, wake-ups, the
scheduling pass) and the jobs' bookkeeping; :mod:`carma_airflow.sim.gpus` plays the GPUs
(rates, telemetry, the memory a try allocates at its ramp and the CUDA OOM);
:class:`~carma_airflow.sim.learning.Knowledge` cuts each run into co-tenancy segments and learns
from them; :mod:`carma_airflow.sim.jobs` records jobs and builds the result;
:mod:`carma_airflow.sim.days` replays the earlier days a run starts after (``warm_runs``).
"""

from __future__ import annotations

import gc
import heapq
import itertools

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.durations import alone_from_shared
from carma_airflow.core.policies.predictive import Predictive
from carma_airflow.core.queueing import make_queue
from carma_airflow.core.recovery import Failure, FailureKind, GiveUp, RetryMode
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.speed import slowest
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.vouch import vouched_need
from carma_airflow.sim.config import SimConfig
from carma_airflow.sim.days import start_after, warm_start
from carma_airflow.sim.fencing import CrashTally, Refusal, crash_reason, sim_fence
from carma_airflow.sim.gpus import SimGpu, SimGpus, SimRun, scaled
from carma_airflow.sim.jobs import JobRecord, build_result, makespan_of
from carma_airflow.sim.learning import Knowledge
from carma_airflow.sim.memory import LearnedPeaks, memory_estimator
from carma_airflow.sim.metrics import NeverFit, SimResult, TimelineEntry
from carma_airflow.sim.speed import make_speed_truth
from carma_airflow.sim.truth import make_truth
from carma_airflow.sim.workload import Arrival

ARRIVE, RAMP, FINISH, WAKE, GROW, SAVE = 0, 1, 2, 3, 4, 5
# a run's full collections: one per this many of the default's (Python's heuristic, 10, ran 53 on
# 10,000 tasks, each walking the placer's kept prices: 20 % of the run, and they freed nothing)
FULL_COLLECTIONS_EVERY = 1000
# and its young collections: after this many new objects, a middle one per this many of them (at
# least Python's own).  Python's 700 and 10 ran 4,900 young and 450 middle collections on the deep
# queue's 10,000 tasks, 2.7 s of CPU walking what the passes had just built and still held (their
# facts, prices and plays); these ran 174 and 15, 1.6 s (round 43).  No decision moves: what a
# collection frees is garbage either way
YOUNG_COLLECTION_AFTER = 100_000
MIDDLE_COLLECTIONS_EVERY = 50


class Simulation:
    def __init__(self, config: SimConfig, peaks: LearnedPeaks | None = None) -> None:
        self.cfg = config
        policy = config.built_policy()
        self.fence = sim_fence(config)  # the host's mechanism and cap rule, resolved as the executor does
        # each request carries what the run's fence promises it for life (FenceModel.kept_margin_mib)
        self.kept_margin_mib = self.fence.model.kept_margin_mib(config.settings.headroom_mib)
        self.placer = Placer(policy, config.settings)
        self.queue = make_queue(config.queue)
        # the simulation knows when each process allocates (the ramp): it observes its tenants
        # itself, none is assumed seen after the lock time
        self.cycle = SchedulingCycle(
            self.placer,
            self.queue,
            reservations=Reservations(seen_after_s=None),
            recovery=config.bounded_recovery(),
            retry_mode=RetryMode(config.recovery_mode()),
        )
        self.estimator = memory_estimator(config)
        self.peaks = peaks.copy() if peaks is not None else LearnedPeaks()  # learned memory (sim/memory.py)
        self.model = config.sharing
        if config.checkpoint_every_s < 0:
            raise ValueError(f"checkpoint_every_s must be >= 0, got {config.checkpoint_every_s}")
        # spare 0: a simulated GPU's memory is all usable (no driver or context overhead)
        self.board = SimGpus(
            config.gpus, config.sharing, config.settings.risk, self.fence.model, 0, config.settings.lock_s
        )
        self.board.growth, self.board.seed = config.memory_growth, config.seed
        self.board.margin_mib = config.settings.headroom_mib
        self.gpus = self.board.gpus
        self.by_uuid = self.board.by_uuid
        self._models = tuple(sorted({g.spec.name for g in self.gpus}))  # the cluster's GPU models (_vouched)
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = itertools.count()
        self.jobs: dict[int, JobRecord] = {}
        self.req_arrival: dict[str, Arrival] = {}
        self.timeline: list[TimelineEntry] = []
        self.crashes = CrashTally()  # OOM crashes, their victims and the GPU-seconds they threw away
        self.retries = 0
        self.passes = 0
        self.now = 0.0
        self.wakes: set[float] = set()
        self.never_fits: list[NeverFit] = []
        # knowledge, learned from simulated telemetry and ended tries only (see the module doc)
        self.predictive = policy if isinstance(policy, Predictive | CompletionTime) else None
        self.know = Knowledge.of(config, learn_interference=self.predictive is not None)
        self._tell = self.cycle.learn_activity
        self.run_times: list[tuple[str, float]] = []  # (task type, solo seconds) learned, in order
        self.run_models: list[str] = []  # the GPU model each of them ran on (its slowest GPU's)
        # (task type, seconds, GPU model, estimate alone or None) of tries that ran shared all along:
        # bounds of their runs alone, and the policy's estimates of them (learn_bound)
        self.run_bounds: list[tuple[str, float, str, float | None]] = []

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
        young, middle, old = gc.get_threshold()  # a run's garbage is short-lived, its caches long-lived
        gc.set_threshold(
            max(young, YOUNG_COLLECTION_AFTER), max(middle, MIDDLE_COLLECTIONS_EVERY), FULL_COLLECTIONS_EVERY
        )
        try:
            return self._run(arrivals)
        finally:
            gc.set_threshold(young, middle, old)

    def _run(self, arrivals: list[Arrival]) -> SimResult:
        if self.cfg.truth not in ("", "sharing"):
            self.board.truth = make_truth(self.cfg.truth, self.cfg.sharing, [a.task.name for a in arrivals])
        if self.cfg.speed_truth not in ("", "alike"):
            self.board.speed = make_speed_truth(self.cfg.speed_truth, [a.task.name for a in arrivals], self.cfg.gpus)
        if self.cfg.warm_runs:
            start_after(self, warm_start(self.cfg, arrivals, type(self)))
        for a in arrivals:
            self._push(a.submit_s, ARRIVE, a)
            self.jobs[a.job_id] = JobRecord(a)
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
        elif kind == GROW:
            self._grow(run)
        elif kind == SAVE:
            self._save(run)
            return False
        elif version == run.version and run.ramped:
            self._finish(run)
        else:
            return False
        return True

    def _request(self, arrival: Arrival) -> TaskRequest:
        hist = self.peaks.of(arrival.task.name)
        need = self.estimator.estimate(arrival.task.memory_info(arrival.declared_mib, hist))
        assert need is not None  # the chain ends with the floor
        if hist and self.cfg.vouch_peaks:
            cold = self.estimator.estimate(arrival.task.memory_info(arrival.declared_mib, ()))
            need = vouched_need(need, cold, self._vouched())
        return TaskRequest(
            key=f"job{arrival.job_id}#1",
            label=f"{arrival.task.name}[{arrival.job_id}]",
            memory=need,
            gpus=arrival.task.gpus,
            submitted_at=arrival.submit_s,
            activity=self.know.activity_of(arrival.task),
            kept_margin_mib=self.kept_margin_mib,
        )

    def _vouched(self) -> bool:
        """Whether the interference fit is learned for every GPU model of the cluster (core/vouch.py)."""
        model = self.know.interference
        return all(model.fit_for(name).learned for name in self._models)

    def _submit(self, request: TaskRequest) -> None:
        self.cycle.submit(request, self.now)
        arrival = self.jobs[int(request.key[3:].split("#")[0])].arrival
        self.req_arrival[request.key] = arrival
        self.know.track(request.key, arrival.task)

    # -- scheduling --------------------------------------------------------------------
    def _states(self) -> list[GpuState]:
        return self.board.states(self.now)

    def _schedule(self) -> None:
        self.passes += 1
        model = self.know.refit()  # None: nothing new, or too little to refit
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
            moving = self.board.unsettled_until(self.now)
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
    def _rerate(self, changed: list[SimGpu], closure: list[SimGpu]) -> None:
        """Recompute slowdowns on changed GPUs and telemetry on every GPU they touch."""
        for r in self.board.rerate(changed, closure):
            if r.ramped:
                self._push(self.now + max(0.0, r.remaining) / r.rate, FINISH, (r, r.version))
        self.board.mark(closure, self.now)
        self.know.regroup(closure, self.gpus, self.now, self._tell)  # co-tenancy segments (sim/learning.py)

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
        true = reported if scale == 1.0 else scaled(reported, scale)
        run = SimRun(
            arrival,
            request,
            gpu_ids,
            self.now,
            true,
            arrival.task.solo_s - job.saved_work,  # resumed from the job's last checkpoint
            reported,
            last=self.now,
            seg_start=self.now,
        )
        run.seg_work = run.remaining
        run.resumed_work = run.saved_work = job.saved_work
        run.load_s = self.model.ramp_s if arrival.load_s is None else arrival.load_s
        gpus = self.board.put(run, self.now)
        self._rerate(gpus, self.board.closure(gpus))
        if not run.seg_with:
            self.know.run_alone(run, self.now)
        self._push(self.now + run.load_s, RAMP, (run, -1))
        if self.placer.policy.uses_lock:
            self._wake(self.now + self.cfg.settings.lock_s)

    def _ramp(self, run: SimRun) -> None:
        if not run.alive:
            return
        refused = self.board.ramp(run, self.now)
        if refused is not None:
            self._crash(run, refused)
            return
        self.cycle.observe(run.request.key, run.held)
        self._push(self.now + max(0.0, run.remaining) / run.rate, FINISH, (run, run.version))
        later = self.board.growth_in(run)
        if later is not None:
            self._push(self.now + later, GROW, (run, -1))
        if self.cfg.checkpoint_every_s > 0:
            self._push(self.now + self.cfg.checkpoint_every_s, SAVE, (run, -1))

    def _save(self, run: SimRun) -> None:
        """The try saves a checkpoint: its job resumes from here if a later try must start again."""
        self.board.advance(self.board.closure([self.gpus[i] for i in run.gpus]), self.now)
        run.saved_work, run.saved_at = max(run.saved_work, run.done_work), self.now
        if run.remaining > 0:
            self._push(self.now + self.cfg.checkpoint_every_s, SAVE, (run, -1))

    def _grow(self, run: SimRun) -> None:
        """The try's true peak exceeds the catalogue's (``--memory-growth``, sim/fencing.py)."""
        while run.alive and (refused := self.board.allocate(run, self.board.growth_mib(run), self.now)):
            self._crash(*self.board.who_crashes(run, refused, self.now))  # unfenced: maybe a co-tenant
        if run.alive:
            self.cycle.observe(run.request.key, run.held)

    def _remove(self, run: SimRun) -> None:
        self._rerate(*self.board.take_off(run, self.now))

    def _ended(self, key: str, ok: bool) -> None:
        """Tell the policy a try ended (completion-time's track record: core/track_record.py)."""
        if isinstance(self.predictive, CompletionTime):  # the policy learn_duration and learn_bound tell
            self.predictive.try_ended(key, self.now, ok)

    def _finish(self, run: SimRun) -> None:
        self._remove(run)
        self.cycle.release(run.request.key)
        # the slowdown it was placed at, taken before the policy hears it ended
        slowdown = (
            self.predictive.take_slowdown(run.request.key) if isinstance(self.predictive, CompletionTime) else None
        )
        self._ended(run.request.key, True)
        alone_s = self.know.run_ended(run, self.now, self._tell, self.gpus[run.gpus[0]].spec.name)
        model = slowest(self.gpus[i].spec for i in run.gpus).name  # it went at its slowest GPU's pace
        if alone_s is not None:
            self.run_times.append((run.arrival.task.name, alone_s))  # what a later day starts from
            self.run_models.append(model)
            if isinstance(self.predictive, CompletionTime):
                self.predictive.learn_duration(run.arrival.task.name, alone_s, model)
        elif run.resumed_work <= 0:  # shared all along: its duration bounds its run alone (durations.py)
            estimate = alone_from_shared(self.now - run.start, slowdown)  # and over its slowdown estimates it
            self.run_bounds.append((run.arrival.task.name, self.now - run.start, model, estimate))
            if isinstance(self.predictive, CompletionTime):
                self.predictive.learn_bound(run.arrival.task.name, self.now - run.start, model, estimate)
        job = self.jobs[run.arrival.job_id]
        job.end = self.now
        job.outcome = "success"
        job.last_run_s = self.now - run.start
        job.last_resumed_s = run.resumed_work
        self.peaks.add(run.arrival.task.name, run.held)  # what the GPU held for it (telemetry)
        self.timeline.append(
            TimelineEntry(run.arrival.job_id, run.arrival.task.name, tuple(run.gpus), run.start, self.now, "success")
        )

    def _crash(self, run: SimRun, refused: Refusal) -> None:
        self._remove(run)
        lost = self.crashes.count(run.start, run.saved_at, len(run.gpus), refused.victim, self.now)
        job = self.jobs[run.arrival.job_id]
        job.ooms += 1
        job.saved_work = max(job.saved_work, run.saved_work)  # the next try resumes from here
        reason = crash_reason(run, refused)
        where = (run.arrival.job_id, run.arrival.task.name, tuple(run.gpus), run.start, self.now)
        self.timeline.append(TimelineEntry(*where, "oom", reason=reason, lost_gpu_s=round(lost, 3)))
        self.know.forget(run.request.key, run.arrival.task)
        self._ended(run.request.key, False)
        # the cycle releases the try's GPUs, plans the next try in the configured mode (it counts
        # the OOM tries itself) and queues it
        plan = self.cycle.recover(
            run.request.key,
            Failure(FailureKind.CAP_OOM, reason) if refused.past_cap else Failure(FailureKind.CUDA_OOM, reason),
            now=self.now,
            peak_mib=refused.reached_mib,
        )
        if isinstance(plan, GiveUp):
            self._lose(run.arrival.job_id)
            return
        self.retries += 1
        self.req_arrival[plan.request.key] = run.arrival
        self.know.track(plan.request.key, run.arrival.task)

    def _lose(self, job_id: int) -> None:
        job = self.jobs[job_id]
        job.outcome = "lost"
        job.end = self.now

    # -- result ------------------------------------------------------------------------
    def _result(self, arrivals: list[Arrival]) -> SimResult:
        start, makespan = makespan_of(list(self.jobs.values()), arrivals)
        self.now = start + makespan
        self.board.advance(self.gpus, self.now)
        return build_result(
            policy=self.placer.policy.name
            + ("" if self.cfg.min_gain is None else f" (min_gain {self.cfg.min_gain:g})"),
            estimator=self.estimator.name,
            queue=self.queue.name,
            recovery=self.cfg.recovery_mode(),
            jobs=list(self.jobs.values()),
            gpus=self.gpus,
            timeline=self.timeline,
            makespan_s=makespan,
            oom_crashes=self.crashes.oom_crashes,
            victims=self.crashes.victims,
            fence=self.fence.summary(),
            checkpoint_every_s=self.cfg.checkpoint_every_s,
            crashed_gpu_s=self.crashes.crashed_gpu_s,
            lost_gpu_s=self.crashes.lost_gpu_s,
            retries=self.retries,
            passes=self.passes,
            never_fits=self.never_fits,
        )


def simulate(config: SimConfig, arrivals: list[Arrival]) -> SimResult:
    """Run one simulation."""
    return Simulation(config).run(arrivals)


__all__ = ["SimConfig", "Simulation", "simulate"]
