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

from carma_airflow.core.fencing import FenceModel, IsolationMode, Tenant, counted_mib
from carma_airflow.core.gpu import GpuSpec, GpuState
from carma_airflow.core.risk import MetricWindow, RiskSettings
from carma_airflow.core.sharing import ActivityProfile, SharingModel
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim.fencing import Refusal, allocate, job_growth, next_allocator, worst
from carma_airflow.sim.learning import TrySegment
from carma_airflow.sim.metrics import GpuIntegrals
from carma_airflow.sim.speed import ALIKE, SpeedTruth
from carma_airflow.sim.truth import SharingTruth, Truth
from carma_airflow.sim.windows import window_runs
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
    # the fence (sim/fencing.py): its promise from placement, the cap set at its start per GPU
    promise: int = 0
    caps: list[int | None] = field(default_factory=list)
    load_s: float = 0.0  # seconds on the CPU before its first allocation
    # checkpoints: the job's solo work saved by its last checkpoint, and when this try saved it
    saved_work: float = 0.0
    saved_at: float | None = None
    resumed_work: float = 0.0  # the job's work already done when this try started
    speed: float = 1.0  # the truth: its speed on its GPUs alone (its slowest GPU's; sim/speed.py)

    @property
    def done_work(self) -> float:
        """The job's solo work done by now (the resumed part included)."""
        return self.arrival.task.solo_s - self.remaining


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
    left: list[tuple[SimRun, float]] = field(default_factory=list)  # recent departures (a live cap's window)


def scaled(p: ActivityProfile, scale: float) -> ActivityProfile:
    """A profile's demand times ``scale`` (capped at the whole GPU)."""
    return ActivityProfile(
        min(1.0, p.sm_activity * scale), min(1.0, p.sm_occupancy * scale), min(1.0, p.dram_activity * scale)
    )


WINDOWS_KEPT = 50_000  # metric windows kept by their runs (then forgotten, all at once)


class SimGpus:
    """The simulated GPUs under one sharing model (the truth), with the monitor's window."""

    def __init__(
        self,
        specs: Sequence[GpuSpec],
        model: SharingModel,
        risk: RiskSettings,
        fence: FenceModel | None = None,
        reserve_mib: int = 0,
        lock_s: float = 30.0,
    ) -> None:
        self.model = model
        self.truth: Truth = SharingTruth(model)  # what slows tenants down (sim/truth.py)
        self.speed: SpeedTruth = ALIKE  # how fast each model runs each task alone (sim/speed.py)
        self.fence = fence or FenceModel(IsolationMode.NONE)  # who crashes when memory runs out (sim/fencing.py)
        self.reserve_mib = reserve_mib  # kept free on every GPU: a protective or live cap leaves it
        self.lock_s = lock_s  # the placer counts a try at its reservation this long (core/fencing.counted_mib)
        self.growth = 0.0  # the truth: true peaks exceed the catalogue's by up to this share
        self.margin_mib = 2048  # a promise's room above the reservation
        self.seed = 0
        self.risk = risk
        self.window = risk.window
        self.gpus = [SimGpu(i, s, f"SIM-GPU-{i:04d}") for i, s in enumerate(specs)]
        self.by_uuid = {g.uuid: g for g in self.gpus}
        # the GPUs whose state a pass may have to read again: every GPU without a kept state or
        # whose window has not settled (``mark`` adds a GPU, ``states`` drops it once it read it
        # settled), so a pass over hundreds of GPUs looks at the few that moved
        self._moving: set[int] = set(range(len(self.gpus)))
        self._last: list[GpuState] = []  # the last pass's states, by GPU index
        # windows by their runs of samples: a simulated GPU's window is a few steps, and the
        # same steps come back (the same tenants, the clock at the same place between entries)
        self._windows: dict[tuple[tuple[tuple[float, float, float], int], ...], MetricWindow] = {}

    # -- what the monitor reads -----------------------------------------------------------
    def states(self, now: float) -> list[GpuState]:
        """The GPUs as a monitor would read them (the cycle adds the tenants); a settled GPU's
        state is kept, so the cycle's view reuses it too."""
        states = self._last
        if len(states) != len(self.gpus):  # the first pass reads every GPU
            states = [self._read(g, now) for g in self.gpus]
        else:
            gpus = self.gpus
            for i in sorted(self._moving):
                states[i] = self._read(gpus[i], now)
        self._last = states
        return list(states)

    def _read(self, g: SimGpu, now: float) -> GpuState:
        """A GPU's state now: its kept one while its window stays settled, else read afresh."""
        settled = now - g.changed_at >= self.window
        if g.cached is None or not settled:
            g.cached = self._state(g, settled, now)
        if settled:
            self._moving.discard(g.index)
        return g.cached

    def _state(self, g: SimGpu, settled: bool, now: float) -> GpuState:
        risk = self.risk
        if settled:
            window = MetricWindow.constant(g.smact, g.smocc, g.drama, risk)
        else:
            runs = tuple(window_runs(g.history, now, self.window))
            got = self._windows.get(runs)
            if got is None:
                if len(self._windows) >= WINDOWS_KEPT:
                    self._windows = {}
                got = self._windows[runs] = MetricWindow.from_runs(runs, risk)
            window = got
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
        gpus, width = self.gpus, self.window
        return [gpus[i].changed_at + width for i in sorted(self._moving) if now - gpus[i].changed_at < width]

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
        slowest GPU's pace): its speed on its GPUs over its slowdown; returns the runs whose rate
        changed, in order."""
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
                rate = r.speed / worst.get(id(r), 1.0)
                if abs(rate - r.rate) > 1e-12:
                    r.rate = rate
                    r.version += 1
                    moved.append(r)
        return moved

    def mark(self, gpus: list[SimGpu], now: float) -> None:
        """New telemetry for these GPUs (from the reported profiles and the runs' rates less their
        speed: a slow model keeps a task as busy as a fast one)."""
        for g in gpus:
            smact, smocc, drama = self.model.telemetry(
                [r.reported or r.profile for r in g.runs], [r.rate / r.speed for r in g.runs]
            )
            g.smact, g.smocc, g.drama = smact, smocc, drama
            g.changed_at = now
            g.history.append((now, smact, smocc, drama))
            if len(g.history) > 4 * self.window:
                cut = bisect.bisect_right([h[0] for h in g.history], now - self.window) - 1
                if cut > 0:
                    del g.history[:cut]
            g.cached = None
            self._moving.add(g.index)

    # -- tenancy and memory -----------------------------------------------------------------
    def put(self, run: SimRun, now: float) -> list[SimGpu]:
        """A try starts on its GPUs (it holds no memory until its load ends); its promise counts
        against its co-tenants from now on, and its cap is set (sim/fencing.py); returns its GPUs."""
        gpus = [self.gpus[i] for i in run.gpus]
        self.advance(self.closure(gpus), now)
        speed = self.speed
        if speed is not ALIKE:
            run.speed = min(speed.speed(run.arrival.task.name, g.spec) for g in gpus)
        fence = self.fence
        run.promise = fence.promise_mib(  # under a live cap no margin (core/fencing.FenceModel.margin_mib)
            run.request.memory.mib, self.margin_mib, min(g.spec.memory_mib for g in gpus)
        )
        run.caps = [
            fence.start_cap_mib(
                promise_mib=run.promise,
                total_mib=g.spec.memory_mib,
                reserve_mib=self.reserve_mib,
                co_tenants=[Tenant(self._counted(o, now), o.held) for o in g.runs],
                exclusive=run.request.needs_idle_gpu,
                margin_mib=self.margin_mib,  # only a start-bound model's fixed limit carries it (MPS live)
            )
            for g in gpus
        ]
        for g in gpus:
            g.runs.append(run)
        return gpus

    def ramp(self, run: SimRun, now: float) -> Refusal | None:
        """The try allocates its peak when its load ends.  None: it got it (the GPUs hold it from
        now); else a CUDA OOM, with what the try reached (sim/fencing.py)."""
        refused = self.allocate(run, run.arrival.task.peak_mib, now)
        run.ramped = refused is None
        return refused

    # -- memory growth (sim/fencing.py) -----------------------------------------------------
    def growth_in(self, run: SimRun) -> float | None:
        """Seconds from now (its first allocation) until the try grows, at its current rate;
        None: it does not."""
        growth = job_growth(run.arrival, self.growth, self.seed, run.load_s)
        if growth is None:
            return None
        return max(0.0, growth[1] - run.done_work) / run.rate

    def growth_mib(self, run: SimRun) -> int:
        growth = job_growth(run.arrival, self.growth, self.seed, run.load_s)
        return 0 if growth is None else growth[0]

    def who_crashes(self, run: SimRun, refused: Refusal, now: float) -> tuple[SimRun, Refusal]:
        """The try whose allocation fails when ``run`` is refused: itself when past its cap;
        otherwise (a full GPU) whoever allocates next, a co-tenant as often as the grower itself."""
        if refused.past_cap:
            return run, refused
        crowd = [o for i in run.gpus for o in self.gpus[i].runs if o is not run and o.ramped]
        hit = next_allocator(crowd, run.arrival.job_id, now, self.seed)
        if hit is None:
            return run, refused
        return hit, Refusal(hit.held, False, hit.held <= self.counted(hit, now))

    def seen(self, run: SimRun, g: SimGpu, now: float) -> list[Tenant]:
        """``run``'s co-tenants on ``g`` as its fence last saw them: every try placed there, from its
        placement, whether or not it allocated (a promise holds from placement: :meth:`_counted`); under a live cap
        re-set ``reset_s`` after each change, one that arrived since then is not seen yet and one
        that left since then still counts (the exposure window)."""
        lag = self.fence.reset_s if self.fence.live else 0.0
        if lag <= 0:
            return [Tenant(self._counted(o, now), o.held) for o in g.runs if o is not run]
        since = now - lag
        out = [
            Tenant(self._counted(o, now), o.held)
            for o in g.runs
            if o is not run and (o.start <= run.start or o.start <= since)
        ]
        # gone since the last re-set: still counted as it was when it left
        out += [Tenant(self._counted(o, left), 0) for o, left in g.left if left > since and left > run.start]
        return out

    def counted(self, run: SimRun, now: float) -> int:
        """What the placer counts for ``run`` now: its reservation until it has allocated and its
        lock window has passed, then what it holds (a refused try that asked no more is a victim)."""
        return counted_mib(
            run.request.memory.mib, run.held, allocated=run.ramped, age_s=now - run.start, lock_s=self.lock_s
        )

    def _counted(self, o: SimRun, now: float) -> int:
        """What co-tenant ``o`` counts for in a cap now (core/fencing.counted_mib): its promise from
        its placement until it has allocated and the placer's lock window has passed, then what it
        holds (the placer offers the rest of its reservation to newcomers then)."""
        return counted_mib(o.promise, o.held, allocated=o.ramped, age_s=now - o.start, lock_s=self.lock_s)

    def cap_of(self, run: SimRun, k: int, now: float) -> int | None:
        """What ``run`` may hold on its ``k``-th GPU now (None: unfenced)."""
        fence = self.fence
        if not fence.fenced:
            return None
        g = self.gpus[run.gpus[k]]
        start = run.caps[k] if k < len(run.caps) else None
        return fence.may_hold_mib(
            start_cap_mib=start,
            promise_mib=self._counted(run, now),  # a live cap's floor: what the placer still keeps for it
            total_mib=g.spec.memory_mib,
            reserve_mib=self.reserve_mib,
            # a cap fixed at the start reads no co-tenants: their list is built only where it moves
            co_tenants=self.seen(run, g, now) if fence.live or start is None else (),
            exclusive=run.request.needs_idle_gpu,
        )

    def allocate(self, run: SimRun, mib: int, now: float) -> Refusal | None:
        """The try asks ``mib`` more on each of its GPUs: all of it, or a refusal (a CUDA OOM)."""
        gpus = [self.gpus[i] for i in run.gpus]
        self.advance(self.closure(gpus), now)
        refused = worst(
            allocate(
                total_mib=g.spec.memory_mib,
                used_mib=g.used,
                held_mib=run.held,
                asked_mib=mib,
                counted_mib=self.counted(run, now),
                cap_mib=self.cap_of(run, k, now),
            )
            for k, g in enumerate(gpus)
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
        lag = self.fence.reset_s if self.fence.live else 0.0
        for g in gpus:
            g.runs.remove(run)
            g.used -= run.held
            if lag > 0:
                g.left = [(o, t) for o, t in g.left if t > now - lag]
                g.left.append((run, now))
        return gpus, closure


__all__ = ["SimGpu", "SimGpus", "SimRun", "scaled"]
