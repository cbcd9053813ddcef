"""Learned interference in the simulator: ours against the paper's policy, under several truths.

The simulator keeps the *truth* (the sharing model's ``beta``, and ``activity_scale``: how much of
the activity the monitor reports is real demand) apart from what the placer *knows* (activities
and an interference model learned from simulated telemetry and ended tries; see
``carma_airflow/sim/engine.py``).  This script prints, side by side in one run, ratios to
exclusive allocation for exclusive, the paper's most-free-memory (MAGM, strict FIFO), the
interference-aware policy and the predictive one (both backfill), all with GPUMemNet estimates:

1. the paper's traces t1 and t2 on 4xA100-40GB at today's calibration (beta 0.5, scale 1.0);
2. the mean over 12 synthetic 60-task traces at the paper's load (2.0x exclusive capacity);
3. every truth in beta {0.1, 0.5, 0.8} x activity scale {0.6, 1.0}: t1, t2 and the 12 traces;

then checks the targets (issue 13) for the candidate policy.  Figures are predictions of the
sharing model (docs/model.md), not measurements.

``--learned-memory`` adds, beside the same rows with GPUMemNet alone, the interference-aware and
the candidate policy with the executor's learned memory ahead of GPUMemNet (the ``history``
estimator, sim/memory.py): learned within the run from ended tries (``+ mem``), and with a store
that one earlier replay of the same trace filled (``+ mem, warm``: a DAG that runs every day),
and counts the targets each of them meets.  The paper's policies keep plain GPUMemNet.

    .venv/bin/python bench/learned_interference.py [--candidate predictive] [--min-gain 0.25]
        [--max-slowdown 2.5] [--max-tenants 3] [--fallback interference-aware] [--no-progress]
        [--learned-memory] [--seeds 12] [--json out/learned.json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.predictive import PredictiveSettings
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim import SimConfig, Simulation, load_catalog, load_trace, packaged, synthetic_trace
from carma_airflow.sim.workload import Arrival

GPUS = "4xA100-40GB"
GPU_MODEL = "A100-40GB"
KNOWN = ("none", "learned", "borrowed", "sure")
TRUTHS = [(b, s) for b in (0.1, 0.5, 0.8) for s in (0.6, 1.0)]
PAPER = ("first-fit", "best-fit", "most-free-memory", "least-utilised")
Row = dict[str, float]
HEADS = ("t1 mksp", "t1 JCT", "t2 mksp", "t2 JCT", "sw mksp", "sw JCT")


SMOKE_TASKS = 20  # --smoke: every trace cut to its first tasks (a run-through: the figures mean nothing)


def workloads(seeds: int, smoke: bool = False) -> dict[str, list[Arrival]]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    out = {t: load_trace(packaged(f"trace_{t}.csv"), catalog) for t in ("t1", "t2")}
    for seed in range(seeds):
        out[f"s{seed}"] = synthetic_trace(catalog, 60, gpus=4, load=2.0, seed=seed)
    if smoke:
        out = {name: arrivals[:SMOKE_TASKS] for name, arrivals in out.items()}
    return out


MEMORY = {"+ mem": 0, "+ mem, warm": 1}  # learned memory: earlier replays that filled the store


def configs(candidate: str, knobs: PredictiveSettings, learned_memory: bool = False) -> dict[str, SimConfig]:
    base = SimConfig(gpus=tuple(parse_gpu_list(GPUS)), estimator="gpumemnet")
    out = {
        "exclusive": replace(base, policy="exclusive", estimator="oracle", queue="fifo"),
        "most-free-memory": replace(base, policy="most-free-memory", queue="fifo"),
        "interference-aware": replace(base, policy="interference-aware", queue="backfill"),
        "candidate": replace(base, policy=candidate, queue="backfill", predictive=knobs),
    }
    if learned_memory:
        for suffix, warm in MEMORY.items():
            for name in ("interference-aware", "candidate"):
                out[f"{name} {suffix}"] = replace(out[name], estimator="history", warm_runs=warm)
    for p in PAPER:
        if p != "most-free-memory":
            out[p] = replace(base, policy=p, queue="fifo")
    return out


def ours(cfgs: dict[str, SimConfig]) -> list[str]:
    """The rows checked against the targets: the candidate, then ours with learned memory."""
    return ["candidate", *(n for n in cfgs if n.endswith(tuple(MEMORY)))]


def run_one(job: tuple[str, str, float, float, SimConfig, list[Arrival]]) -> tuple[str, str, float, float, Row]:
    name, trace, beta, scale, cfg, arrivals = job
    cfg = replace(cfg, sharing=SharingModel(beta=beta), activity_scale=scale)
    sim = Simulation(cfg)
    s = sim.run(arrivals).summary()
    row = {k: float(s[k]) for k in ("makespan_s", "mean_jct_s", "oom_crashes", "lost")}
    # what the placer knew (the reasons behind the figures): per placed try, and the fit
    for kind in KNOWN:
        row[kind] = float(sim.know.placed.get(kind, 0))
    fit = sim.interference.fit_for(GPU_MODEL)
    row["observations"] = float(sim.know.observations)
    row["fit learned"] = float(fit.learned)
    return name, trace, beta, scale, row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", default="predictive", help="policy checked against the targets")
    d = PredictiveSettings()
    parser.add_argument("--min-gain", type=float, default=d.min_gain)
    parser.add_argument("--max-slowdown", type=float, default=d.max_slowdown)
    parser.add_argument("--min-confidence", type=float, default=d.min_confidence)
    parser.add_argument("--gain-step", type=float, default=d.gain_step)
    parser.add_argument("--max-tenants", type=int, default=d.max_tenants)
    parser.add_argument(
        "--fallback", default=d.fallback, help="order while unsure: interference-aware, most-free-memory"
    )
    parser.add_argument("--no-progress", action="store_true", help="tries report no progress (solo baselines only)")
    parser.add_argument(
        "--learned-memory", action="store_true", help="add ours with memory learned from ended tries (history)"
    )
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"every trace cut to its first {SMOKE_TASKS} tasks (the tests' run-through)",
    )
    args = parser.parse_args()
    knobs = PredictiveSettings(
        args.min_gain, args.max_slowdown, args.min_confidence, args.gain_step, args.max_tenants, args.fallback
    )
    loads = workloads(args.seeds, args.smoke)
    cfgs = configs(args.candidate, knobs, args.learned_memory)
    if args.no_progress:
        cfgs = {name: replace(cfg, progress_reports=False) for name, cfg in cfgs.items()}
    jobs = []
    for beta, scale in TRUTHS:
        for trace, arrivals in loads.items():
            for name, cfg in cfgs.items():
                default_truth = (beta, scale) == (0.5, 1.0)
                if name in PAPER and name != "most-free-memory" and not default_truth:
                    continue  # the other paper policies: only at today's calibration (OOM target)
                if name == "exclusive" and not default_truth:
                    continue  # nothing shares a GPU: the truth does not change it
                jobs.append((name, trace, beta, scale, cfg, arrivals))
    results: dict[tuple[str, str, float, float], Row] = {}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for name, trace, beta, scale, row in pool.map(run_one, jobs, chunksize=4):
            results[(name, trace, beta, scale)] = row

    def get(name: str, trace: str, beta: float, scale: float) -> Row:
        if name == "exclusive" or (name in PAPER and name != "most-free-memory"):
            beta, scale = 0.5, 1.0
        return results[(name, trace, beta, scale)]

    def ratio(name: str, trace: str, beta: float, scale: float, key: str) -> float:
        return get(name, trace, beta, scale)[key] / get("exclusive", trace, beta, scale)[key]

    sweep = [t for t in loads if t.startswith("s")]
    shown: tuple[str, ...] = ("exclusive", "most-free-memory", "interference-aware", "candidate")
    shown += tuple(n for n in cfgs if n.endswith(tuple(MEMORY)))
    label = {n: n.replace("candidate", args.candidate) for n in cfgs}
    label["candidate"] = f"{args.candidate} (candidate)"
    print(f"candidate: {args.candidate}, {knobs}")
    report: dict[str, object] = {
        "candidate": args.candidate,
        "knobs": str(knobs),
    }

    def robustness(who: str, beta: float, scale: float, verbose: bool) -> list[tuple[str, str, bool]]:
        """``who`` vs most-free-memory at one truth (t1, t2 and the sweep's mean)."""
        out = []
        for where, traces in (("t1", ["t1"]), ("t2", ["t2"]), ("sweep", sweep)):
            if not traces:
                continue
            jct_c = statistics.mean(ratio(who, t, beta, scale, "mean_jct_s") for t in traces)
            jct_m = statistics.mean(ratio("most-free-memory", t, beta, scale, "mean_jct_s") for t in traces)
            mk_c = statistics.mean(ratio(who, t, beta, scale, "makespan_s") for t in traces)
            mk_m = statistics.mean(ratio("most-free-memory", t, beta, scale, "makespan_s") for t in traces)
            gain = 1.0 - jct_c / jct_m
            if verbose:
                print(
                    f"   {where:5} candidate / most-free-memory: JCT {jct_c / jct_m:.3f} ({gain:+.1%} better), "
                    f"makespan {mk_c / mk_m:.3f}"
                )
            out.append(
                (f"beta {beta}, scale {scale}, {where}: JCT >= 15% better than MAGM", f"{gain:+.1%}", gain >= 0.15)
            )
            out.append(
                (
                    f"beta {beta}, scale {scale}, {where}: makespan not worse than MAGM",
                    f"{mk_c / mk_m:.3f}x",
                    mk_c <= mk_m + 1e-9,
                )
            )
        lost = sum(get(who, t, beta, scale)["lost"] for t in loads)
        out.append((f"beta {beta}, scale {scale}: candidate loses nothing", f"{lost:.0f}", lost == 0))
        return out

    def headline(who: str) -> list[tuple[str, str, bool]]:
        """Today's calibration: the headline targets."""
        t1 = ratio(who, "t1", 0.5, 1.0, "makespan_s")
        out = [("t1 makespan <= 0.66 of exclusive", f"{t1:.3f}", t1 <= 0.66)]
        if sweep:
            jct = statistics.mean(ratio(who, t, 0.5, 1.0, "mean_jct_s") for t in sweep)
            out.append((f"mean JCT over the {len(sweep)}-trace sweep <= 0.42 of exclusive", f"{jct:.3f}", jct <= 0.42))
        oom_totals = {p: sum(get(p, t, 0.5, 1.0)["oom_crashes"] for t in loads) for p in (*PAPER, who)}
        fewest = min(oom_totals[p] for p in PAPER)
        paper = ", ".join(f"{p} {oom_totals[p]:.0f}" for p in PAPER)
        out.append(
            (
                "OOMs (t1+t2+sweep) <= every paper policy's (GPUMemNet)",
                f"{oom_totals[who]:.0f} vs {paper}",
                oom_totals[who] <= fewest,
            )
        )
        return out

    checks: dict[str, list[tuple[str, str, bool]]] = {who: [] for who in ours(cfgs)}
    table = []
    for beta, scale in TRUTHS:
        print(f"\n== truth beta {beta}, activity scale {scale}: ratios to exclusive (GPUMemNet; exclusive: oracle)")
        print(f"{'policy':34} " + " ".join(f"{h:>8}" for h in HEADS) + f" {'OOM':>4} {'lost':>4}")
        for name in shown:
            cells = []
            for trace in ("t1", "t2"):
                cells += [ratio(name, trace, beta, scale, "makespan_s"), ratio(name, trace, beta, scale, "mean_jct_s")]
            if sweep:
                cells += [
                    statistics.mean(ratio(name, t, beta, scale, "makespan_s") for t in sweep),
                    statistics.mean(ratio(name, t, beta, scale, "mean_jct_s") for t in sweep),
                ]
            ooms = sum(get(name, t, beta, scale)["oom_crashes"] for t in loads)
            lost = sum(get(name, t, beta, scale)["lost"] for t in loads)
            text = " ".join(f"{c:8.3f}" for c in cells)
            print(f"{label.get(name, name):34} {text} {ooms:4.0f} {lost:4.0f}")
            table.append(
                {
                    "beta": beta,
                    "scale": scale,
                    "policy": label.get(name, name),
                    "cells": cells,
                    "oom": ooms,
                    "lost": lost,
                }
            )
        known = {k: sum(get("candidate", t, beta, scale)[k] for t in loads) for k in KNOWN}
        placed = sum(known[k] for k in ("none", "learned", "borrowed"))
        obs = sum(get("candidate", t, beta, scale)["observations"] for t in loads)
        fits = sum(get("candidate", t, beta, scale)["fit learned"] for t in loads)
        print(
            f"   candidate's knowledge, {placed:.0f} placed tries: activity learned {known['learned']:.0f}, "
            f"borrowed {known['borrowed']:.0f}, none {known['none']:.0f}, sure enough to decide "
            f"{known['sure']:.0f}; interference observations {obs:.0f}, fit left its prior on "
            f"{fits:.0f} of {len(loads)} traces"
        )
        for who in checks:
            checks[who] += robustness(who, beta, scale, verbose=who == "candidate")
    for who in checks:
        checks[who] += headline(who)
    print("\n== targets (candidate)")
    missed = 0
    for what, value, ok in checks["candidate"]:
        missed += not ok
        print(f"{'meets ' if ok else 'MISSES'}  {what}: {value}")
    print(f"{len(checks['candidate']) - missed} of {len(checks['candidate'])} targets met")
    for who, mine in checks.items():
        if who != "candidate":
            heads = "; ".join(
                f"{'meets' if ok else 'MISSES'} {what.split(' <=')[0]} {value}" for what, value, ok in mine[-3:]
            )
            print(f"{label[who]}: {sum(ok for _, _, ok in mine)} of {len(mine)} targets met ({heads})")
    if args.json:
        report["table"] = table
        report["checks"] = [{"what": w, "value": v, "ok": ok} for w, v, ok in checks["candidate"]]
        report["checks_by_row"] = {
            label[who]: [{"what": w, "value": v, "ok": ok} for w, v, ok in mine] for who, mine in checks.items()
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
