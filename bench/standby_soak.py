"""Standby soak: a real scheduler whose CarmaExecutor cannot start (no NVML driver) for minutes.

A throwaway Airflow (carma_airflow/dev/devstack.py) with ``[carma] gpu_backend = nvml`` on a machine
without an NVIDIA driver: every start of the executor fails, and it is tried again (5 s, doubling
to 60 s; executor/airflow/standby.py).  Only the scheduler runs (no api-server or dag-processor).  After
the first retry and at the end the script reads, from /proc, the scheduler process's threads, its
open file descriptors and its child processes (all descendants), and prints both; a start that
leaks leaves more at the end (the issue's target: the same figures at both points).

    nice -n 10 .venv/bin/python bench/standby_soak.py --minutes 10
    .venv/bin/python bench/standby_soak.py --minutes 1      # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from carma_airflow.dev.devstack import AirflowStack  # noqa: E402

FAILED_START = "CarmaExecutor could not start"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), from /proc."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent_of[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        kids = [p for p, parent in parent_of.items() if parent == here]
        found += kids
        frontier += kids
    return sorted(found)


def figures(pid: int) -> dict[str, object]:
    kids = descendants(pid)
    names = []
    for kid in kids:
        try:
            names.append(Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:60].strip())
        except OSError:
            names.append("?")
    return {
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "children": len(kids),
        "child_commands": dict(Counter(names)),
    }


def failed_starts(stack: AirflowStack) -> int:
    return stack.tail("scheduler", 10_000_000).count(FAILED_START)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the executor stays on standby")
    parser.add_argument("--home", type=Path, default=None, help="AIRFLOW_HOME (default: a temporary folder)")
    args = parser.parse_args()
    if Path("/proc/driver/nvidia").exists():
        print("this machine has an NVIDIA driver: the executor would start; run it where there is none")
        return 2
    home = args.home or Path(tempfile.mkdtemp(prefix="carma-standby-soak-"))
    home.mkdir(parents=True, exist_ok=True)
    stack = AirflowStack(home, ROOT / "bench" / "dags", gpu_backend="nvml")
    try:
        stack.migrate()
        stack.start_component("scheduler")
        pid = stack.procs["scheduler"].pid
        deadline = time.time() + 300
        while failed_starts(stack) < 2:  # the first start at the scheduler's start, then its first retry
            if time.time() > deadline or stack.procs["scheduler"].poll() is not None:
                print("the scheduler did not retry the executor's start:\n" + stack.tail("scheduler"))
                return 1
            time.sleep(0.5)
        time.sleep(1.0)  # the retry's own clean-up is done
        first, began = figures(pid), time.time()
        print(f"after the first retry (start #2): {first}", flush=True)
        end = began + args.minutes * 60
        while time.time() < end:
            if stack.procs["scheduler"].poll() is not None:
                print("the scheduler exited:\n" + stack.tail("scheduler"))
                return 1
            time.sleep(5)
        last = figures(pid)
        starts = failed_starts(stack)
        print(f"after {args.minutes:g} min (start #{starts}, {starts - 2} retries since): {last}", flush=True)
        same = all(first[k] == last[k] for k in ("threads", "fds", "children"))
        print(
            f"threads {first['threads']} -> {last['threads']}, fds {first['fds']} -> {last['fds']}, "
            f"children {first['children']} -> {last['children']}: {'the same' if same else 'CHANGED'}"
        )
        reason = next((line for line in stack.tail("scheduler", 200_000).splitlines() if FAILED_START in line), "")
        print(f"why it could not start: {reason.split(FAILED_START, 1)[-1][:200]}")
        return 0 if same else 1
    finally:
        stack.stop()


if __name__ == "__main__":
    raise SystemExit(main())
