"""What one test deployment (carma_airflow/dev/devstack.py) costs: the CPU seconds of each Airflow
component up to a healthy api-server with its DAGs parsed, then its CPU per second while idle,
and how long ``stop()`` takes.  Extra settings as KEY=VALUE (``AIRFLOW__...`` or ``[carma]``
names) compare one configuration with another in the same run of the machine.

    .venv/bin/python bench/stack_cpu.py --idle 60
    .venv/bin/python bench/stack_cpu.py --idle 60 AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30

The e2e suite's shared deployment parses tests/e2e/dags and tests/e2e/checkpoint_dags (the default here).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from carma_airflow.dev.devstack import AirflowStack

ROOT = Path(__file__).resolve().parents[1]
DAG_FOLDERS = [ROOT / "tests" / "e2e" / "dags", ROOT / "tests" / "e2e" / "checkpoint_dags"]


def cpu_seconds(pid: int) -> float:
    """CPU of a process and its live descendants, with what their ended children used."""
    try:
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def per_component(stack: AirflowStack) -> dict[str, float]:
    return {name: cpu_seconds(proc.pid) for name, proc in stack.procs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds idle after the boot")
    parser.add_argument("settings", nargs="*", help="KEY=VALUE settings of the deployment")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.settings)
    work = Path(tempfile.mkdtemp(prefix="carma-stack-cpu-"))
    dags = work / "dags"
    for folder in DAG_FOLDERS:
        shutil.copytree(folder, dags, dirs_exist_ok=True)
    (work / "home").mkdir()
    stack = AirflowStack(work / "home", dags, simulated_gpus="2xA100-40GB", **extra)
    try:
        started = time.monotonic()
        before = psutil.Process().cpu_times()
        stack.migrate()
        after = psutil.Process().cpu_times()
        migrate_cpu = after.children_user + after.children_system - before.children_user - before.children_system
        stack.start()  # migrate again is a copy of the template (or a no-op): what a boot costs after the first
        stack.wait_for_dag("carma_collocate")
        ready_s = time.monotonic() - started
        at_ready = per_component(stack)
        time.sleep(args.idle)
        idle = per_component(stack)
    finally:
        stopping = time.monotonic()
        stack.stop()
        stop_s = time.monotonic() - stopping
        shutil.rmtree(work, ignore_errors=True)
    print(f"settings: {extra or 'the devstack defaults'}")
    print(f"migrate: {migrate_cpu:.1f} s of CPU (0 when the migrated template was copied)")
    print(f"ready (healthy, DAGs parsed) after {ready_s:.1f} s; CPU at ready: {sum(at_ready.values()):.1f} s")
    for name in at_ready:
        rate = (idle[name] - at_ready[name]) / args.idle * 100
        print(f"  {name:14s} boot {at_ready[name]:5.1f} s   idle {rate:4.1f} % of a core")
    total_rate = (sum(idle.values()) - sum(at_ready.values())) / args.idle * 100
    print(f"idle: {total_rate:.1f} % of a core over {args.idle:.0f} s; stop() took {stop_s:.1f} s")


if __name__ == "__main__":
    main()
