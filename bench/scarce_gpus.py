"""Keeping scarce GPUs on mixed clusters (issue 44, item 2): the default with and without it, beside
most-free-memory, on clusters of several GPU sizes.

Per cell (a cluster, a trace, an interference truth and a speed truth) three runs with the same
queue (backfill) and estimator (``history+gpumemnet``, as bench/robustness.py's grid):
most-free-memory (``mfm``, the baseline: lowest index among idle GPUs), the default
(completion-time) with ``CompletionSettings.keep_scarce`` off (``ct-index``: the idle order as before
issue 44) and on (``ct``; since item 4 the idle order is fastest first on several models, and idle GPUs
are kept by the tries' speeds too: bench/mixed_fleet.py compares the rule with speed-aware baselines).
Printed: each one's mean JCT and makespan as a ratio of mfm's, side by
side, and tasks lost.  Traces: the paper's t1 and t2, and synthetic traces (seeds 100-101, 15
tasks per GPU, 2.0x exclusive load).  Speed truths: ``alike`` (every model the same speed) and
``spec:0`` (sim/speed.py).

    .venv/bin/python bench/scarce_gpus.py [--quick] [--jobs 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.sim import Arrival, SimConfig, Simulation, load_catalog, load_trace, packaged, synthetic_trace

CLUSTERS = (
    "2xA100-80GB,2xV100-32GB",
    "2xH100-80GB,2xA100-40GB,4xV100-32GB",
    "4xA100-80GB,4xT4",
    "2xH100-80GB,6xL4",
)
TRUTHS = ("sharing", "types:1")
SPEEDS = ("alike", "spec:0")
RUNS = ("mfm", "ct-index", "ct")
TASKS_PER_GPU, LOAD = 15, 2.0


def traces(gpus: int, quick: bool) -> dict[str, list[Arrival]]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    out = {}
    if gpus == 4:
        out["t1"] = load_trace(packaged("trace_t1.csv"), catalog)
        if not quick:
            out["t2"] = load_trace(packaged("trace_t2.csv"), catalog)
    for seed in (100,) if quick else (100, 101):
        out[f"s{seed}"] = synthetic_trace(catalog, TASKS_PER_GPU * gpus, gpus=gpus, load=LOAD, seed=seed)
    return out


def one(cell: tuple[str, str, str, str, str, bool]) -> tuple[float, float, int]:
    """(mean JCT, makespan, lost) of one run."""
    gpus, trace, truth, speed, run, quick = cell
    arrivals = traces(len(parse_gpu_list(gpus)), quick)[trace]
    cfg = SimConfig(
        gpus=tuple(parse_gpu_list(gpus)),
        policy="most-free-memory" if run == "mfm" else "completion-time",
        estimator="history+gpumemnet",
        queue="backfill",
        truth=truth,
        speed_truth=speed,
    )
    sim = Simulation(cfg)
    policy = sim.placer.policy
    if run == "ct-index":
        assert isinstance(policy, CompletionTime)
        policy.settings = replace(policy.settings, keep_scarce=False)
    result = sim.run(arrivals)
    done = [t for t in result.tasks if t.outcome == "success" and t.end_s is not None]
    jct = statistics.fmean(t.end_s - t.submit_s for t in done if t.end_s is not None) if done else 0.0
    return jct, result.makespan_s, len(result.tasks) - len(done)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="two clusters, one trace each, the sharing truth")
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once (processes)")
    args = ap.parse_args(argv)
    clusters = CLUSTERS[:2] if args.quick else CLUSTERS
    truths = TRUTHS[:1] if args.quick else TRUTHS
    cells = [
        (g, t, tr, sp)
        for g in clusters
        for t in traces(len(parse_gpu_list(g)), args.quick)
        for tr in truths
        for sp in SPEEDS
    ]
    jobs = [(*c, r, args.quick) for c in cells for r in RUNS]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        got = dict(zip(jobs, pool.map(one, jobs), strict=True))
    print(
        f"{'cluster':38} {'trace':5} {'truth':8} {'speed':7} | JCT ct-index   ct | makespan ct-index   ct | lost m/i/c"
    )
    wins = {"jct": 0, "mk": 0}
    for c in cells:
        base = got[(*c, "mfm", args.quick)]
        idx, ct = got[(*c, "ct-index", args.quick)], got[(*c, "ct", args.quick)]
        rj = (idx[0] / base[0], ct[0] / base[0])
        rm = (idx[1] / base[1], ct[1] / base[1])
        wins["jct"] += ct[0] <= idx[0]
        wins["mk"] += ct[1] <= idx[1]
        print(
            f"{c[0]:38} {c[1]:5} {c[2]:8} {c[3]:7} |     {rj[0]:8.3f} {rj[1]:5.3f} |"
            f"          {rm[0]:8.3f} {rm[1]:5.3f} | {base[2]}/{idx[2]}/{ct[2]}"
        )
    n = len(cells)
    print(f"ct's mean JCT <= ct-index's in {wins['jct']} of {n} cells; makespan in {wins['mk']} of {n}")
    jct_idx = statistics.geometric_mean(
        got[(*c, "ct-index", args.quick)][0] / got[(*c, "mfm", args.quick)][0] for c in cells
    )
    jct_ct = statistics.geometric_mean(got[(*c, "ct", args.quick)][0] / got[(*c, "mfm", args.quick)][0] for c in cells)
    print(f"geometric mean of mean-JCT ratios to mfm: ct-index {jct_idx:.3f}, ct {jct_ct:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
