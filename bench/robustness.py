"""Placement robustness across truths: our policies against most-free-memory with the same queue.

Issue 19's grid: t1, t2 and a sweep of 12 synthetic 60-task traces (2.0x exclusive load) on
4xA100-40GB; the executor's learned memory ahead of GPUMemNet (``history+gpumemnet``) and the
backfill queue for *every* policy, so a difference is the placement's, not the queue's or the
estimator's; truths: the sharing model at beta {0.1, 0.5, 0.8} x activity scale {0.6, 1.0}, and
two of another form (:mod:`carma_airflow.sim.truth`): per-type terms drawn (``types:1``) and the
measured pair table mapped onto task types (``pairs:gavel_pairs.csv:V100``).

For each candidate (interference-aware, the default; predictive) and each (truth, workload) it
prints mean JCT and makespan as ratios to most-free-memory's, and counts a check met where
mean JCT <= 0.85x, makespan <= 1.0x and no task lost (the sweep: ratios of the means).

    .venv/bin/python bench/robustness.py [--seeds 12] [--pairs PATH] [--min-observations 10]
        [--tasks 60] [--candidates interference-aware,predictive,predictive+override] [--json out.json]

``predictive+override``: the prediction may override the paper's risk rule where the fit is
learned and the lower end of the gain pays (``PredictiveSettings.override_risk``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from carma_airflow.core import parse_gpu_list  # noqa: E402
from carma_airflow.core.interference import InterferenceModel, InterferenceSettings  # noqa: E402
from carma_airflow.core.policies.predictive import PredictiveSettings  # noqa: E402
from carma_airflow.core.sharing import SharingModel  # noqa: E402
from carma_airflow.sim import SimConfig, Simulation, load_catalog, load_trace, packaged, synthetic_trace  # noqa: E402
from carma_airflow.sim.workload import Arrival  # noqa: E402

GPUS = "4xA100-40GB"
ESTIMATOR = "history+gpumemnet"
BASELINE = "most-free-memory"
DEFAULT_PAIRS = ROOT.parent / "shared" / "workloads" / "gavel_pairs.csv"


def truths(pairs: Path) -> list[tuple[str, float, float, str]]:
    """(label, beta, activity scale, truth spec)."""
    out = [(f"b{b} s{s}", b, s, "sharing") for b in (0.1, 0.5, 0.8) for s in (0.6, 1.0)]
    out.append(("types:1", 0.5, 1.0, "types:1"))
    if pairs.exists():
        out.append(("pairs V100", 0.5, 1.0, f"pairs:{pairs}:V100:0"))
    return out


def workloads(seeds: int, tasks: int = 60) -> dict[str, list[Arrival]]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    out = {t: load_trace(packaged(f"trace_{t}.csv"), catalog) for t in ("t1", "t2")}
    for seed in range(seeds):
        out[f"s{seed}"] = synthetic_trace(catalog, tasks, gpus=4, load=2.0, seed=seed)
    return out


MIN_OBSERVATIONS = InterferenceSettings().min_observations


def run(
    policy: str,
    beta: float,
    scale: float,
    truth: str,
    arrivals: list[Arrival],
    min_observations: int = MIN_OBSERVATIONS,
) -> tuple[float, float, int]:
    """``policy``: a policy name, or ``predictive+override`` (the prediction may override the risk rule)."""
    name, _, variant = policy.partition("+")
    cfg = SimConfig(gpus=tuple(parse_gpu_list(GPUS)), policy=name, estimator=ESTIMATOR, queue="backfill")
    cfg = replace(cfg, sharing=SharingModel(beta=beta), activity_scale=scale, truth=truth)
    if name == "predictive":
        cfg = replace(cfg, predictive=PredictiveSettings(override_risk=variant == "override"))
    sim = Simulation(cfg)
    if InterferenceSettings().min_observations != MIN_OBSERVATIONS:
        sim.know.interference = InterferenceModel(settings=InterferenceSettings(min_observations=MIN_OBSERVATIONS))
    r = sim.run(arrivals)
    done = [t for t in r.tasks if t.outcome == "success" and t.end_s is not None]
    jct = statistics.fmean(t.end_s - t.submit_s for t in done) if done else float("inf")  # type: ignore[operator]
    return jct, r.makespan_s, len(r.tasks) - len(done)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--pairs", default=str(DEFAULT_PAIRS))
    ap.add_argument("--candidates", default="interference-aware,predictive")
    ap.add_argument("--tasks", type=int, default=60, help="tasks per synthetic trace of the sweep")
    ap.add_argument("--min-observations", type=int, default=MIN_OBSERVATIONS, help="before a fit leaves its prior")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    loads = workloads(args.seeds, args.tasks)
    sweep = [k for k in loads if k.startswith("s")]
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    met = dict.fromkeys(candidates, 0)
    total = 0
    print(f"{GPUS}, {ESTIMATOR}, backfill for every policy; ratios to {BASELINE} (JCT / makespan, lost)")
    print(f"{'truth':<12} {'policy':<20} {'t1':>18} {'t2':>18} {'sweep':>18}")
    for label, beta, scale, truth in truths(Path(args.pairs)):
        per: dict[str, dict[str, tuple[float, float, int]]] = {}
        for policy in [BASELINE, *candidates]:
            per[policy] = {
                name: run(policy, beta, scale, truth, arr, args.min_observations) for name, arr in loads.items()
            }
        base = per[BASELINE]
        results[label] = {}
        for policy in candidates:
            cells = []
            row: dict[str, list[float]] = {}
            for name in ("t1", "t2", "sweep"):
                keys = sweep if name == "sweep" else [name]
                jct = statistics.fmean(per[policy][k][0] for k in keys) / statistics.fmean(base[k][0] for k in keys)
                mksp = statistics.fmean(per[policy][k][1] for k in keys) / statistics.fmean(base[k][1] for k in keys)
                lost = sum(per[policy][k][2] for k in keys)
                ok = jct <= 0.85 and mksp <= 1.0 and lost == 0
                met[policy] += ok
                cells.append(f"{jct:.2f}/{mksp:.2f}{'' if lost == 0 else f' L{lost}'}{' *' if ok else '  '}")
                row[name] = [jct, mksp, float(lost), float(ok)]
            results[label][policy] = row
            print(f"{label:<12} {policy:<20} " + " ".join(f"{c:>18}" for c in cells))
        total += 3
    print(f"checks met (* : JCT <= 0.85x, makespan <= 1.0x, nothing lost), of {total}:")
    for policy in candidates:
        print(f"  {policy}: {met[policy]}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"results": results, "met": met, "checks": total}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
