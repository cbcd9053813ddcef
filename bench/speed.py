"""Speed benchmark of the placement core and the trace simulator.

Measures and prints (never asserts; always exits 0):

1. one placement decision over 8 GPUs (``Placer.decide``), median and p99, for the default
   policy, completion-time, interference-aware and most-free-memory;
2. one scheduling pass (``Placer.schedule``) over 1,024 GPUs with 10,000 pending requests, on a
   mostly full cluster (steady state) and on an idle one (cold start), with and without the
   queue's ``plan`` inside the timed region, and as the drivers run it: one
   ``SchedulingCycle.run`` (the view laid over the monitor's GPUs from the reservation ledger,
   plan, schedule, reserving the placed tries; with the default queue the cycle's pass goes over
   the waiting tries' groups, ``Placer.place``, and does not sort: the ``schedule`` and ``plan +
   schedule`` rows time the sorted pass a strict FIFO queue's reason pass or a policy without a
   memory check still runs); for interference-aware and for completion-time
   (the default's rule; it is told the catalogue's solo run times, as a driver learns them, so
   it prices waiting too); for completion-time also the pass after the policy was handed a newer
   model (every GPU predicted afresh, as after the executor's ``Learned.hand_over``), and the
   steady passes again with a model learned by a short simulation and tenants of the catalogue's
   task types (what a deployment's passes predict with, against the cold prior above);
3. a 10,000-task synthetic trace on 256 x A100-40GB through ``carma_airflow.sim.simulate``.

Usage::

    .venv/bin/python bench/speed.py            # full sizes
    .venv/bin/python bench/speed.py --quick    # small sizes, a few seconds (CI smoke run)
    .venv/bin/python bench/speed.py --json     # also print one JSON object as the last line

Views and request lists are built outside the timed regions; only the named call is timed
(``time.perf_counter``).  All randomness is seeded, so runs are comparable.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import (
    ClusterView,
    GpuState,
    MetricWindow,
    Placer,
    Reservations,
    SchedulingCycle,
    TaskRequest,
    Tenant,
    gpu_spec,
    make_estimator,
    make_queue,
    parse_gpu_list,
)
from carma_airflow.core.activity import ActivityEstimate, estimate_activity
from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.policies import DEFAULT_POLICY, Policy, make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.forecast import task_type
from carma_airflow.sim import SimConfig, TaskType, load_catalog, packaged, simulate, synthetic_trace
from carma_airflow.sim.engine import Simulation
from carma_airflow.sim.speed import drawn_spec

A100 = gpu_spec("A100-40GB")
WINDOW = 30  # samples per metric window (the paper's W)
NOW = 100_000.0  # the view's clock, in seconds
GPUS_PER_HOST = 8
# a driver's free slots for a cold pass (the executor's [core] parallelism left; the pass places no
# more): Airflow's default parallelism, and one per GPU of the full size's cluster
SLOTS = (32, 1024)


@dataclass(frozen=True, slots=True)
class Sizes:
    decisions: int
    pass_gpus: int
    pass_requests: int
    pass_runs: int
    sim_tasks: int
    sim_gpus: int
    learn_tasks: int = 600  # the simulation a learned model comes from


FULL = Sizes(decisions=2000, pass_gpus=1024, pass_requests=10_000, pass_runs=5, sim_tasks=10_000, sim_gpus=256)
QUICK = Sizes(
    decisions=300, pass_gpus=128, pass_requests=1_000, pass_runs=3, sim_tasks=1_000, sim_gpus=32, learn_tasks=120
)
SMOKE = Sizes(  # the tests' run-through: every figure, none of them meaningful
    decisions=50, pass_gpus=64, pass_requests=300, pass_runs=1, sim_tasks=200, sim_gpus=16, learn_tasks=60
)


@dataclass(slots=True)
class Figure:
    key: str
    label: str
    value: float
    unit: str
    target: float | None = None  # the value must stay below this

    @property
    def meets(self) -> bool | None:
        return None if self.target is None else self.value < self.target


# -- building inputs (never timed) ----------------------------------------------------------


def _series(rng: random.Random, level: float, spread: float) -> tuple[float, ...]:
    """W samples (oldest first) wandering around ``level``, clipped to 0..1."""
    out = []
    x = level
    for _ in range(WINDOW):
        x += rng.gauss(0.0, spread) + 0.3 * (level - x)
        out.append(min(1.0, max(0.0, x)))
    return tuple(out)


def _window(rng: random.Random, tenants: int) -> MetricWindow:
    if tenants == 0:
        return MetricWindow(_series(rng, 0.0, 0.005), _series(rng, 0.0, 0.005), _series(rng, 0.0, 0.005))
    act = min(0.95, 0.25 + 0.22 * tenants + rng.uniform(-0.1, 0.1))
    return MetricWindow(
        _series(rng, act, 0.06),
        _series(rng, act * 0.6, 0.05),
        _series(rng, act * 0.45, 0.05),
    )


def _gpu(
    rng: random.Random,
    index: int,
    tenant_mib: Sequence[int],
    *,
    host: str,
    recent: float = 0.15,
    spec: GpuSpec = A100,
) -> GpuState:
    """A GPU with one tenant per entry of ``tenant_mib`` (reserved MiB).

    A share ``recent`` of tenants were placed inside the last 30 s and are not yet seen by the
    monitor (``observed_mib=None``); the others hold about their reservation.
    """
    tenants = []
    used = 0
    for k, mib in enumerate(tenant_mib):
        fresh = rng.random() < recent
        placed_at = NOW - (rng.uniform(1.0, 25.0) if fresh else rng.uniform(60.0, 7200.0))
        observed = None if fresh else max(256, int(mib * rng.uniform(0.6, 1.02)))
        used += 0 if observed is None else observed
        tenants.append(
            Tenant(
                key=f"g{index}-t{k}#1",
                label=f"task{index}-{k}",
                reserved_mib=mib,
                placed_at=placed_at,
                observed_mib=observed,
            )
        )
    used = min(spec.memory_mib, used + (rng.randint(300, 600) if tenants else rng.randint(0, 200)))
    last = max((t.placed_at for t in tenants), default=None)
    return GpuState(
        uuid=f"GPU-{index:05d}",
        index=index,
        spec=spec,
        free_mib=spec.memory_mib - used,
        used_mib=used,
        window=_window(rng, len(tenants)),
        tenants=tuple(tenants),
        host=host,
        last_placed_at=last,
    )


def small_view(seed: int = 7) -> ClusterView:
    """8 A100-40GB GPUs on one host with 0-3 tenants each (0, 1, 2 and 3 all present)."""
    rng = random.Random(seed)
    counts = [0, 1, 2, 3, 1, 2, 3, 0]
    rng.shuffle(counts)
    gpus = []
    for i, n in enumerate(counts):
        mibs: list[int] = []
        for _ in range(n):
            room = 36_000 - sum(mibs)
            mibs.append(min(room, rng.choice((1_500, 4_000, 8_000, 12_000))))
        gpus.append(_gpu(rng, i, mibs, host="node-0"))
    return ClusterView(NOW, tuple(gpus))


def large_view(gpus: int, *, steady: bool, seed: int = 11, models: Sequence[str] = ("A100-40GB",)) -> ClusterView:
    """``gpus`` GPUs, 8 per host, each host one of ``models`` in turn (A100-40GB by default).

    steady: about 88 % of GPUs at 3 tenants (tenant cap), 8 % at 1-2 tenants with little free
    memory, 4 % with one small tenant and room for more (an A100-40GB's figures, scaled to the
    GPU's memory).  Cold start: every GPU idle.
    """
    rng = random.Random(seed)
    specs = [gpu_spec(m) for m in models]
    out = []
    for i in range(gpus):
        spec = specs[(i // GPUS_PER_HOST) % len(specs)]
        host = f"node-{i // GPUS_PER_HOST:04d}"
        if not steady:
            out.append(_gpu(rng, i, (), host=host, spec=spec))
            continue
        r = rng.random()
        if r < 0.88:
            mibs = [rng.choice((8_000, 12_000)) for _ in range(3)]
        elif r < 0.96:
            mibs = [16_000, 16_000] if rng.random() < 0.5 else [34_000]
        else:
            mibs = [rng.choice((1_500, 4_000, 8_000))]
        scale = spec.memory_mib / A100.memory_mib
        out.append(_gpu(rng, i, [int(m * scale) for m in mibs], host=host, spec=spec))
    return ClusterView(NOW, tuple(out))


# a mixed fleet's hosts, in turn: a scarce fast model, the grid's model and a small slow one
MIXED_MODELS = ("H100-80GB", "A100-40GB", "L4", "L4")


def mixed_view(gpus: int, *, steady: bool, seed: int = 11) -> ClusterView:
    """:func:`large_view` on hosts of :data:`MIXED_MODELS` in turn (a quarter H100-80GB, a quarter
    A100-40GB, half L4)."""
    return large_view(gpus, steady=steady, seed=seed, models=MIXED_MODELS)


def per_model_runs(catalog: dict[str, TaskType], seed: int = 0) -> dict[tuple[str, str], float]:
    """Each catalogue type's solo run on each of :data:`MIXED_MODELS`, seconds, by the spec-sheet
    speed truth (``--speed-truth spec:SEED``): what a deployment has learned once every type ran
    alone on every model."""
    specs = [gpu_spec(m) for m in dict.fromkeys(MIXED_MODELS)]
    truth = drawn_spec(sorted(catalog), specs, seed)
    return {(t.name, s.name): t.solo_s / truth.speed(t.name, s) for t in catalog.values() for s in specs}


def catalog_requests(catalog: dict[str, TaskType], count: int, seed: int = 3) -> list[TaskRequest]:
    """``count`` pending requests drawn from the task catalogue, estimated as the sim does
    (gpumemnet, so some are whole-GPU and a few ask for 2 GPUs), submitted over the last 2 h."""
    rng = random.Random(seed)
    estimator = make_estimator("gpumemnet")
    types = sorted(catalog.values(), key=lambda t: t.name)
    needs = {t.name: estimator.estimate(t.memory_info()) for t in types}
    out = []
    for i in range(count):
        t = rng.choice(types)
        need = needs[t.name]
        assert need is not None
        out.append(
            TaskRequest(
                key=f"job{i}#1",
                label=f"{t.name}[{i}]",
                memory=need,
                gpus=t.gpus,
                priority=rng.choice((0, 0, 0, 0, 1, 2)),
                submitted_at=round(NOW - rng.uniform(0.0, 7200.0), 3),
            )
        )
    return out


# -- measuring ------------------------------------------------------------------------------


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    k = max(0, math.ceil(q * len(sorted_values)) - 1)
    return sorted_values[k]


def policy_of(
    name: str,
    catalog: dict[str, TaskType] | None = None,
    model: InterferenceModel | None = None,
    solo_runs: dict[tuple[str, str], float] | None = None,
) -> Policy:
    """A fresh policy; completion-time told the catalogue's solo run times (what a driver learns
    from ended tries), so its decisions price waiting as they do once run times are known, and
    ``model`` (else it predicts from the cold prior).  ``solo_runs``: solo runs by (type, GPU model)
    instead (:func:`per_model_runs`), as on a mixed fleet."""
    policy = make_policy(name)
    if isinstance(policy, CompletionTime) and solo_runs:
        for (kind, gpu_model), seconds in solo_runs.items():
            policy.learn_duration(kind, seconds, gpu_model)
    elif isinstance(policy, CompletionTime) and catalog:
        for t in catalog.values():
            policy.learn_duration(t.name, t.solo_s)
    if isinstance(policy, CompletionTime) and model is not None:
        policy.use_model(model)
    return policy


def learned_model(catalog: dict[str, TaskType], tasks: int = 600, gpus: int = 8) -> InterferenceModel:
    """The interference model a simulated deployment learned (completion-time, the catalogue's
    types at load 1.2 on A100-40GB): per-type terms for the types it saw collocated."""
    arrivals = synthetic_trace(catalog, tasks, gpus=gpus, load=1.2, seed=5)
    sim = Simulation(SimConfig(gpus=tuple(parse_gpu_list(f"{gpus}xA100-40GB")), policy="completion-time"))
    sim.run(arrivals)
    return sim.interference


def _learned_activity(t: TaskType) -> ActivityEstimate:
    """What an executor holds for a type after five tries alone: its catalogue activity."""
    return estimate_activity([t.profile.sm_activity] * 5)


def typed_view(view: ClusterView, catalog: dict[str, TaskType], seed: int = 5) -> ClusterView:
    """``view`` with each tenant one of the catalogue's types with its learned activity (an
    executor's tenants are the deployment's task types, which a learned model has terms for, and
    carry what was learned of them; the plain view's are each a type of its own, with none)."""
    rng = random.Random(seed)
    types = [catalog[n] for n in sorted(catalog)]

    def typed(t: Tenant) -> Tenant:
        kind = rng.choice(types)
        return replace(t, label=kind.name, activity=_learned_activity(kind))

    gpus = [replace(g, tenants=tuple(typed(t) for t in g.tenants)) for g in view.gpus]
    return ClusterView(view.now, tuple(gpus))


def typed_requests(pending: list[TaskRequest], catalog: dict[str, TaskType]) -> list[TaskRequest]:
    """``pending`` carrying their types' learned activities, as the executor's intake sets them."""
    return [replace(r, activity=_learned_activity(catalog[task_type(r.label)])) for r in pending]


def bench_decide(
    policy: str, view: ClusterView, requests: Sequence[TaskRequest], n: int, catalog: dict[str, TaskType] | None = None
) -> tuple[float, float]:
    """(median, p99) seconds of one ``Placer.decide``, cycling through ``requests``."""
    placer = Placer(policy_of(policy, catalog))
    for r in requests[:50]:  # warm-up
        placer.decide(r, view)
    times = []
    clock = time.perf_counter
    gc.collect()
    for i in range(n):
        req = requests[i % len(requests)]
        t0 = clock()
        placer.decide(req, view)
        times.append(clock() - t0)
    times.sort()
    return statistics.median(times), _percentile(times, 0.99)


def _median_time(
    fn: Callable[[], object], runs: int, budget_s: float = 20.0, setup: Callable[[], object] | None = None
) -> float:
    """Median of ``runs`` timings; stops after 3 runs once ``budget_s`` is spent (slow cases).
    ``setup``: called before each run, untimed."""
    times: list[float] = []
    while len(times) < runs and (len(times) < 3 or sum(times) < budget_s):
        if setup is not None:
            setup()
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_pass(
    view: ClusterView,
    pending: list[TaskRequest],
    runs: int,
    policy: str = "interference-aware",
    catalog: dict[str, TaskType] | None = None,
) -> tuple[float, float, float, int]:
    """Median seconds of (schedule alone, plan alone, plan + schedule) and the tasks one pass places."""
    queue = make_queue("backfill")
    placer = Placer(policy_of(policy, catalog))
    plan = queue.plan(pending, NOW)
    placed = len(placer.schedule(plan.ordered, view, blocking=plan.blocking, protected=plan.protected).placed)

    def schedule_only() -> object:
        return placer.schedule(plan.ordered, view, blocking=plan.blocking, protected=plan.protected)

    def plan_only() -> object:
        return queue.plan(pending, NOW)

    def plan_and_schedule() -> object:
        p = queue.plan(pending, NOW)
        return placer.schedule(p.ordered, view, blocking=p.blocking, protected=p.protected)

    return (
        _median_time(schedule_only, runs),
        _median_time(plan_only, runs),
        _median_time(plan_and_schedule, runs),
        placed,
    )


def _bare(view: ClusterView) -> list[GpuState]:
    """The view's GPUs as a monitor reads them (new objects each call, no tenants)."""
    return [GpuState(g.uuid, g.index, g.spec, g.free_mib, g.used_mib, g.window, host=g.host) for g in view.gpus]


def _new_cycle(
    view: ClusterView,
    pending: list[TaskRequest],
    policy: str,
    catalog: dict[str, TaskType] | None,
    model: InterferenceModel | None = None,
    solo_runs: dict[tuple[str, str], float] | None = None,
) -> SchedulingCycle:
    """A cycle as a driver starts one: the view's tenants in its ledger, ``pending`` queued."""
    held = sorted(((t, g.uuid) for g in view.gpus for t in g.tenants), key=lambda tu: (tu[0].placed_at, tu[0].key))
    book = Reservations(seen_after_s=None)  # the bench's tenants carry their own observations
    for t, uuid in held:
        book.reserve(t.key, t.label, [uuid], t.reserved_mib, t.placed_at, exclusive=t.exclusive)
        if t.observed_mib is not None:
            book.observe(t.key, t.observed_mib)
    cycle = SchedulingCycle(
        Placer(policy_of(policy, catalog, model, solo_runs)), make_queue("backfill"), reservations=book
    )
    for r in pending:
        cycle.submit(r, r.submitted_at)
    return cycle


def bench_cycle(
    view: ClusterView,
    pending: list[TaskRequest],
    runs: int,
    policy: str = "interference-aware",
    catalog: dict[str, TaskType] | None = None,
    limit: int | None = None,
    model: InterferenceModel | None = None,
    solo_runs: dict[tuple[str, str], float] | None = None,
) -> tuple[float, int]:
    """Median seconds of the first ``SchedulingCycle.run`` of a new cycle (a driver's first pass
    after it starts) and the tries it places; ``limit``: the driver's free slots (the pass places
    no more: the executor's ``[core] parallelism`` left).

    The view's tenants move into a ledger and its GPUs are handed over bare, as a monitor reads
    them: the timed pass lays the reservations over every GPU afresh (as in the executor, whose
    monitor states are new each pass), plans, schedules and reserves.  Each run gets a cycle of
    its own, built untimed, since a pass changes its cycle; nothing is kept from a pass before.
    """
    bare = _bare(view)
    placed = len(_new_cycle(view, pending, policy, catalog, model, solo_runs).run(NOW, bare, limit=limit).placed)
    cycles: list[SchedulingCycle] = []

    def new_cycle() -> None:
        cycles[:] = [_new_cycle(view, pending, policy, catalog, model, solo_runs)]

    return _median_time(lambda: cycles[0].run(NOW, bare, limit=limit), runs, setup=new_cycle), placed


def bench_heartbeat(
    view: ClusterView,
    pending: list[TaskRequest],
    runs: int,
    policy: str = "interference-aware",
    catalog: dict[str, TaskType] | None = None,
    waiting_decisions: bool = True,
    model: InterferenceModel | None = None,
    handed_over: bool = False,
    solo_runs: dict[tuple[str, str], float] | None = None,
) -> tuple[float, int]:
    """Median seconds of a later pass of one cycle (a driver's next heartbeat) and the tries it places.
    ``waiting_decisions`` False: the pass without the waiting tries' reasons (the executor's between
    its reason passes, which come at most once a second with a deep queue).  ``handed_over``: the
    pass after the driver handed the policy a newer model (the same fits, a new model object, as
    after a refit): every GPU predicted afresh (the executor's ``Learned.hand_over``).

    One cycle for the whole run, as the executor keeps one for its life: its first pass is not
    timed; before each timed pass the tries the pass before placed are put back (released and
    queued again as they were), so every pass decides over the same GPUs and queue, with new
    monitor states and whatever the cycle kept from the pass before (its policy's memos, the
    ledger's tenants of the GPUs that did not change).
    """
    cycle = _new_cycle(view, pending, policy, catalog, model, solo_runs)
    results = [cycle.run(NOW, _bare(view), waiting_decisions=waiting_decisions)]
    pol = cycle.placer.policy
    base = model if model is not None else InterferenceModel()
    states: list[GpuState] = []

    def put_back() -> None:
        for p in results[-1].placed:
            cycle.release(p.request.key)
            cycle.submit(p.request, p.request.submitted_at)
        states[:] = _bare(view)  # a monitor's new reading
        if handed_over and isinstance(pol, CompletionTime):
            pol.use_model(InterferenceModel(dict(base.fits), base.settings))

    def one_pass() -> None:
        results.append(cycle.run(NOW, states, waiting_decisions=waiting_decisions))

    seconds = _median_time(one_pass, runs, setup=put_back)
    return seconds, len(results[-1].placed)


def bench_sim(catalog: dict[str, TaskType], tasks: int, gpus: int) -> tuple[float, int, int, int]:
    """(wall seconds, passes, tasks completed, tasks lost) of one simulation."""
    arrivals = synthetic_trace(catalog, tasks, gpus=gpus, load=1.0, seed=1)
    config = SimConfig(gpus=tuple(parse_gpu_list(f"{gpus}xA100-40GB")))
    gc.collect()
    t0 = time.perf_counter()
    result = simulate(config, arrivals)
    wall = time.perf_counter() - t0
    done = sum(1 for t in result.tasks if t.outcome == "success")
    return wall, result.passes, done, len(result.tasks) - done


# -- output ---------------------------------------------------------------------------------


def _fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value * 1e3:.3f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.0f}"


def print_table(figures: Sequence[Figure]) -> None:
    rows = [("figure", "value", "target", "")]
    for f in figures:
        target = "-" if f.target is None else f"< {_fmt(f.target, f.unit)}"
        verdict = "" if f.meets is None else ("meets target" if f.meets else "MISSES target")
        rows.append((f.label, _fmt(f.value, f.unit), target, verdict))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for k, r in enumerate(rows):
        print(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes for a CI smoke run")
    parser.add_argument("--smoke", action="store_true", help="smaller still: every figure, for the tests")
    parser.add_argument("--json", action="store_true", help="print all figures as one JSON object, last line")
    parser.add_argument(
        "--mixed-only",
        action="store_true",
        help="only the passes on a mixed fleet and one model's cold pass (section 2c)",
    )
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else QUICK if args.quick else FULL
    catalog = load_catalog(packaged("task_catalog.csv"))
    figures: list[Figure] = []

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # 1. one decision over 8 GPUs
    view8 = small_view()
    requests8 = catalog_requests(catalog, 64)
    only_mixed = args.mixed_only
    deciders = dict.fromkeys((DEFAULT_POLICY, "completion-time", "interference-aware", "most-free-memory"))
    for policy in () if only_mixed else deciders:
        progress(f"[1] decide x{size.decisions}, 8 GPUs, {policy}")
        med, p99 = bench_decide(policy, view8, requests8, size.decisions, catalog)
        figures.append(Figure(f"decide_8gpu_{policy}_median", f"decide, 8 GPUs, {policy}: median", med, "ms", 1e-3))
        figures.append(Figure(f"decide_8gpu_{policy}_p99", f"decide, 8 GPUs, {policy}: p99", p99, "ms"))

    # 2. one scheduling pass over a big cluster
    pending = catalog_requests(catalog, size.pass_requests)
    g, n = size.pass_gpus, size.pass_requests
    placed_counts: dict[str, int] = {}
    for policy in () if only_mixed else dict.fromkeys(("interference-aware", "completion-time", DEFAULT_POLICY)):
        tag = "" if policy == "interference-aware" else f"_{policy}"  # the keys of earlier rounds stay
        for state, steady in (("steady", True), ("cold", False)):
            view = large_view(g, steady=steady)
            progress(f"[2] schedule pass x{size.pass_runs}, {g} GPUs, {n} pending, {state}, {policy}")
            sched, plan, both, placed = bench_pass(view, pending, size.pass_runs, policy, catalog)
            placed_counts[state] = placed
            what = f"pass, {g} GPUs, {n} pending, {state}, {policy}"
            figures.append(Figure(f"pass_{state}_schedule{tag}", f"{what}: schedule", sched, "ms", 50e-3))
            figures.append(Figure(f"pass_{state}_plan_schedule{tag}", f"{what}: plan + schedule", both, "ms", 50e-3))
            figures.append(Figure(f"pass_{state}_plan{tag}", f"{what}: plan alone", plan, "ms"))
            figures.append(Figure(f"pass_{state}_placed{tag}", f"{what}: tasks placed", placed, "n"))
            progress(f"[2] scheduling cycle x{size.pass_runs}, {g} GPUs, {n} waiting, {state}, {policy}")
            cycle_s, cycle_placed = bench_cycle(view, pending, size.pass_runs, policy, catalog)
            figures.append(Figure(f"pass_{state}_cycle{tag}", f"{what}: whole cycle pass, first", cycle_s, "ms", 50e-3))
            figures.append(Figure(f"pass_{state}_cycle_placed{tag}", f"{what}: cycle placed", cycle_placed, "n"))
            for slots in SLOTS if not steady else ():  # a steady pass places fewer than either
                progress(f"[2] scheduling cycle x{size.pass_runs}, {state}, {policy}, {slots} free slots")
                slot_s, slot_placed = bench_cycle(view, pending, size.pass_runs, policy, catalog, slots)
                at = f"{what}: whole cycle pass, first, {slots} free slots"
                key = f"pass_{state}_cycle_slots{slots}"
                figures.append(Figure(f"{key}{tag}", at, slot_s, "ms", 50e-3))
                figures.append(Figure(f"{key}_placed{tag}", f"{at}: placed", slot_placed, "n"))
            progress(f"[2] next heartbeat's pass x{size.pass_runs}, {g} GPUs, {n} waiting, {state}, {policy}")
            beat_s, beat_placed = bench_heartbeat(view, pending, size.pass_runs, policy, catalog)
            figures.append(
                Figure(f"pass_{state}_heartbeat{tag}", f"{what}: next heartbeat's pass", beat_s, "ms", 50e-3)
            )
            figures.append(Figure(f"pass_{state}_heartbeat_placed{tag}", f"{what}: heartbeat placed", beat_placed, "n"))
            bare_s, _ = bench_heartbeat(view, pending, size.pass_runs, policy, catalog, waiting_decisions=False)
            label = f"{what}: next heartbeat's pass without the waiting reasons"
            figures.append(Figure(f"pass_{state}_heartbeat_no_reasons{tag}", label, bare_s, "ms"))
            if policy == "completion-time" and steady:
                hand_s, hand_placed = bench_heartbeat(view, pending, size.pass_runs, policy, catalog, handed_over=True)
                label = f"{what}: the pass after a model hand-over"
                figures.append(Figure(f"pass_{state}_handed_over{tag}", label, hand_s, "ms", 50e-3))
                figures.append(Figure(f"pass_{state}_handed_over_placed{tag}", f"{label}: placed", hand_placed, "n"))

    pending = typed_requests(pending, catalog)  # as the executor's intake sets them
    runs, ct = size.pass_runs, "completion-time"
    if not only_mixed:
        # 2b. the same steady pass as a deployment runs it: tenants of its task types, a learned model
        progress(f"[2b] learn a model: {size.learn_tasks}-task simulation on 8xA100-40GB")
        model = learned_model(catalog, size.learn_tasks)
        typed = typed_view(large_view(g, steady=True), catalog)
        what = f"pass, {g} GPUs, {n} pending, steady, completion-time, learned model, typed tenants"
        known = len(model.fit_for(A100.name).known_types())
        figures.append(Figure("pass_learned_types", f"{what}: task types the model has terms for", known, "n"))
        progress(f"[2b] first pass, next heartbeat's pass, the pass after a hand-over x{runs}")
        first_s, _ = bench_cycle(typed, pending, runs, ct, catalog, model=model)
        figures.append(Figure("pass_learned_cycle", f"{what}: whole cycle pass, first", first_s, "ms", 50e-3))
        beat_s, beat_placed = bench_heartbeat(typed, pending, runs, ct, catalog, model=model)
        figures.append(Figure("pass_learned_heartbeat", f"{what}: next heartbeat's pass", beat_s, "ms", 50e-3))
        figures.append(Figure("pass_learned_heartbeat_placed", f"{what}: heartbeat placed", beat_placed, "n"))
        hand_s, hand_placed = bench_heartbeat(typed, pending, runs, ct, catalog, model=model, handed_over=True)
        label = f"{what}: the pass after a model hand-over"
        figures.append(Figure("pass_learned_handed_over", label, hand_s, "ms", 50e-3))
        figures.append(Figure("pass_learned_handed_over_placed", f"{label}: placed", hand_placed, "n"))

    # 2c. the default's passes on a mixed fleet (issue 44's pass budget): every option priced on its
    # GPU model's run, idle GPUs fastest first and kept by speed
    solo_runs = per_model_runs(catalog)
    fleet = "+".join(dict.fromkeys(MIXED_MODELS))
    # beside them the same cold first pass on one model (typed tenants and tries, the catalogue's runs)
    one = typed_view(large_view(g, steady=False), catalog)
    progress(f"[2c] one model: cold first pass x{runs}")
    one_s, one_placed = bench_cycle(one, pending, runs, ct, catalog)
    what = f"pass, {g} GPUs (A100-40GB), {n} waiting, cold, completion-time, typed tenants and tries"
    figures.append(Figure("pass_one_model_cold_cycle_placed", f"{what}: cycle placed", one_placed, "n"))
    per = one_s / max(1, one_placed)
    figures.append(Figure("pass_one_model_cold_per_placement", f"{what}: first pass per placement", per, "ms", 50e-6))
    for state, steady in (("steady", True), ("cold", False)):
        view = typed_view(mixed_view(g, steady=steady), catalog)
        what = f"pass, {g} GPUs ({fleet}), {n} waiting, {state}, completion-time, runs per model"
        progress(f"[2c] mixed fleet: first pass, next heartbeat's pass x{runs}, {state}")
        first_s, first_placed = bench_cycle(view, pending, runs, ct, catalog, solo_runs=solo_runs)
        figures.append(Figure(f"pass_mixed_{state}_cycle", f"{what}: whole cycle pass, first", first_s, "ms", 50e-3))
        figures.append(Figure(f"pass_mixed_{state}_cycle_placed", f"{what}: cycle placed", first_placed, "n"))
        if not steady:
            per = first_s / max(1, first_placed)
            figures.append(
                Figure("pass_mixed_cold_per_placement", f"{what}: first pass per placement", per, "ms", 50e-6)
            )
            for slots in SLOTS:
                slot_s, slot_placed = bench_cycle(view, pending, runs, ct, catalog, slots, solo_runs=solo_runs)
                at = f"{what}: whole cycle pass, first, {slots} free slots"
                figures.append(Figure(f"pass_mixed_cold_cycle_slots{slots}", at, slot_s, "ms", 50e-3))
                figures.append(Figure(f"pass_mixed_cold_cycle_slots{slots}_placed", f"{at}: placed", slot_placed, "n"))
        beat_s, beat_placed = bench_heartbeat(view, pending, runs, ct, catalog, solo_runs=solo_runs)
        figures.append(Figure(f"pass_mixed_{state}_heartbeat", f"{what}: next heartbeat's pass", beat_s, "ms", 50e-3))
        figures.append(Figure(f"pass_mixed_{state}_heartbeat_placed", f"{what}: heartbeat placed", beat_placed, "n"))
        if steady:
            hand_s, hand_placed = bench_heartbeat(
                view, pending, runs, ct, catalog, handed_over=True, solo_runs=solo_runs
            )
            label = f"{what}: the pass after a model hand-over"
            figures.append(Figure("pass_mixed_steady_handed_over", label, hand_s, "ms", 50e-3))
            figures.append(Figure("pass_mixed_steady_handed_over_placed", f"{label}: placed", hand_placed, "n"))

    if not only_mixed:
        # 3. a whole simulation
        progress(f"[3] simulate {size.sim_tasks} tasks on {size.sim_gpus}xA100-40GB")
        wall, passes, done, lost = bench_sim(catalog, size.sim_tasks, size.sim_gpus)
        what = f"sim, {size.sim_tasks} tasks, {size.sim_gpus}xA100-40GB"
        figures.append(Figure("sim_wall", f"{what}: wall time", wall, "s", 60.0))
        figures.append(Figure("sim_passes", f"{what}: scheduling passes", passes, "n"))
        figures.append(Figure("sim_completed", f"{what}: tasks completed", done, "n"))
        figures.append(Figure("sim_lost", f"{what}: tasks lost", lost, "n"))

    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    print(f"carma-airflow speed ({mode}; Python {platform.python_version()})")
    print_table(figures)
    missed = [f.label for f in figures if f.meets is False]
    print(f"{len(missed)} figure(s) miss their target" if missed else "all figures meet their targets")
    if args.json:
        out = {
            "mode": mode,
            "python": platform.python_version(),
            "figures": {
                f.key: {
                    "label": f.label,
                    "value": f.value,
                    "unit": "s" if f.unit in ("s", "ms") else "count",
                    "target": f.target,
                    "meets_target": f.meets,
                }
                for f in figures
            },
            "all_meet_targets": not missed,
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
