"""Dispatch latency and total time: N short tasks through CarmaExecutor vs LocalExecutor, one run.

Starts one real Airflow (api-server, scheduler, dag-processor; SQLite; both executors configured,
simulated 8xA100-40GB GPUs with up to 8 tasks per GPU so GPUs never limit), runs the same mapped
DAG through each executor in turn, and prints per-task dispatch latency (queued -> started) and
the total wall time of each DAG run, with the ratios.  Also prints the simulated monitor's CPU
cost per sample.

    .venv/bin/python bench/dispatch.py [--tasks 200]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from carma_airflow.dev.devstack import AirflowStack

ROOT = Path(__file__).resolve().parents[1]


def _dt(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def run_one(stack: AirflowStack, dag_id: str) -> dict[str, float]:
    started = time.time()
    run = stack.trigger(dag_id)
    state = stack.wait_run(dag_id, run, timeout=1800)
    wall = time.time() - started
    rows = stack.query(
        "select queued_dttm, start_date, end_date from task_instance where dag_id = :d and run_id = :r",
        d=dag_id,
        r=run,
    )
    lat = sorted((_dt(s) - _dt(q)).total_seconds() for q, s, _ in rows if q is not None and s is not None)
    span = (max(_dt(e) for *_, e in rows if e) - min(_dt(q) for q, *_ in rows if q)).total_seconds()
    return {
        "state": 1.0 if state == "success" else 0.0,
        "tasks": float(len(rows)),
        "wall_s": wall,
        "span_s": span,
        "lat_median_s": statistics.median(lat),
        "lat_p90_s": lat[int(0.90 * (len(lat) - 1))],
        "lat_p95_s": lat[int(0.95 * (len(lat) - 1))],
    }


def monitor_cost() -> float:
    from carma_airflow.core.gpu import parse_gpu_list
    from carma_airflow.monitor.ledger import Ledger
    from carma_airflow.monitor.sampler import Monitor
    from carma_airflow.monitor.simulated import SimulatedProbe

    with tempfile.TemporaryDirectory() as tmp:
        gpus = parse_gpu_list("8xA100-40GB")
        ledger = Ledger(Path(tmp) / "ledger.json")
        ledger.init(gpus)
        monitor = Monitor(SimulatedProbe(ledger, gpus))
        for _ in range(200):
            monitor.sample_once()
        return monitor.cpu_seconds_per_sample()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument(
        "--lock-seconds", default="1", help="[carma] lock_seconds: how long an unseen tenant counts at the prior"
    )
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="carma-dispatch-"))
    dags = home / "bench-dags"
    dags.mkdir()
    shutil.copy(ROOT / "bench" / "dags" / "dispatch_bench.py", dags / "dispatch_bench.py")
    stack = AirflowStack(
        home,
        dags,
        simulated_gpus="8xA100-40GB",
        max_tenants="8",
        AIRFLOW__CORE__PARALLELISM="64",
        AIRFLOW__CARMA__LOCK_SECONDS=args.lock_seconds,
    )
    stack.env["CARMA_BENCH_TASKS"] = str(args.tasks)
    stack.start()
    try:
        local = run_one(stack, "dispatch_local")
        carma = run_one(stack, "dispatch_carma")
    finally:
        stack.stop()
    print(f"{args.tasks} short tasks, one Airflow (SQLite), 2-core machine")
    print(f"{'figure':32} {'LocalExecutor':>14} {'CarmaExecutor':>14} {'ratio':>7}")
    for key, label in (
        ("lat_median_s", "dispatch latency median (s)"),
        ("lat_p90_s", "dispatch latency p90 (s)"),
        ("lat_p95_s", "dispatch latency p95 (s)"),
        ("span_s", "first queued -> last end (s)"),
        ("wall_s", "trigger -> run done (s)"),
    ):
        ratio = carma[key] / local[key] if local[key] else float("nan")
        print(f"{label:32} {local[key]:14.2f} {carma[key]:14.2f} {ratio:7.2f}")
    ok = local["state"] == carma["state"] == 1.0
    print(f"both runs succeeded: {ok}; tasks {int(local['tasks'])} / {int(carma['tasks'])}")
    print(f"simulated monitor, 8 GPUs: {monitor_cost() * 1e6:.0f} us CPU per sample")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
