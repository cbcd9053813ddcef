"""Mixed GPU fleets (issue 44, item 5): the default beside baselines and an oracle, each model's speed true.

Per cell (a mixed cluster, a speed truth, an interference truth, a trace, day one or day two) five
runs with the same queue (backfill), estimator (``history+gpumemnet``) and arrivals:

* ``mfm``: most-free-memory (idle GPUs lowest index first, then the most free memory): the baseline;
* ``fast``: fastest free model first (idle GPUs of the fastest model by the spec sheets first, then
  the collocation candidate of the fastest model with the most free memory);
* ``gavel``: a Gavel-like rule fed the true speeds: each task to the model where its speed-up ranks
  highest (:class:`GavelLike`), collocation by most free memory;
* ``ct``: the default (completion-time, priced per GPU model from what it learned);
* ``oracle``: the default's rule fed the truth (:class:`MixedTruthForecast`: true work left, true
  solo run on each model, true slowdowns), without future arrivals.

Day two: ``--warm-runs 1 --warm-learning`` (``SimConfig.warm_runs``/``warm_learning``, sim/days.py):
the run starts from what a day of the same work taught (peaks, activities, solo run times per model,
the interference fit).  Printed per cell: mean JCT of each rule as a ratio of mfm's, the default's
makespan ratio, its JCT over the oracle's, tasks lost, and whether the issue's targets hold:
``W`` never worse than mfm (JCT <= 1.00x, makespan <= 1.02x, nothing lost), ``H`` JCT <= (1 + oracle)
/ 2 (the oracle as a ratio to mfm), ``B`` JCT below the best of fast and gavel.  Then the counts per
day.  ``--fresh N``: also N draws of bench/fresh_traces.py (seeds 10,000+) on the first cluster,
work nobody tuned on; ``--fresh-on each``: draw i on cluster i mod their count (every cluster gets
fresh work; their task mixes and run times are the draws', their arrivals filtered to what the
cluster can hold).

``--seeds N``: every run under N seeds of the simulated monitor's noise (``SimConfig.seed`` 0 to
N-1; 1, the default, is seed 0 alone), a cell's figures the means over them (lost: summed), the
targets judged on those; then the count of cells that meet each target on every seed alone.  A
cell is one trace of about a hundred tasks: the monitor's noise alone moves some across a target.

    .venv/bin/python bench/mixed_fleet.py [--quick] [--fresh 4] [--fresh-on each] [--jobs 2]
        [--seeds 1] [--json out.json] [--knob min_gain=0.3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fresh_traces import fresh_trace
from oracle import TruthForecast, oracle_simulation

from carma_airflow.core import GpuSpec, parse_gpu_list
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.core.policies.forecast import Occupant, task_type
from carma_airflow.core.scarce import speed_key
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim import Arrival, SimConfig, Simulation, load_catalog, packaged, synthetic_trace

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT.parent / "shared" / "workloads" / "gavel_pairs.csv"
CLUSTERS = ("2xH100-80GB,2xA100-40GB,4xV100-32GB", "4xA100-80GB,4xT4", "2xH100-80GB,6xL4")
SPEEDS = ("spec:0", f"table:{PAIRS}:0")
TRUTHS = ("sharing", "types:1", "types:2")
RUNS = ("mfm", "fast", "gavel", "ct", "oracle")
TASKS_PER_GPU, LOAD = 12, 2.0
SEEDS = (100, 101)


class FastestFirst(Policy):
    """Fastest free model first: idle GPUs by the spec sheets' speed (then index), collocation on the
    fastest model with room, most free memory first among its GPUs."""

    name = "fastest-first"

    def idle_key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (speed_key(facts.state.spec, facts.index)[0], float(facts.index))

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (speed_key(facts.state.spec, facts.index)[0], -float(facts.usable_free_mib), float(facts.index))


class GavelLike(Policy):
    """Each task to the model where its speed-up ranks highest (after Gavel's heterogeneity-aware
    allocation, greedily): a task type's speed-up on a model is its true speed there over its speed on
    the cluster's slowest model; its score on a model is the share of the trace's task types whose
    speed-up there is no higher (the slowest model scores 0.5 for every type: a type that ranks in
    the lower half of every faster model leaves them to the others).  Idle GPUs by score, then faster
    model, then index; collocation candidates the same way, then most free memory."""

    name = "gavel-like"
    stable_keys = False

    def __init__(self, sim: Simulation, types: Sequence[str]) -> None:
        self.sim = sim
        self.types = sorted(set(types))
        self._score: dict[tuple[str, str], float] | None = None

    def _scores(self) -> dict[tuple[str, str], float]:
        if self._score is None:
            truth = self.sim.board.speed
            specs = list({g.spec.name: g.spec for g in self.sim.gpus}.values())
            slow = min(specs, key=lambda s: (s.dense_tflops, s.memory_gbs, s.name))
            out: dict[tuple[str, str], float] = {}
            for m in specs:
                ups = {k: truth.speed(k, m) / max(1e-9, truth.speed(k, slow)) for k in self.types}
                for k, up in ups.items():
                    out[(k, m.name)] = 0.5 if m is slow else sum(1 for u in ups.values() if u <= up) / len(ups)
            self._score = out
        return self._score

    def _rank(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, float]:
        score = self._scores().get((task_type(request.label), facts.state.spec.name), 0.5)
        return (-score, speed_key(facts.state.spec, facts.index)[0])

    def idle_key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (*self._rank(facts, request), float(facts.index))

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (*self._rank(facts, request), -float(facts.usable_free_mib), float(facts.index))

    def pool_token(self) -> None:
        return None


class MixedTruthForecast(TruthForecast):
    """bench/oracle.py's truth forecast with each model's true speed: work is solo seconds on the
    occupant's own GPU's model (the trace's solo seconds over its true speed there)."""

    def __init__(self, sim: Simulation, arrivals: Sequence[Arrival]) -> None:
        super().__init__(sim)
        self._solo: dict[str, float] = {a.task.name: a.task.solo_s for a in arrivals}
        self._specs: dict[str, GpuSpec] = {g.spec.name: g.spec for g in sim.gpus}

    def work_on(self, kind: str, model: str) -> float | None:
        """The type's true solo seconds on ``model`` (the default's speed keep asks it)."""
        solo = self._solo.get(kind)
        return None if solo is None else self._on(kind, solo, model)

    def _on(self, kind: str, solo: float, model: str) -> float:
        return solo / max(1e-9, self.sim.board.speed.speed(kind, self._specs[model]))

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        g = self.sim.by_uuid[facts.uuid]
        out = [
            Occupant(
                r.arrival.task.name,
                r.profile.sm_activity,
                max(0.0, r.remaining - r.rate * (now - r.last)) / max(1e-9, r.speed),
                r.profile,
            )
            for r in g.runs
        ]
        for o in super().occupants(facts, now)[len(out) :]:  # joined in this pass: their whole run here
            out.append(o._replace(work=self._on(o.kind, o.work, facts.state.spec.name)))
        return out

    def newcomer(self, request: TaskRequest) -> Occupant:
        new = super().newcomer(request)
        return new._replace(work=min(self._on(new.kind, new.work, m) for m in self._specs))

    def newcomer_on(self, new: Occupant, model: str) -> Occupant:
        return new._replace(work=self._on(new.kind, self._solo[new.kind], model))

    def run_alone(self, request: TaskRequest) -> float:
        solo = super().run_alone(request)
        kind = task_type(request.label)
        return min(self._on(kind, solo, m) for m in self._specs)


@dataclass(frozen=True)
class Cell:
    cluster: str
    speed: str
    truth: str
    trace: str  # s<seed> or f<seed> (fresh)
    day: int


def arrivals_of(cell: Cell) -> list[Arrival]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    gpus = parse_gpu_list(cell.cluster)
    if cell.trace.startswith("f"):
        largest = max(g.memory_mib for g in gpus)
        got = fresh_trace(int(cell.trace[1:]), catalog).arrivals
        return [a for a in got if a.task.gpus <= len(gpus) and a.task.peak_mib + 1_024 <= largest]
    return synthetic_trace(catalog, TASKS_PER_GPU * len(gpus), gpus=len(gpus), load=LOAD, seed=int(cell.trace[1:]))


Job = tuple[Cell, str, str, int]  # a cell, a run of RUNS, the knobs, the monitor noise's seed


def one(job: Job) -> tuple[float, float, int]:
    """(mean JCT, makespan, lost) of one run."""
    cell, run, knobs, seed = job
    arrivals = arrivals_of(cell)
    cfg = SimConfig(
        seed=seed,
        gpus=tuple(parse_gpu_list(cell.cluster)),
        policy="most-free-memory" if run in ("mfm", "fast", "gavel") else "completion-time",
        estimator="history+gpumemnet",
        queue="backfill",
        truth=cell.truth,
        speed_truth=cell.speed,
    )
    if cell.day > 1:
        cfg = replace(cfg, warm_runs=cell.day - 1, warm_learning=True)
    if run == "oracle":
        sim = oracle_simulation(cfg)
        sim.placer.policy.forecast = MixedTruthForecast(sim, arrivals)  # type: ignore[attr-defined]
    else:
        sim = Simulation(cfg)
    if run == "fast":
        sim.placer.policy = FastestFirst()
    elif run == "gavel":
        sim.placer.policy = GavelLike(sim, [a.task.name for a in arrivals])
    if knobs and run in ("ct", "oracle"):
        pol = sim.placer.policy
        assert isinstance(pol, CompletionTime)
        pol.settings = replace(pol.settings, **_knobs(knobs))  # type: ignore[arg-type]
    result = sim.run(arrivals)
    done = [t for t in result.tasks if t.outcome == "success" and t.end_s is not None]
    jct = statistics.fmean(t.end_s - t.submit_s for t in done if t.end_s is not None) if done else float("inf")
    return jct, result.makespan_s, len(result.tasks) - len(done)


def _knobs(text: str) -> dict[str, object]:
    """``name=value,...`` as CompletionSettings overrides: true/false/none (any case) or a number.
    An unknown name or a value of neither kind exits with what to fix, before any run starts."""
    out: dict[str, object] = {}
    fields = CompletionSettings.__dataclass_fields__
    words: dict[str, object] = {"none": None, "true": True, "false": False}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name not in fields:
            raise SystemExit(f"--knob: {name!r} is no CompletionSettings field; one of {', '.join(sorted(fields))}")
        if value.lower() in words:
            out[name] = words[value.lower()]
            continue
        try:
            out[name] = float(value)
        except ValueError:
            raise SystemExit(f"--knob {name}={value!r}: give true, false, none or a number") from None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="one seed, the sharing and types:1 truths")
    ap.add_argument("--fresh", type=int, default=0, help="also N fresh draws (seeds 10,000+), first cluster")
    ap.add_argument(
        "--fresh-on",
        choices=("first", "each"),
        default="first",
        help="the fresh draws on the first cluster, or draw i on cluster i mod their count",
    )
    ap.add_argument("--clusters", default=";".join(CLUSTERS), help="clusters, ';'-separated")
    ap.add_argument("--knob", default="", help="CompletionSettings overrides of ct and oracle (name=value,...)")
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once (processes)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds of the monitor's noise per cell (their means)")
    ap.add_argument("--json", type=Path, help="write every cell's figures here")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds: at least 1")
    _knobs(args.knob)  # a bad --knob exits here, not in a worker after the first runs
    truths = TRUTHS[:2] if args.quick else TRUTHS
    seeds = SEEDS[:1] if args.quick else SEEDS
    clusters = [c for c in args.clusters.split(";") if c]
    cells = [
        Cell(c, sp, tr, f"s{seed}", day)
        for c in clusters
        for sp in SPEEDS
        for tr in truths
        for seed in seeds
        for day in (1, 2)
    ]
    cells += [
        Cell(clusters[0 if args.fresh_on == "first" else i % len(clusters)], sp, "sharing", f"f{10_000 + i}", day)
        for i in range(args.fresh)
        for sp in SPEEDS
        for day in (1, 2)
    ]
    jobs: list[Job] = [(c, r, args.knob, sd) for c in cells for r in RUNS for sd in range(args.seeds)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        each = dict(zip(jobs, pool.map(one, jobs, chunksize=2), strict=True))
    got = {
        (c, r, args.knob): _pooled([each[(c, r, args.knob, sd)] for sd in range(args.seeds)])
        for c in cells
        for r in RUNS
    }
    every_seed: dict[tuple[str, int], list[int]] = {}  # per set and day: cells meeting W, H, B on every seed
    for c in cells:
        alone = [_targets({r: each[(c, r, args.knob, sd)] for r in RUNS}) for sd in range(args.seeds)]
        tally_all = every_seed.setdefault(("fresh" if c.trace.startswith("f") else "grid", c.day), [0, 0, 0])
        for k in range(3):
            tally_all[k] += int(all(t[k] for t in alone))
    print(
        f"{'cluster':36} {'speed':6} {'truth':8} {'trace':6} d | JCT/mfm fast  gavel ct    oracle"
        " | ct mksp | ct/orc | lost m/f/g/c/o | W H B"
    )
    rows = []
    counts: dict[tuple[str, int], list[int]] = {}
    for c in cells:
        r = {run: got[(c, run, args.knob)] for run in RUNS}
        base = r["mfm"]
        rj = {run: r[run][0] / base[0] for run in RUNS}
        mk = r["ct"][1] / base[1]
        lost = {run: r[run][2] for run in RUNS}
        w, h, b = _targets(r)
        kind = "fresh" if c.trace.startswith("f") else "grid"
        tally = counts.setdefault((kind, c.day), [0, 0, 0, 0])
        tally[0] += 1
        tally[1] += int(w)
        tally[2] += int(h)
        tally[3] += int(b)
        speed = c.speed.split(":")[0]
        print(
            f"{c.cluster:36} {speed:6} {c.truth:8} {c.trace:6} {c.day} |"
            f"         {rj['fast']:5.3f} {rj['gavel']:5.3f} {rj['ct']:5.3f} {rj['oracle']:5.3f}"
            f" | {mk:7.3f} | {r['ct'][0] / r['oracle'][0]:6.3f} | "
            f"{'/'.join(str(lost[x]) for x in RUNS):14} | {'W' if w else '-'} {'H' if h else '-'} {'B' if b else '-'}"
        )
        rows.append({"cell": c.__dict__, "runs": {k: list(v) for k, v in r.items()}, "targets": [w, h, b]})
    for (kind, day), (n, nw, nh, nb) in sorted(counts.items()):
        print(
            f"{kind} day {day}: never worse than mfm {nw}/{n}; within half-way to the oracle {nh}/{n};"
            f" below the best other baseline {nb}/{n}"
        )
    if args.seeds > 1:
        for (kind, day), (aw, ah, ab) in sorted(every_seed.items()):
            n = counts[(kind, day)][0]
            print(f"{kind} day {day}, on every one of {args.seeds} seeds alone: W {aw}/{n}, H {ah}/{n}, B {ab}/{n}")
    for run in RUNS[1:]:
        gm = statistics.geometric_mean(got[(c, run, args.knob)][0] / got[(c, "mfm", args.knob)][0] for c in cells)
        print(f"geometric mean of mean-JCT ratios to mfm, {run}: {gm:.3f}")
    print(f"{len(jobs)} runs in {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"knob": args.knob, "seeds": args.seeds, "cells": rows}, indent=1))
    return 0


def _pooled(runs: Sequence[tuple[float, float, int]]) -> tuple[float, float, int]:
    """One run's figures from several seeds': the means of mean JCT and makespan, the lost summed."""
    return (
        statistics.fmean(r[0] for r in runs),
        statistics.fmean(r[1] for r in runs),
        sum(r[2] for r in runs),
    )


def _targets(r: dict[str, tuple[float, float, int]]) -> tuple[bool, bool, bool]:
    """W, H, B of one cell's runs (see the module doc)."""
    rj = {run: r[run][0] / r["mfm"][0] for run in RUNS}
    mk = r["ct"][1] / r["mfm"][1]
    w = rj["ct"] <= 1.0 and mk <= 1.02 and r["ct"][2] <= r["mfm"][2]
    h = rj["ct"] <= (1.0 + rj["oracle"]) / 2
    b = rj["ct"] < min(rj["fast"], rj["gavel"])
    return w, h, b


if __name__ == "__main__":
    raise SystemExit(main())
