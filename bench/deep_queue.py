"""Deep queues in the simulator (issue 13, item 5): wall time and identical results.

A seeded Poisson trace from the paper's task catalogue (``sim.workload.synthetic_trace``), one
arrival every 2 s on average, on 256 x A100-40GB, run through ``carma_airflow.sim.simulate``
with the default policy, estimator and queue.  Arrivals outpace the cluster about fourfold, so
thousands of tries wait at once: every pass decides over a deep queue.

Prints the wall time, the result summary (makespan, mean JCT, OOMs, lost, passes) and a digest
(SHA-256) of every try's placement (job, GPUs, start, end, outcome) and every task's record, so
two versions of the code can be checked to decide exactly the same.

Usage::

    .venv/bin/python bench/deep_queue.py                       # 10,000 tasks (minutes)
    .venv/bin/python bench/deep_queue.py --tasks 2000          # a quick run
    .venv/bin/python bench/deep_queue.py --save REF.json       # keep this run's figures and digest
    .venv/bin/python bench/deep_queue.py --compare REF.json    # side by side with a saved run
    .venv/bin/python bench/deep_queue.py --min-gain 0.3        # completion-time's opt-in floor

``--compare`` prints the saved run's figures beside this run's (the ratio of wall times) and
whether the digests are equal; it exits 1 when they differ (or the trace does not match), else 0.
Wall and CPU time (this process's, ``time.process_time``: what a shared machine's other load
does not inflate as much) are the only figures that vary from run to run; the others are
deterministic.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import Arrival, SimConfig, SimResult, Simulation, load_catalog, packaged, synthetic_trace

GPUS = 256
GPU_MODEL = "A100-40GB"
MEAN_INTERARRIVAL_S = 2.0
SEED = 0


def deep_trace(tasks: int, seed: int = SEED) -> list[Arrival]:
    """``tasks`` arrivals, one every ``MEAN_INTERARRIVAL_S`` on average (Poisson), catalogue tasks."""
    catalog = load_catalog(packaged("task_catalog.csv"))
    types = list(catalog.values())
    mean_work = sum(t.solo_s * t.gpus for t in types) / len(types)
    # synthetic_trace's rate is load * gpus / mean_work: pick the load that gives 1 / 2 s
    load = mean_work / (MEAN_INTERARRIVAL_S * GPUS)
    return synthetic_trace(catalog, tasks, gpus=GPUS, load=load, seed=seed)


def digest(result: SimResult) -> str:
    """SHA-256 over every try's placement, every task's record and every GPU's integrals (floats by
    ``repr``: exact)."""
    h = hashlib.sha256()
    for e in result.timeline:
        h.update(repr((e.job_id, e.task, e.gpus, e.start, e.end, e.outcome)).encode())
    h.update(b"|")
    for t in result.tasks:
        h.update(
            repr((t.job_id, t.first_start_s, t.end_s, t.wait_s, t.run_s, t.tries, t.oom_crashes, t.outcome)).encode()
        )
    h.update(b"|")
    for nf in result.never_fits:
        h.update(repr((nf.job_id, nf.task, nf.reason)).encode())
    h.update(b"|")
    for i in result.integrals:  # energy, utilisation and memory integrals per GPU
        h.update(repr(i).encode())
    return h.hexdigest()


# The scenario the references were made in: GPUMemNet's estimates, unfenced (SimConfig's defaults
# before issue 41 made them the executor's: history+floor, fenced).  Decision: this bench measures
# the placement engine on one fixed workload, so its workload stays put when a default moves;
# ``--executor-defaults`` runs the simulator's defaults instead (measured 2026-12-06, 3,000 tasks:
# about 2x the CPU, first tries at the 5 GiB floor make every GPU a collocation candidate).
SCENARIO = {"estimator": "gpumemnet", "isolation": "none"}


def run(tasks: int, min_gain: float | None = None, executor_defaults: bool = False) -> dict[str, Any]:
    """One run; ``min_gain``: completion-time's opt-in floor (``CompletionSettings.min_gain``);
    ``executor_defaults``: the simulator's (the executor's) estimator and fence, not :data:`SCENARIO`."""
    arrivals = deep_trace(tasks)
    config = SimConfig(gpus=tuple(parse_gpu_list(f"{GPUS}x{GPU_MODEL}")), min_gain=min_gain)
    if not executor_defaults:
        config = replace(config, **SCENARIO)
    sim = Simulation(config)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    result = sim.run(arrivals)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    done = [t for t in result.tasks if t.outcome == "success"]
    jct = statistics.fmean(t.end_s - t.submit_s for t in done if t.end_s is not None) if done else 0.0
    return {
        "tasks": tasks,
        "gpus": f"{GPUS}x{GPU_MODEL}",
        "mean_interarrival_s": MEAN_INTERARRIVAL_S,
        "seed": SEED,
        "min_gain": min_gain,
        "scenario": "executor defaults" if executor_defaults else SCENARIO,
        "trace_last_submit_s": arrivals[-1].submit_s if arrivals else 0.0,
        "python": platform.python_version(),
        "wall_s": wall,
        "cpu_s": cpu,
        "makespan_s": result.makespan_s,
        "mean_jct_s": jct,
        "completed": len(done),
        "oom_crashes": result.oom_crashes,
        "retries": result.retries,
        "lost": len(result.tasks) - len(done),
        "passes": result.passes,
        "placements": len(result.timeline),
        "digest": digest(result),
    }


_ROWS = (
    ("wall time (s)", "wall_s", "{:.2f}"),
    ("CPU time (s)", "cpu_s", "{:.2f}"),
    ("makespan (s)", "makespan_s", "{:.1f}"),
    ("mean JCT (s)", "mean_jct_s", "{:.1f}"),
    ("tasks completed", "completed", "{}"),
    ("CUDA OOMs", "oom_crashes", "{}"),
    ("tasks lost", "lost", "{}"),
    ("scheduling passes", "passes", "{}"),
    ("placements (tries started)", "placements", "{}"),
)


_TIMES = ("wall_s", "cpu_s")  # the figures that vary from run to run


def _floor(fig: dict[str, Any]) -> str:
    return "" if fig.get("min_gain") is None else f", min_gain {fig['min_gain']:g}"


def print_one(fig: dict[str, Any]) -> None:
    print(f"deep queue: {fig['tasks']} tasks, one per {fig['mean_interarrival_s']:g} s, {fig['gpus']}{_floor(fig)}")
    for label, key, fmt in _ROWS:
        print(f"  {label:<28} {fmt.format(fig[key]):>14}")
    print(f"  digest {fig['digest']}")


def print_compare(ref: dict[str, Any], fig: dict[str, Any]) -> bool:
    """Both runs side by side; True when they decided the same."""
    same_trace = all(ref.get(k) == fig[k] for k in ("tasks", "gpus", "mean_interarrival_s", "seed", "min_gain"))
    same = same_trace and ref.get("digest") == fig["digest"]
    print(f"deep queue: {fig['tasks']} tasks, one per {fig['mean_interarrival_s']:g} s, {fig['gpus']}{_floor(fig)}")
    print(f"  {'figure':<28} {'reference':>14} {'this run':>14} {'ratio':>8}")
    for label, key, fmt in _ROWS:
        a, b = ref.get(key), fig[key]
        ratio = f"{b / a:.3f}" if key in _TIMES and a else ("same" if a == b else "DIFFERS")
        left = "-" if a is None else fmt.format(a)
        print(f"  {label:<28} {left:>14} {fmt.format(b):>14} {ratio:>8}")
    print(f"  reference digest {ref.get('digest')}")
    print(f"  this run digest  {fig['digest']}")
    if not same_trace:
        print("  the reference ran another trace (tasks, GPUs, rate or seed differ)")
    print(f"identical results: {'yes' if same else 'NO'}")
    return same


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=10_000, help="arrivals in the trace (default 10,000)")
    parser.add_argument("--save", type=Path, help="write this run's figures and digest to a JSON file")
    parser.add_argument("--compare", type=Path, help="a saved run to print beside this one and check against")
    parser.add_argument(
        "--min-gain", type=float, default=None, help="completion-time's opt-in floor, CompletionSettings.min_gain"
    )
    parser.add_argument(
        "--executor-defaults",
        action="store_true",
        help="the simulator's (the executor's) estimator and fence, not the references' scenario",
    )
    args = parser.parse_args(argv)
    if args.tasks < 1:
        print("--tasks must be at least 1", file=sys.stderr)
        return 2
    ref = None
    if args.compare is not None:
        try:
            ref = json.loads(args.compare.read_text())
        except (OSError, ValueError) as exc:
            print(f"cannot read {args.compare}: {exc}", file=sys.stderr)
            return 2
    fig = run(args.tasks, args.min_gain, args.executor_defaults)
    if args.save is not None:
        args.save.write_text(json.dumps(fig, indent=1) + "\n")
    if ref is None:
        print_one(fig)
        return 0
    return 0 if print_compare(ref, fig) else 1


if __name__ == "__main__":
    sys.exit(main())
