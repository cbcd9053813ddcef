"""What a scheduler heartbeat costs inside CarmaExecutor with a deep queue, store writes inline
versus on the background writer, side by side in one run.

No Airflow scheduler: one CarmaExecutor (real monitor on simulated GPUs, real placer, real
store, real fork per try) is handed ``--tasks`` GPU tasks at once (declared 2-20 GiB, like
bench/load.py), and ``sync()`` is called in a loop as the scheduler's heartbeat would, until
every try has ended.  What Airflow's task supervisor would run in the forked child is replaced,
at that boundary (``BaseExecutor.run_workload``), by a sleep of 1-4 s that leaves the try's
result.  Prints, per mode: heartbeats, median / p95 / max time of one ``sync()`` and of the
scheduling pass inside it, launches per pass, and the wall time to drain; then the ratios.

    .venv/bin/python bench/pass_cost.py                    # PostgreSQL on 127.0.0.1:5432
    .venv/bin/python bench/pass_cost.py --db sqlite --tasks 200
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "carma-pass-cost-bench-" * 3)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # not one line per placement

import noop_try
from airflow.executors.workloads import ExecuteTask
from load import drop_pg_database, make_pg_database  # bench/load.py: a fresh database on 127.0.0.1:5432

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.executor import CarmaExecutor
from carma_airflow.store.store import Store
from carma_airflow.testing import make_workload, try_runner_env


def _workloads(n: int, seed: int) -> list[ExecuteTask]:
    rng = random.Random(seed)
    return [
        make_workload(
            f"train_{i}",
            dag_id="bench_pass",
            executor_config={
                "carma": {"memory": f"{rng.choice([2, 4, 6, 8, 12, 16, 20])}GiB"},
                "bench_seconds": rng.uniform(1.0, 4.0),
            },
        )
        for i in range(n)
    ]


def run_mode(background: bool, args: argparse.Namespace) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="carma-pass-"))
    db_name, url = (None, f"sqlite:///{home / 'carma.db'}") if args.db == "sqlite" else make_pg_database()
    try:
        values = {
            "gpu_backend": "simulated",
            "simulated_gpus": args.gpus,
            "sample_period": "0.5",
            "store_url": url,
            "max_tenants": "4",
        }
        settings = CarmaSettings.load(values.get, str(home))
        ex = CarmaExecutor(parallelism=args.tasks + 10)
        ex.background_writes = background
        ex.configure(settings)
        for w in _workloads(args.tasks, args.seed):
            ex.queue_workload(w, session=None)  # type: ignore[arg-type]
        ex.trigger_tasks(ex.parallelism)
        sync_ms: list[float] = []
        launches: list[int] = []
        started = time.perf_counter()
        while ex.waiting or ex.active:
            waiting_before = len(ex.waiting)
            t0 = time.perf_counter()
            ex.sync()
            sync_ms.append((time.perf_counter() - t0) * 1000)
            # tries that ended this heartbeat left `active`; those placed left `waiting`
            launches.append(waiting_before - len(ex.waiting))
            time.sleep(args.heartbeat)
        wall = time.perf_counter() - started
        pass_ms = list(ex.flow.live.pass_ms)
        ex.end()
        store = Store(url)
        recorded = sum(1 for p in store.placements(limit=args.tasks + 10) if p.outcome.value == "success")
        store.close()
        return {
            "heartbeats": len(sync_ms),
            "sync_p50": statistics.median(sync_ms),
            "sync_p95": statistics.quantiles(sync_ms, n=20)[-1],
            "sync_max": max(sync_ms),
            "pass_p50": statistics.median(pass_ms) if pass_ms else 0.0,
            "pass_max": max(pass_ms) if pass_ms else 0.0,
            "launch_max": max(launches),
            "wall_s": wall,
            "recorded": recorded,
        }
    finally:
        if db_name is not None:
            drop_pg_database(db_name)
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--gpus", default="8xA100-40GB")
    ap.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    ap.add_argument("--heartbeat", type=float, default=0.2, help="seconds between sync() calls")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    os.environ.update(try_runner_env(noop_try.train_briefly))  # the launcher runs it instead of Airflow's supervisor

    print(f"{platform.node()}: {os.cpu_count()} CPUs, {args.tasks} tasks, {args.gpus}, store {args.db}")
    rows = {"inline": run_mode(False, args), "background": run_mode(True, args)}
    keys = ["heartbeats", "sync_p50", "sync_p95", "sync_max", "pass_p50", "pass_max", "launch_max", "wall_s"]
    keys.append("recorded")
    print(f"{'mode':<11}" + "".join(f"{k:>12}" for k in keys))
    for mode, row in rows.items():
        print(f"{mode:<11}" + "".join(f"{row[k]:>12.1f}" for k in keys))
    a, b = rows["inline"], rows["background"]
    print(
        "background / inline: "
        f"sync p50 {b['sync_p50'] / a['sync_p50']:.2f}x, sync p95 {b['sync_p95'] / a['sync_p95']:.2f}x, "
        f"sync max {b['sync_max'] / a['sync_max']:.2f}x, wall {b['wall_s'] / a['wall_s']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
