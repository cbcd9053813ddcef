"""Fenced collocation in the simulator: which cap rule each mechanism should default to, measured.

Per host profile (``--host framework|mps|driver``: framework caps only, an MPS daemon, NVML
per-cgroup driver limits), each cap rule the mechanism can play (``promise``, ``protective``,
``live``; under MPS ``live`` is the pinned limit fixed at the start at ``protective`` with the
framework's live cap beneath it) against no fence (``isolation = none``), with
the default policy, estimator and queue on 4xA100-40GB.  Cells: the paper's traces t1 and t2 over
``--truth-seeds`` seeds of the truth (which jobs grow, by how much and when, who allocates next
when unfenced), and a sweep of ``--sweep`` synthetic 60-task traces at 2.0x exclusive load (one
truth seed each); memory growth 0, 0.1 and 0.3; checkpoints never and every 10 minutes
(``--checkpoint-every 600``), the fenced run against the unfenced one with the same checkpoints.

Per cell and rule it prints OOM crashes and victims (summed over seeds, the unfenced figure
beside), tasks lost, the mean JCT ratio to ``none`` (mean of the per-seed ratios +- standard
error; the sweep: the mean over its traces) and the GPU-hours the crashes threw away.  Then the
targets of issue 22 for the executor's default rule on each mechanism at growth 0.3 on t1 and t2:
0 victims, no more OOM crashes than ``none``, mean JCT <= 1.00x ``none`` with checkpoints every
10 minutes and <= 1.03x without; and, per mechanism, the rule the numbers favour (the targets
met, else the fewest victims on t1 and t2, then the lowest mean JCT ratio over t1, t2 and the
sweep at growth 0.3).

In the simulator a mechanism's model is its rule and, for a live rule, the seconds before a
re-set (core/fencing.py ``FenceModel``): framework and driver caps under ``promise`` or
``protective`` are the same model, so each distinct model runs once and its figures stand for
every host that has it.

    .venv/bin/python bench/fencing.py [--truth-seeds 20] [--sweep 12] [--jobs 2] [--quick | --smoke] [--json out.json]
        [--policy NAME] [--estimator NAME]   (default: the simulator's, which are the executor's)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from carma_airflow.core import parse_gpu_list  # noqa: E402
from carma_airflow.core.fencing import CapRule, FenceModel  # noqa: E402
from carma_airflow.sim import SimConfig, load_catalog, load_trace, packaged, simulate, synthetic_trace  # noqa: E402
from carma_airflow.sim.fencing import HOST_PROFILES, default_cap_rule, sim_fence  # noqa: E402
from carma_airflow.sim.workload import Arrival  # noqa: E402

GPUS = "4xA100-40GB"
GROWTHS = (0.0, 0.1, 0.3)
CHECKPOINTS = (0.0, 600.0)
TARGET_GROWTH = 0.3
TARGET_JCT = {0.0: 1.03, 600.0: 1.00}  # issue 22: mean JCT ratio to none, without / with checkpoints
SMOKE_TASKS = 20  # --smoke: each trace's first tasks (a run-through: the figures mean nothing)


def rules_of(host: str) -> list[CapRule]:
    """The rules the host's own mechanism (what ``auto`` resolves to there) can play."""
    mode = sim_fence(SimConfig(gpus=(), host=host, isolation="auto")).model.mode
    return [r for r in CapRule if FenceModel.of(mode, r).rule is r]


def model_key(host: str, rule: CapRule | None) -> str:
    """The distinct model a host and rule make (``none`` for no fence)."""
    if rule is None:
        return "none"
    model = sim_fence(SimConfig(gpus=(), host=host, isolation="auto", cap_rule=rule.value)).model
    if not model.live:
        return model.rule.value
    return f"{model.rule.value}{'+start' if model.start_bound else ''}@{model.reset_s:g}"


@dataclass(frozen=True, slots=True)
class Job:
    cell: str  # t1 | t2 | sweepK
    seed: int
    growth: float
    every: float
    key: str  # model key
    host: str
    rule: str | None
    policy: str = ""  # "": the default
    estimator: str = ""
    tasks: int = 0  # 0: the whole trace; else its first tasks (--smoke)


_TRACES: dict[str, list[Arrival]] = {}


def _arrivals(cell: str) -> list[Arrival]:
    if cell not in _TRACES:
        catalog = load_catalog(packaged("task_catalog.csv"))
        if cell in ("t1", "t2"):
            _TRACES[cell] = load_trace(str(packaged(f"trace_{cell}.csv")), catalog)
        else:
            _TRACES[cell] = synthetic_trace(catalog, 60, gpus=4, load=2.0, seed=int(cell.removeprefix("sweep")))
    return _TRACES[cell]


def run_one(job: Job) -> tuple[Job, dict[str, Any]]:
    cfg = SimConfig(gpus=tuple(parse_gpu_list(GPUS)))
    if job.policy:
        cfg = replace(cfg, policy=job.policy)
    if job.estimator:
        cfg = replace(cfg, estimator=job.estimator)
    cfg = replace(
        cfg,
        memory_growth=job.growth,
        seed=job.seed,
        host=job.host,
        isolation="none" if job.rule is None else "auto",
        cap_rule=job.rule,
        checkpoint_every_s=job.every,
    )
    arrivals = _arrivals(job.cell)
    s = simulate(cfg, arrivals[: job.tasks] if job.tasks else arrivals).summary()
    keep = ("oom_crashes", "victims", "lost", "mean_jct_s", "makespan_s", "lost_gpu_s", "crashed_gpu_s")
    return job, {k: s[k] for k in keep}


def plan(
    truth_seeds: int,
    sweep: int,
    growths: tuple[float, ...],
    policy: str = "",
    estimator: str = "",
    hosts: tuple[str, ...] = HOST_PROFILES,
) -> list[Job]:
    cells = [(c, s) for c in ("t1", "t2") for s in range(truth_seeds)] + [(f"sweep{k}", k) for k in range(sweep)]
    models: dict[str, tuple[str, str | None]] = {"none": (HOST_PROFILES[0], None)}
    for host in hosts:
        for rule in rules_of(host):
            models.setdefault(model_key(host, rule), (host, rule.value))
    return [
        Job(cell, seed, g, every, key, host, rule, policy, estimator)
        for g in growths
        for every in CHECKPOINTS
        for key, (host, rule) in models.items()
        for cell, seed in cells
    ]


def measure(jobs: list[Job], workers: int) -> dict[Job, dict[str, Any]]:
    out: dict[Job, dict[str, Any]] = {}
    started = time.monotonic()
    step = max(1, len(jobs) // 20)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, (job, got) in enumerate(pool.map(run_one, jobs, chunksize=4), start=1):
            out[job] = got
            if i % step == 0 or i == len(jobs):
                print(f"  {i}/{len(jobs)} simulations, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return out


def _mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return mean, se


def cell_row(results: dict[Job, dict[str, Any]], cell: str, growth: float, every: float, key: str) -> dict[str, Any]:
    """One rule's figures on one cell (t1, t2, or ``sweep``: every sweep trace), against none."""
    mine = {(j.cell, j.seed): r for j, r in results.items()
            if j.growth == growth and j.every == every and j.key == key and _in(j.cell, cell)}  # fmt: skip
    base = {(j.cell, j.seed): r for j, r in results.items()
            if j.growth == growth and j.every == every and j.key == "none" and _in(j.cell, cell)}  # fmt: skip
    ratios = [mine[k]["mean_jct_s"] / base[k]["mean_jct_s"] for k in sorted(mine) if base[k]["mean_jct_s"] > 0]
    mean, se = _mean_se(ratios)

    def total(rs: dict[Any, dict[str, Any]], name: str) -> float:
        return float(sum(r[name] for r in rs.values()))

    return {
        "cell": cell,
        "growth": growth,
        "checkpoint_every_s": every,
        "model": key,
        "runs": len(mine),
        "oom_crashes": int(total(mine, "oom_crashes")),
        "oom_crashes_none": int(total(base, "oom_crashes")),
        "victims": int(total(mine, "victims")),
        "victims_none": int(total(base, "victims")),
        "lost": int(total(mine, "lost")),
        "lost_none": int(total(base, "lost")),
        "jct_ratio": round(mean, 4),
        "jct_se": round(se, 4),
        "jct_ratios": [round(r, 4) for r in ratios],
        "lost_gpu_h": round(total(mine, "lost_gpu_s") / 3600, 2),
        "lost_gpu_h_none": round(total(base, "lost_gpu_s") / 3600, 2),
    }


def _in(name: str, cell: str) -> bool:
    return name.startswith("sweep") if cell == "sweep" else name == cell


def table(results: dict[Job, dict[str, Any]], growths: tuple[float, ...]) -> list[dict[str, Any]]:
    keys = sorted({j.key for j in results if j.key != "none"})
    cells = [c for c in ("t1", "t2", "sweep") if any(_in(j.cell, c) for j in results)]
    return [
        cell_row(results, cell, g, every, key)
        for g in growths
        for cell in cells
        for every in CHECKPOINTS
        for key in keys
    ]


def report(
    rows: list[dict[str, Any]], seeds: int, sweep: int, who: str, hosts: tuple[str, ...] = HOST_PROFILES
) -> dict[str, dict[str, Any]]:
    print(
        f"{GPUS}, {who}; t1, t2 over {seeds} truth seeds, sweep of {sweep} traces; "
        "each rule against isolation = none with the same checkpoints (JCT: mean of per-run ratios +- SE)"
    )
    for host in hosts:
        mode = sim_fence(SimConfig(gpus=(), host=host, isolation="auto")).model.mode
        default = default_cap_rule(mode)
        print(f"\nhost {host}: auto -> {mode.value}; the executor's default rule: {default.value}")
        print(
            f"{'cell':<6} {'growth':>6} {'rule':<11} {'OOM':>9} {'victims':>8} {'lost':>5}"
            f"  {'JCT, no checkpoints':>20}  {'JCT, every 10 min':>18}  {'lost GPU-h (none) no ckpt / ckpt':>33}"
        )
        for rule in rules_of(host):
            key = model_key(host, rule)
            for r0 in (r for r in rows if r["model"] == key and r["checkpoint_every_s"] == 0.0):
                r1 = next(
                    r for r in rows
                    if r["model"] == key and r["checkpoint_every_s"] == 600.0
                    and (r["cell"], r["growth"]) == (r0["cell"], r0["growth"])
                )  # fmt: skip
                mark = "*" if rule is default else " "
                print(
                    f"{r0['cell']:<6} {r0['growth']:>6.1f} {rule.value + mark:<11} "
                    f"{r0['oom_crashes']:>4} ({r0['oom_crashes_none']:>2}) {r0['victims']:>3} ({r0['victims_none']:>2})"
                    f" {r0['lost']:>2}/{r0['lost_none']:<2}"
                    f"  {r0['jct_ratio']:>12.3f} +- {r0['jct_se']:.3f}  {r1['jct_ratio']:>10.3f} +- {r1['jct_se']:.3f}"
                    f"  {r0['lost_gpu_h']:>7.1f} ({r0['lost_gpu_h_none']:>5.1f}) / {r1['lost_gpu_h']:>5.1f} "
                    f"({r1['lost_gpu_h_none']:>5.1f})"
                )
    return verdicts(rows, hosts)


def verdicts(rows: list[dict[str, Any]], hosts: tuple[str, ...] = HOST_PROFILES) -> dict[str, dict[str, Any]]:
    """Issue 22's targets for each mechanism's default rule, and the rule the numbers favour: the
    targets met first, then the fewest victims on t1 and t2 (a promise kept comes before speed),
    then the lowest mean JCT ratio over t1, t2 and the sweep at growth 0.3."""
    out: dict[str, dict[str, Any]] = {}
    at = [r for r in rows if r["growth"] == TARGET_GROWTH]
    print(
        f"\ntargets at growth {TARGET_GROWTH} on t1 and t2 (victims 0, OOM <= none, JCT <= 1.00 ckpt / 1.03 without):"
    )
    for host in hosts:
        mode = sim_fence(SimConfig(gpus=(), host=host, isolation="auto")).model.mode
        scores: dict[CapRule, tuple[bool, bool, int, float]] = {}
        for rule in rules_of(host):
            key = model_key(host, rule)
            mine = [r for r in at if r["model"] == key]
            paper = [r for r in mine if r["cell"] in ("t1", "t2")]
            safe = all(r["victims"] == 0 and r["oom_crashes"] <= r["oom_crashes_none"] for r in paper)
            fast = all(r["jct_ratio"] <= TARGET_JCT[r["checkpoint_every_s"]] for r in paper)
            victims = sum(r["victims"] for r in paper)
            scores[rule] = (safe, fast, victims, statistics.fmean(r["jct_ratio"] for r in mine) if mine else 9.9)
        default = default_cap_rule(mode)
        best = min(scores, key=lambda r: (not (scores[r][0] and scores[r][1]), not scores[r][0], scores[r][2:]))
        safe, fast, _, mean = scores[default]
        out[host] = {
            "mechanism": mode.value,
            "default": default.value,
            "default_meets": safe and fast,
            "favoured": best.value,
            "victims": {r.value: v[2] for r, v in scores.items()},
            "mean_jct_ratio": {r.value: round(v[3], 4) for r, v in scores.items()},
        }
        print(
            f"  {host:<9} default {default.value:<10} {'meets them' if safe and fast else 'misses them':<11}"
            f" ({'safe' if safe else 'NOT safe'}, {'fast' if fast else 'NOT fast'}, mean JCT ratio {mean:.3f});"
            f" the numbers favour {best.value} (victims, mean JCT: "
            + ", ".join(f"{r.value} {v[2]}, {v[3]:.3f}" for r, v in scores.items())
            + ")"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--truth-seeds", type=int, default=20, help="seeds of the truth for t1 and t2")
    parser.add_argument("--sweep", type=int, default=12, help="synthetic traces in the sweep")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 1 sweep trace, growth 0.3 only (tests)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"--quick on each trace's first {SMOKE_TASKS} tasks (the tests' run-through)",
    )
    parser.add_argument("--policy", default="", help="placement policy (default: the default)")
    parser.add_argument("--estimator", default="", help="memory estimator (default: the default)")
    parser.add_argument(
        "--host", action="append", choices=HOST_PROFILES, help="only this host profile (repeatable; default: all)"
    )
    parser.add_argument(
        "--growth", action="append", type=float, help=f"only this memory growth (repeatable; default: {GROWTHS})"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    seeds, sweep = args.truth_seeds, args.sweep
    growths: tuple[float, ...] = tuple(args.growth) if args.growth else GROWTHS
    if args.quick or args.smoke:
        seeds, sweep, growths = 2, 1, (TARGET_GROWTH,)
    hosts: tuple[str, ...] = tuple(dict.fromkeys(args.host)) if args.host else HOST_PROFILES
    jobs = plan(seeds, sweep, growths, args.policy, args.estimator, hosts)
    if args.smoke:
        jobs = [replace(job, tasks=SMOKE_TASKS) for job in jobs]
    base = SimConfig(gpus=())
    who = f"{args.policy or base.policy}/{args.estimator or base.estimator}/{base.queue}"
    print(f"{len(jobs)} simulations on {args.jobs} worker(s)", file=sys.stderr, flush=True)
    results = measure(jobs, args.jobs)
    rows = table(results, growths)
    verdict = report(rows, seeds, sweep, who, hosts)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"policy": who, "rows": rows, "verdicts": verdict}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
