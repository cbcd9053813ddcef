"""The simulated GPUs: what runs on each, how fast, what the monitor reads, and the memory a try
allocates when its ramp ends (where a CUDA OOM happens).

The event loop (:mod:`carma_airflow.sim.engine`) decides *when* things happen; this module says
what a GPU is at that instant.  Rates come from the truth (:mod:`carma_airflow.sim.truth`: by default
``SimConfig.sharing`` over the runs' true profiles); telemetry is computed from the reported profiles.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from carma_airflow.core.gpu import GpuSpec, GpuState
from carma_airflow.core.risk import MetricWindow, RiskSettings
from carma_airflow.core.sharing import ActivityProfile, SharingModel
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim.fencing import Refusal, SimIsolation, allocate, growth_of, next_allocator, promised, worst
from carma_airflow.sim.learning import TrySegment
from carma_airflow.sim.metrics import GpuIntegrals
from carma_airflow.sim.truth import SharingTruth, Truth
from carma_airflow.sim.workload import Arrival


@dataclass(eq=False, slots=True)
class SimRun:
    """One try on its GPUs."""

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
class SimGpu:
    index: int
    spec: GpuSpec
    uuid: str
    runs: list[SimRun] = field(default_factory=list)
    used: int = 0
    smact: float = 0.0
    smocc: float = 0.0
    drama: float = 0.0
    changed_at: float = -1e18
    history: list[tuple[float, float, float, float]] = field(default_factory=list)
    integ: GpuIntegrals = field(default_factory=GpuIntegrals)
    since: float = 0.0
    cached: GpuState | None = None


def scaled(p: ActivityProfile, scale: float) -> ActivityProfile:
    """A profile's demand times ``scale`` (capped at the whole GPU)."""
    return ActivityProfile(
        min(1.0, p.sm_activity * scale), min(1.0, p.sm_occupancy * scale), min(1.0, p.dram_activity * scale)
    )


class SimGpus:
    """The simulated GPUs under one sharing model (the truth), with the monitor's window."""

    def __init__(
        self,
        specs: Sequence[GpuSpec],
        model: SharingModel,
        risk: RiskSettings,
        isolation: SimIsolation = SimIsolation.NONE,
        lock_s: float = 30.0,
    ) -> None:
        self.model = model
        self.truth: Truth = SharingTruth(model)  # what slows tenants down (sim/truth.py)
        self.isolation = isolation  # who crashes when memory runs out (sim/fencing.py)
        self.lock_s = lock_s  # how long the placer counts a try at its reservation (sim/fencing.promised)
        self.growth = 0.0  # the truth: true peaks exceed the catalogue's by up to this share
        self.margin_mib = 2048  # a fixed cap's room above the reservation (SimIsolation.FIXED)
        self.seed = 0
        self.risk = risk
        self.window = risk.window
        self.gpus = [SimGpu(i, s, f"SIM-GPU-{i:04d}") for i, s in enumerate(specs)]
        self.by_uuid = {g.uuid: g for g in self.gpus}

    # -- what the monitor reads -----------------------------------------------------------
    def states(self, now: float) -> list[GpuState]:
        """The GPUs as a monitor would read them (the cycle adds the tenants); a settled GPU's
        state is kept, so the cycle's view reuses it too."""
        states = []
        for g in self.gpus:
            settled = now - g.changed_at >= self.window
            if g.cached is None or not settled:
                g.cached = self._state(g, settled, now)
            states.append(g.cached)
        return states

    def _state(self, g: SimGpu, settled: bool, now: float) -> GpuState:
        risk = self.risk
        if settled:
            window = MetricWindow.constant(g.smact, g.smocc, g.drama, risk)
        else:
            times = [h[0] for h in g.history]
            samples = []
            for s in range(self.window - 1, -1, -1):  # oldest sample first
                k = max(0, bisect.bisect_right(times, now - s) - 1)
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

    def unsettled_until(self, now: float) -> list[float]:
        """When the windows of GPUs whose telemetry changed recently settle."""
        return [g.changed_at + self.window for g in self.gpus if now - g.changed_at < self.window]

    # -- progress and rates -----------------------------------------------------------------
    def closure(self, gpus: list[SimGpu]) -> list[SimGpu]:
        """These GPUs and every GPU a run on them also runs on."""
        seen = {g.index: g for g in gpus}
        for g in gpus:
            for r in g.runs:
                for i in r.gpus:
                    seen.setdefault(i, self.gpus[i])
        return list(seen.values())

    def advance(self, gpus: list[SimGpu], now: float) -> None:
        """Bring integrals and progress of these GPUs (and their runs) up to now."""
        for g in gpus:
            dt = now - g.since
            if dt > 0:
                power = self.model.power_w(g.spec, bool(g.runs), g.smact, g.drama)
                g.integ.add(dt, g.smact, g.smocc, g.drama, g.used / g.spec.memory_mib, power, bool(g.runs))
                g.since = now
            for r in g.runs:
                if r.last < now:
                    r.remaining -= r.rate * (now - r.last)
                    r.last = now

    def rerate(self, changed: list[SimGpu], closure: list[SimGpu]) -> list[SimRun]:
        """Recompute the rates of the runs on changed GPUs (a run on several GPUs goes at its
        slowest GPU's pace); returns the runs whose rate changed, in order."""
        worst: dict[int, float] = {}
        for g in closure:
            if not g.runs:
                continue
            slow = self.truth.slowdowns([r.profile for r in g.runs], [r.arrival.task.name for r in g.runs])
            for r, s in zip(g.runs, slow, strict=True):
                worst[id(r)] = max(worst.get(id(r), 1.0), s)
        moved = []
        for g in changed:
            for r in g.runs:
                rate = 1.0 / worst.get(id(r), 1.0)
                if abs(rate - r.rate) > 1e-12:
                    r.rate = rate
                    r.version += 1
                    moved.append(r)
        return moved

    def mark(self, gpus: list[SimGpu], now: float) -> None:
        """New telemetry for these GPUs (from the reported profiles and the runs' rates)."""
        for g in gpus:
            smact, smocc, drama = self.model.telemetry(
                [r.reported or r.profile for r in g.runs], [r.rate for r in g.runs]
            )
            g.smact, g.smocc, g.drama = smact, smocc, drama
            g.changed_at = now
            g.history.append((now, smact, smocc, drama))
            if len(g.history) > 4 * self.window:
                cut = bisect.bisect_right([h[0] for h in g.history], now - self.window) - 1
                if cut > 0:
                    del g.history[:cut]
            g.cached = None

    # -- tenancy and memory -----------------------------------------------------------------
    def put(self, run: SimRun, now: float) -> list[SimGpu]:
        """A try starts on its GPUs (it holds no memory until its ramp); returns its GPUs."""
        gpus = [self.gpus[i] for i in run.gpus]
        self.advance(self.closure(gpus), now)
        for g in gpus:
            g.runs.append(run)
        return gpus

    def ramp(self, run: SimRun, now: float) -> Refusal | None:
        """The try allocates its peak at the end of its ramp.  None: it got it (the GPUs hold
        it from now); else a CUDA OOM, with what the try reached (sim/fencing.py)."""
        refused = self.allocate(run, run.arrival.task.peak_mib, now)
        run.ramped = refused is None
        return refused

    # -- memory growth (sim/fencing.py) -----------------------------------------------------
    def growth_in(self, run: SimRun) -> float | None:
        """Seconds from now (its ramp) until the try grows, at its current rate; None: it does not."""
        growth = growth_of(run.arrival.job_id, self.growth, self.seed)
        if growth is None or growth.extra_mib(run.arrival.task.peak_mib) <= 0:
            return None
        done = run.arrival.task.solo_s - run.remaining  # solo work done by now
        return max(0.0, growth.at * run.arrival.task.solo_s - done) / run.rate

    def growth_mib(self, run: SimRun) -> int:
        growth = growth_of(run.arrival.job_id, self.growth, self.seed)
        return 0 if growth is None else growth.extra_mib(run.arrival.task.peak_mib)

    def who_crashes(self, run: SimRun, refused: Refusal, now: float) -> tuple[SimRun, Refusal]:
        """The try whose allocation fails when ``run`` is refused: itself when fenced (past its
        cap); unfenced, whoever allocates next, a co-tenant as often as the grower itself."""
        if refused.past_cap:
            return run, refused
        crowd = [o for i in run.gpus for o in self.gpus[i].runs if o is not run and o.ramped]
        hit = next_allocator(crowd, run.arrival.job_id, now, self.seed)
        if hit is None:
            return run, refused
        return hit, Refusal(hit.held, False, hit.held <= max(self.promised(hit, now), hit.request.memory.mib))

    def promised(self, run: SimRun, now: float) -> int:
        return promised(run.request.memory.mib, run.held, run.ramped, now - run.start, self.lock_s)

    def allocate(self, run: SimRun, mib: int, now: float) -> Refusal | None:
        """The try asks ``mib`` more on each of its GPUs: all of it, or a refusal (a CUDA OOM)."""
        gpus = [self.gpus[i] for i in run.gpus]
        self.advance(self.closure(gpus), now)
        refused = worst(
            allocate(
                self.isolation,
                total_mib=g.spec.memory_mib,
                used_mib=g.used,
                held_mib=run.held,
                asked_mib=mib,
                promise_mib=self.promised(run, now),
                others=[(self.promised(o, now), o.held) for o in g.runs if o is not run],
                fixed_cap_mib=g.spec.memory_mib
                if run.request.needs_idle_gpu
                else min(g.spec.memory_mib, run.request.memory.mib + self.margin_mib),
            )
            for g in gpus
        )
        if refused is not None:
            return refused
        run.held += mib
        for g in gpus:
            g.used += mib
        self.mark(gpus, now)
        return None

    def take_off(self, run: SimRun, now: float) -> tuple[list[SimGpu], list[SimGpu]]:
        """The try leaves its GPUs (ended or crashed) and frees what it held; returns its GPUs
        and their closure (as it was, for the rates to recompute)."""
        gpus = [self.gpus[i] for i in run.gpus]
        closure = self.closure(gpus)
        self.advance(closure, now)
        run.alive = False
        for g in gpus:
            g.runs.remove(run)
            g.used -= run.held
        return gpus, closure


__all__ = ["SimGpu", "SimGpus", "SimRun", "scaled"]
