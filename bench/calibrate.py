"""How the sharing model was calibrated: once, on one configuration only.

Configuration: most-free-memory (the paper's MAGM) + oracle memory + strict FIFO, trace_t1,
4xA100-40GB, against exclusive allocation.  Targets (the published figures): makespan ratio
0.60-0.70, GPU energy ratio 0.80-0.90, time-weighted SM activity 1.4-1.7x, mean per-task
slowdown 1.3-2.0.  Free parameters: ``beta`` (contention), ``stall_visibility`` (share of
contention stalls the SM counters see) and ``busy_fraction`` (dynamic power drawn by any busy
GPU).  The activity profiles are fixed assumptions (core/sharing.py), not fitted.

The grid below is the one that was searched; the defaults in SharingModel are the first point
(in grid order) that meets all four targets.  Every other figure the simulator prints is a
prediction of the model.

    .venv/bin/python bench/calibrate.py
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace

from carma_airflow.core import SharingModel, parse_gpu_list
from carma_airflow.sim import SimConfig, load_catalog, load_trace, packaged, simulate

BETAS = (0.3, 0.5, 0.7, 0.9)
STALLS = (0.0, 0.5, 1.0)
BUSY = (0.3, 0.5)
TARGETS = {"makespan": (0.60, 0.70), "energy": (0.80, 0.90), "sm_activity": (1.4, 1.7), "slowdown": (1.3, 2.0)}


def figures(model: SharingModel) -> dict[str, float]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = load_trace(packaged("trace_t1.csv"), catalog)
    base = SimConfig(
        gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="oracle", queue="fifo", sharing=model, isolation="none"
    )  # the paper's setting: no memory fence
    excl = simulate(replace(base, policy="exclusive"), arrivals).summary()
    magm = simulate(replace(base, policy="most-free-memory"), arrivals).summary()
    return {
        "makespan": magm["makespan_s"] / excl["makespan_s"],
        "energy": magm["energy_kwh"] / excl["energy_kwh"],
        "sm_activity": magm["sm_activity_mean"] / excl["sm_activity_mean"],
        "slowdown": magm["mean_slowdown"],
    }


def main() -> int:
    print(f"{'beta':>5} {'stall':>5} {'busy':>5}  makespan  energy  SMact  slowdown")
    chosen = None
    for beta, stall, busy in itertools.product(BETAS, STALLS, BUSY):
        f = figures(SharingModel(beta=beta, stall_visibility=stall, busy_fraction=busy))
        ok = all(lo <= f[k] <= hi for k, (lo, hi) in TARGETS.items())
        if ok and chosen is None:
            chosen = (beta, stall, busy)
        print(
            f"{beta:5.2f} {stall:5.2f} {busy:5.2f}  {f['makespan']:8.3f} {f['energy']:7.3f} {f['sm_activity']:6.2f}"
            f" {f['slowdown']:9.2f}  {'meets all' if ok else ''}"
        )
    default = SharingModel()
    current = (default.beta, default.stall_visibility, default.busy_fraction)
    print(f"\nfirst point meeting all targets: {chosen}; SharingModel defaults: {current}")
    f = figures(default)
    print("defaults give: " + ", ".join(f"{k} {v:.3f}" for k, v in f.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
