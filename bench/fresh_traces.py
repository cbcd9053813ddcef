"""Fresh held-out traces: work nobody tuned on, drawn from seeds no tuning run uses.

``bench/robustness.py`` tunes on t1, t2 and the synthetic traces of seeds 0-11; ``bench/heldout.py``
holds out seeds 100-107 of the same generator (Poisson arrivals, every catalogue type equally likely,
the catalogue's run times).  A rule can still fit that generator's shape.  This module draws traces
of other shapes, each from its own seed in :data:`FRESH_SEEDS` (10,000 and up: no bench, test or
tuning run uses them; a session that tunes on a draw must move the range and say so):

* **arrivals**: Poisson, bursty (a two-state Markov-modulated Poisson process: bursts at 4x the
  rate a quarter of the time) or a day's ramp (the rate rising and falling once over the trace);
* **task mix**: a Zipf-like popularity over a random subset of the catalogue's types (a few types
  recur, most run once or twice, as in a shared cluster's day), each draw its own subset;
* **durations**: each type's catalogue run time times a log-normal factor per type (sigma 0.6,
  median 1), so the long tail of a Philly-like trace is there and run times are not the
  catalogue's;
* **clusters and loads**: the cluster (:data:`CLUSTERS`) and the offered load (1.0x-3.5x of
  exclusive capacity) drawn per trace.

What the simulator learns from each trace is the trace's own; nothing of the truth is drawn here
(the interference truth is the bench's cell).  Used by ``bench/learning.py``.

    .venv/bin/python bench/fresh_traces.py [--count 8] [--first 10000]   # prints what each draw is
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import Arrival, load_catalog, packaged
from carma_airflow.sim.workload import TaskType

FIRST_FRESH_SEED = 10_000
FRESH_SEEDS = range(FIRST_FRESH_SEED, FIRST_FRESH_SEED + 1_000)
CLUSTERS = ("4xA100-40GB", "8xV100-32GB", "2xA100-80GB,2xV100-32GB", "4xL4", "8xA100-40GB", "4xH100-80GB")
ARRIVALS = ("poisson", "bursty", "ramp")


@dataclass(frozen=True)
class FreshTrace:
    """One draw: its seed, cluster, load, arrival process, and the arrivals."""

    seed: int
    gpus: str
    load: float
    process: str
    types: int  # distinct task types in it
    arrivals: tuple[Arrival, ...]

    def describe(self) -> str:
        n = len(self.arrivals)
        span = self.arrivals[-1].submit_s / 3600 if self.arrivals else 0.0
        return (
            f"seed {self.seed}: {n} tasks of {self.types} types over {span:.1f} h, {self.process},"
            f" load {self.load:.1f}x on {self.gpus}"
        )


def _gpu_count(gpus: str) -> int:
    return len(parse_gpu_list(gpus))


def _fits(task: TaskType, gpus: str) -> bool:
    """Whether the cluster can run the type at all (its GPUs per try, its peak on the largest GPU)."""
    largest = max(g.memory_mib for g in parse_gpu_list(gpus))
    return task.gpus <= _gpu_count(gpus) and task.peak_mib + 1_024 <= largest


def fresh_trace(seed: int, catalog: dict[str, TaskType], tasks: int | None = None) -> FreshTrace:
    """The draw of ``seed`` (one of :data:`FRESH_SEEDS`; another seed is refused so that a tuning
    run cannot quietly reuse the held-out range)."""
    if seed not in FRESH_SEEDS:
        raise ValueError(f"fresh traces come from seeds {FRESH_SEEDS.start}-{FRESH_SEEDS.stop - 1}, got {seed}")
    rng = random.Random(seed)
    gpus = rng.choice(CLUSTERS)
    count = _gpu_count(gpus)
    load = round(rng.uniform(1.0, 3.5), 2)
    process = rng.choice(ARRIVALS)
    n = tasks if tasks is not None else count * rng.randint(10, 20)
    pool = sorted((t for t in catalog.values() if _fits(t, gpus)), key=lambda t: t.name)
    subset = rng.sample(pool, k=max(4, min(len(pool), rng.randint(len(pool) // 3, len(pool)))))
    weights = [1.0 / (rank + 1) ** 1.1 for rank in range(len(subset))]
    factors = {t.name: math.exp(rng.gauss(0.0, 0.6)) for t in subset}
    drawn = [replace(t, solo_s=max(60.0, t.solo_s * factors[t.name])) for t in subset]
    mean_work = sum(w * t.solo_s * t.gpus for w, t in zip(weights, drawn, strict=True)) / sum(weights)
    rate = load * count / mean_work
    out: list[Arrival] = []
    now, burst = 0.0, False
    for job in range(n):
        task = rng.choices(drawn, weights)[0]
        out.append(Arrival(job, round(now, 3), task))
        r = rate
        if process == "bursty":
            if rng.random() < 0.1:
                burst = not burst
            r = rate * (4.0 if burst else 0.5)
        elif process == "ramp":
            r = rate * (0.4 + 1.2 * math.sin(math.pi * (job + 0.5) / n))
        now += rng.expovariate(r)
    return FreshTrace(seed, gpus, load, process, len({a.task.name for a in out}), tuple(out))


def fresh_traces(count: int, first: int = FIRST_FRESH_SEED, tasks: int | None = None) -> list[FreshTrace]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    return [fresh_trace(seed, catalog, tasks) for seed in range(first, first + count)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--first", type=int, default=FIRST_FRESH_SEED)
    args = ap.parse_args(argv)
    for trace in fresh_traces(args.count, args.first):
        print(trace.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
