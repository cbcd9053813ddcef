"""What starting one try costs, by design, side by side in one run (issue 12, "choose by measurement").

- launcher: CarmaExecutor's design. The scheduler sends the try to its launcher (a single-threaded
  process with Airflow's supervisor imported) and waits for the fork's pid; the child is ready at
  once.  Figures: the scheduler's wait (inside its heartbeat) and send -> the try's process ended.
- fork+exec per try: a fresh interpreter per try must import Airflow's supervisor before it can
  run the workload; the scheduler's cost is the Popen, the try is ready when the import is done.
- fork from the scheduler (the old design): multiprocessing fork of this process, which by now
  has Airflow imported and runs a thread, as the scheduler does; child ends at once.

    .venv/bin/python bench/launch.py [--tries 100]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "bench-secret-" + "x" * 64)

import noop_try

from carma_airflow.testing import make_workload, try_runner_env


def launcher_design(tries: int, tmp: Path) -> tuple[list[float], list[float]]:
    from carma_airflow.launching import LauncherProcess

    os.environ.update(try_runner_env(noop_try.run))
    launcher = LauncherProcess()
    waits, ends = [], []
    try:
        for i in range(tries):
            workload = make_workload(f"t{i}", dag_id="bench", run_id="r", dag_rel_path="d.py", bundle="d")
            started = time.perf_counter()
            handle = launcher.launch(workload, {}, tmp / f"{i}.json", "here")
            waits.append(time.perf_counter() - started)
            while handle.poll() is None:
                time.sleep(0.0005)
            ends.append(time.perf_counter() - started)
    finally:
        launcher.close()
    return waits, ends


def exec_design(tries: int) -> tuple[list[float], list[float]]:
    code = "import airflow.executors.base_executor, airflow.executors.workloads, airflow.sdk.execution_time.supervisor"
    waits, ends = [], []
    for _ in range(tries):
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code])
        waits.append(time.perf_counter() - started)
        proc.wait()
        ends.append(time.perf_counter() - started)
    return waits, ends


def _child() -> None:
    os._exit(0)


def fork_design(tries: int) -> tuple[list[float], list[float]]:
    import airflow.sdk.execution_time.supervisor  # noqa: F401  - the scheduler has Airflow loaded

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, daemon=True)  # the scheduler runs threads
    busy.start()
    ctx = multiprocessing.get_context("fork")
    waits, ends = [], []
    for _ in range(tries):
        started = time.perf_counter()
        proc = ctx.Process(target=_child)
        proc.start()
        waits.append(time.perf_counter() - started)
        proc.join()
        ends.append(time.perf_counter() - started)
    stop.set()
    return waits, ends


def _ms(values: list[float], q: float) -> float:
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=100)
    ap.add_argument("--exec-tries", type=int, default=10, help="fork+exec is slow: fewer samples")
    args = ap.parse_args()
    with TemporaryDirectory() as tmp:
        rows = {
            "launcher (ours)": launcher_design(args.tries, Path(tmp)),
            "fork+exec per try": exec_design(args.exec_tries),
            "fork from scheduler (old)": fork_design(args.tries),
        }
    print(f"{os.cpu_count()} CPUs; {args.tries} tries ({args.exec_tries} for fork+exec)")
    print(f"{'design':<28}{'heartbeat p50':>15}{'heartbeat p90':>15}{'ready p50':>12}{'ready p90':>12}  (ms)")
    for name, (waits, ends) in rows.items():
        print(
            f"{name:<28}{_ms(waits, 0.5):>15.2f}{_ms(waits, 0.9):>15.2f}{_ms(ends, 0.5):>12.1f}{_ms(ends, 0.9):>12.1f}"
        )
    ours, execd = rows["launcher (ours)"][1], rows["fork+exec per try"][1]
    print(f"ready p50, fork+exec / launcher: {statistics.median(execd) / statistics.median(ours):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
