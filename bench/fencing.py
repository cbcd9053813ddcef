"""Fenced collocation in the simulator: who crashes when true peaks outgrow the catalogue.

For the paper's traces (t1, t2) and a 12-trace synthetic sweep at the paper's load (the same
draw as bench/paper_table.py), 4xA100-40GB, each policy/estimator row runs with
``--memory-growth G`` twice: unfenced (``isolation=none``: the try that allocates next crashes)
fenced live (``caps``: each try held to its GPU less its co-tenants' reservations) and fenced
at start (``fixed``: reservation + headroom, as framework/MPS caps are).  Prints OOM crashes,
victims (OOMs of tries that asked for no more than their promise) and lost tasks, and the
fenced/unfenced ratios of makespan and mean JCT.

``--truth-seeds K`` replays t1 and t2 under K seeds of the truth (``SimConfig.seed``: which jobs
grow, by how much and when, and who allocates next when unfenced) and prints each row's ratios
as mean +- standard error and range: a trace with one or two OOM crashes gives one draw of a
chaotic schedule (a crash moves the placements of every later job), so one seed says little.

    .venv/bin/python bench/fencing.py [--growth 0.3] [--seeds 12] [--truth-seeds 20] [--json out/fencing.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from typing import Any

from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import SimConfig, load_catalog, load_trace, packaged, simulate, synthetic_trace

GPUS = "4xA100-40GB"
ROWS = (
    ("interference-aware", "gpumemnet", "backfill"),
    ("interference-aware", "oracle", "backfill"),
    ("most-free-memory", "oracle", "fifo"),
    ("most-free-memory", "gpumemnet", "fifo"),
)


def workloads(seeds: int) -> dict[str, list[Any]]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    out: dict[str, list[Any]] = {
        "t1": load_trace(str(packaged("trace_t1.csv")), catalog),
        "t2": load_trace(str(packaged("trace_t2.csv")), catalog),
    }
    for seed in range(seeds):
        out[f"sweep{seed}"] = synthetic_trace(catalog, 60, gpus=4, load=2.0, seed=seed)
    return out


def measure(growth: float, seeds: int) -> list[dict[str, Any]]:
    base = SimConfig(gpus=tuple(parse_gpu_list(GPUS)), memory_growth=growth)
    rows = []
    for name, arrivals in workloads(seeds).items():
        for policy, estimator, queue in ROWS:
            cfg = replace(base, policy=policy, estimator=estimator, queue=queue)
            got = {iso: simulate(replace(cfg, isolation=iso), arrivals).summary() for iso in ("none", "caps", "fixed")}
            row: dict[str, Any] = {"trace": name, "policy": policy, "estimator": estimator, "queue": queue}
            for iso, s in got.items():
                for key in ("oom_crashes", "victims", "lost", "makespan_s", "mean_jct_s"):
                    row[f"{key}_{iso}"] = s[key]
            for iso, suffix in (("caps", ""), ("fixed", "_fixed")):
                row[f"makespan_ratio{suffix}"] = round(got[iso]["makespan_s"] / got["none"]["makespan_s"], 4)
                row[f"jct_ratio{suffix}"] = round(got[iso]["mean_jct_s"] / got["none"]["mean_jct_s"], 4)
            rows.append(row)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    print(f"{'trace':<8} {'policy/estimator/queue':<40} OOM none/caps  victims none/caps  lost none/caps  makespan JCT")
    for r in rows:
        if r["trace"].startswith("sweep"):
            continue
        who = f"{r['policy']}/{r['estimator']}/{r['queue']}"
        print(
            f"{r['trace']:<8} {who:<40} {r['oom_crashes_none']:>5}/{r['oom_crashes_caps']:<5}    "
            f"{r['victims_none']:>5}/{r['victims_caps']:<5}        {r['lost_none']:>3}/{r['lost_caps']:<3}      "
            f"{r['makespan_ratio']:.3f}    {r['jct_ratio']:.3f}"
        )
    sweep = [r for r in rows if r["trace"].startswith("sweep")]
    for policy, estimator, queue in ROWS:
        mine = [r for r in sweep if (r["policy"], r["estimator"], r["queue"]) == (policy, estimator, queue)]
        if not mine:
            continue

        def total(key: str, rs: list[dict[str, Any]] = mine) -> int:
            return sum(int(r[key]) for r in rs)

        fixed_m = sum(r["makespan_ratio_fixed"] for r in mine) / len(mine)
        fixed_j = sum(r["jct_ratio_fixed"] for r in mine) / len(mine)
        fixed = (
            f"fixed caps: OOM {total('oom_crashes_fixed')}, victims {total('victims_fixed')}, lost "
            f"{total('lost_fixed')}, makespan ratio mean {fixed_m:.3f}, JCT ratio mean {fixed_j:.3f}"
        )
        mean_m = sum(r["makespan_ratio"] for r in mine) / len(mine)
        mean_j = sum(r["jct_ratio"] for r in mine) / len(mine)
        worst_m = max(r["makespan_ratio"] for r in mine)
        worst_j = max(r["jct_ratio"] for r in mine)
        print(
            f"sweep({len(mine)}) {policy}/{estimator}/{queue}: "
            f"OOM {total('oom_crashes_none')}/{total('oom_crashes_caps')}, "
            f"victims {total('victims_none')}/{total('victims_caps')}, lost {total('lost_none')}/{total('lost_caps')}; "
            f"makespan ratio mean {mean_m:.3f} (worst {worst_m:.3f}), JCT ratio mean {mean_j:.3f} (worst {worst_j:.3f})"
        )
        print(f"          {fixed}")


def crash_costs(timeline: Any) -> tuple[float, float]:
    """What a run's OOM crashes cost directly: the GPU-seconds their tries had run (lost
    progress) and the seconds each crashed job waited for its next try."""
    entries = sorted(timeline, key=lambda e: e.start)
    lost = wait = 0.0
    for e in entries:
        if e.outcome != "oom":
            continue
        lost += (e.end - e.start) * len(e.gpus)
        nxt = next((x for x in entries if x.job_id == e.job_id and x.start >= e.end), None)
        wait += 0.0 if nxt is None else nxt.start - e.end
    return lost, wait


def across_seeds(growth: float, seeds: int) -> list[dict[str, Any]]:
    """t1 and t2 under ``seeds`` seeds of the truth, unfenced and fenced live, per row."""
    base = SimConfig(gpus=tuple(parse_gpu_list(GPUS)), memory_growth=growth)
    traces = {k: v for k, v in workloads(0).items() if k in ("t1", "t2")}
    rows = []
    for name, arrivals in traces.items():
        for policy, estimator, queue in ROWS:
            row: dict[str, Any] = {"trace": name, "policy": policy, "estimator": estimator, "queue": queue}
            ratios: dict[str, list[float]] = {"makespan": [], "jct": []}
            for iso in ("none", "caps"):
                for key in ("oom_crashes", "victims", "lost", "lost_gpu_s", "retry_wait_s"):
                    row[f"{key}_{iso}"] = 0
            for seed in range(seeds):
                cfg = replace(base, policy=policy, estimator=estimator, queue=queue, seed=seed)
                results = {iso: simulate(replace(cfg, isolation=iso), arrivals) for iso in ("none", "caps")}
                got = {iso: r.summary() for iso, r in results.items()}
                for iso, s in got.items():
                    for key in ("oom_crashes", "victims", "lost"):
                        row[f"{key}_{iso}"] += int(s[key])
                    lost_s, wait_s = crash_costs(results[iso].timeline)
                    row[f"lost_gpu_s_{iso}"] += round(lost_s)
                    row[f"retry_wait_s_{iso}"] += round(wait_s)
                ratios["makespan"].append(got["caps"]["makespan_s"] / got["none"]["makespan_s"])
                ratios["jct"].append(got["caps"]["mean_jct_s"] / got["none"]["mean_jct_s"])
            for what, values in ratios.items():
                row[f"{what}_ratios"] = [round(v, 4) for v in values]
                row[f"{what}_mean"] = round(statistics.fmean(values), 4)
                row[f"{what}_se"] = round(statistics.stdev(values) / len(values) ** 0.5, 4) if len(values) > 1 else 0.0
            rows.append(row)
    return rows


def report_seeds(rows: list[dict[str, Any]], seeds: int) -> None:
    print(
        f"t1/t2 over {seeds} truth seeds: caps/none ratio mean +- standard error [min, max]; per OOM crash, "
        "none/caps: GPU-seconds its try had run (lost) and seconds its job waited for the next try"
    )
    for r in rows:
        who = f"{r['policy']}/{r['estimator']}/{r['queue']}"
        cells = []
        for what in ("makespan", "jct"):
            values = r[f"{what}_ratios"]
            cells.append(
                f"{what} {r[f'{what}_mean']:.3f} +- {r[f'{what}_se']:.3f} [{min(values):.3f}, {max(values):.3f}]"
            )
        print(
            f"{r['trace']:<4} {who:<40} OOM {r['oom_crashes_none']}/{r['oom_crashes_caps']}, victims "
            f"{r['victims_none']}/{r['victims_caps']}, lost {r['lost_none']}/{r['lost_caps']}; " + "; ".join(cells)
        )
        lost = {iso: r[f"lost_gpu_s_{iso}"] / max(1, r[f"oom_crashes_{iso}"]) for iso in ("none", "caps")}
        wait = {iso: r[f"retry_wait_s_{iso}"] / max(1, r[f"oom_crashes_{iso}"]) for iso in ("none", "caps")}
        print(
            f"{'':<45} per crash: lost {lost['none']:.0f}/{lost['caps']:.0f} GPU-s, "
            f"retry wait {wait['none']:.0f}/{wait['caps']:.0f} s"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--growth", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--truth-seeds", type=int, default=0, help="also t1/t2 under this many truth seeds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = measure(args.growth, args.seeds)
    report(rows)
    seeded = across_seeds(args.growth, args.truth_seeds) if args.truth_seeds > 0 else []
    if seeded:
        report_seeds(seeded, args.truth_seeds)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows + [dict(r, trace=f"{r['trace']}-seeds") for r in seeded], handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
