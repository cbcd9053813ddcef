"""Load: N queued GPU tasks on 8 simulated GPUs through the real Airflow scheduler.

Starts one real Airflow 3 (api-server, scheduler, dag-processor) with CarmaExecutor on simulated
8xA100-40GB GPUs, with every Airflow limit that would otherwise hold tasks back in the scheduler
(parallelism, per-DAG active tasks, the default pool, mapping length, TIs per scheduler loop)
raised above N, so the executor itself holds the queue.  Triggers one run of
bench/dags/load_bench.py (N mapped tasks, declared 2-20 GiB, 1-4 s of simulated training each)
and, every ``--every`` seconds while it runs, samples the scheduler's RSS (the executor lives in
that process), the executor's live snapshot (waiting, running, scheduling-pass times) and the
task instance states.  At the end it prints a table and writes the series as JSON (and a PNG)
under ``--out``.

    .venv/bin/python bench/load.py --tasks 2000            # PostgreSQL on 127.0.0.1:5432
    .venv/bin/python bench/load.py --tasks 12 --db sqlite  # quick check, no server needed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from carma_airflow.dev.devstack import AirflowStack

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = ROOT / "bench" / "dags" / "load_bench.py"
DAG_ID = "carma_load"
PG_ADMIN = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
DEFAULT_STARVATION_S = 3600.0
STOP_GRACE_S = 1.0  # each round of SIGTERM at the end (stop_stack)


@dataclass
class Sample:
    t: float  # seconds since the trigger
    rss_mib: float | None
    fds: int | None  # open descriptors of the scheduler process
    states: dict[str, int]
    waiting: int | None = None
    running: int | None = None
    pass_count: int | None = None
    pass_last_ms: float | None = None
    pass_median_ms: float | None = None
    pass_max_ms: float | None = None
    snapshot_age_s: float | None = None
    load1: float = 0.0


@dataclass
class Result:
    tasks: int
    db: str
    run_state: str | None = None
    wall_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    waits_by_task: dict[str, float] = field(default_factory=dict)


# -- helpers --------------------------------------------------------------------------------
def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _dt(value: object) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _slope_per_1000(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x, times 1000 (MiB per 1000 tasks); None without spread."""
    if len(points) < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (task processes forked by the executor, their children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_stack(stack: AirflowStack) -> None:
    """``stack.stop()``, then SIGKILL any task process of the executor that outlived it.

    Task processes are forked from the scheduler and retitled, which overwrites the environment
    that ``stop()`` looks for, so they are found here as the scheduler's descendants first.
    The run has ended (or timed out) and its numbers are taken: no orderly hand-back is needed,
    so each round of SIGTERM gets ``STOP_GRACE_S`` (with ``stop()``'s 30 s a scheduler that did
    not exit on SIGTERM held a 12-task run 32 s more, twice its own 14 s; tests/test_load_smoke.py).
    """
    proc = stack.procs.get("scheduler")
    left = descendants(proc.pid) if proc is not None else []
    stack.stop(grace_s=STOP_GRACE_S)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def inherited_locks(stack: AirflowStack, run_id: str) -> int:
    """Tasks that found the ledger's lock inherited from the scheduler (see bench/dags/load_bench.py)."""
    rows = stack.query(
        "select value from xcom where dag_id = :d and run_id = :r and key = 'return_value'", d=DAG_ID, r=run_id
    )
    count = 0
    for (value,) in rows:
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                continue
        if isinstance(value, dict) and value.get("inherited_lock"):
            count += 1
    return count


def _as_admin(sql: str) -> None:
    """Run one statement on the maintenance database, outside a transaction (CREATE/DROP DATABASE)."""
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        admin.dispose()


def make_pg_database() -> tuple[str, str]:
    name = f"carma_load_{uuid.uuid4().hex[:10]}"
    _as_admin(f'CREATE DATABASE "{name}"')
    return name, PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def drop_pg_database(name: str) -> None:
    _as_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def build_stack(home: Path, n: int, db_url: str | None, starvation_s: float | None) -> AirflowStack:
    dags = home / "dags-src"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    cap = str(n + 64)
    options: dict[str, str] = {
        "simulated_gpus": "8xA100-40GB",
        "AIRFLOW__CORE__PARALLELISM": cap,
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": cap,
        "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": cap,
        "AIRFLOW__CORE__MAX_MAP_LENGTH": cap,
        "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "512",
    }
    if starvation_s is not None:
        options["starvation_seconds"] = str(starvation_s)
    if db_url is not None:
        options["store_url"] = db_url
    stack = AirflowStack(home, dags, db_url, None, **options)
    stack.env["CARMA_LOAD_TASKS"] = str(n)
    return stack


def executor_snapshot(stack: AirflowStack) -> tuple[float, dict[str, Any]] | None:
    """The newest ``executor:*`` snapshot, as (written at, body), read straight from the store table."""
    from carma_airflow.store.store import Store

    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    try:
        snaps = store.snapshots("executor:")
    finally:
        store.close()
    if not snaps:
        return None
    at, body = max(snaps.values(), key=lambda s: s[0])
    return at.timestamp(), body


def sample(stack: AirflowStack, run_id: str, t0: float) -> Sample:
    rows = stack.query(
        "select coalesce(state, 'none'), count(*) from task_instance where dag_id = :d and run_id = :r group by 1",
        d=DAG_ID,
        r=run_id,
    )
    s = Sample(
        t=round(time.time() - t0, 1),
        rss_mib=rss_mib(stack.procs["scheduler"].pid),
        fds=open_fds(stack.procs["scheduler"].pid),
        states={str(state): int(count) for state, count in rows},
        load1=os.getloadavg()[0],
    )
    try:
        snap = executor_snapshot(stack)
    except Exception as exc:  # a busy store must not end the benchmark; the sample is just thinner
        print(f"  (snapshot unreadable: {exc})", file=sys.stderr)
        snap = None
    if snap is not None:
        at, body = snap
        passes = body.get("passes") or {}
        s.waiting = len(body.get("waiting") or [])
        s.running = body.get("running")
        s.pass_count = passes.get("count")
        s.pass_last_ms = passes.get("last_ms")
        s.pass_median_ms = passes.get("median_ms")
        s.pass_max_ms = passes.get("max_ms")
        s.snapshot_age_s = round(time.time() - at, 1)
    return s


def placements_summary(stack: AirflowStack, n: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Waits (started_at - decided_at) over every try, outcomes and OOMs, from the store."""
    from carma_airflow.store.store import Store

    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    try:
        records = [p for p in store.placements(dag_id=DAG_ID, limit=max(4 * n, 100))]
        ooms = store.ooms(dag_id=DAG_ID, limit=max(4 * n, 100))
    finally:
        store.close()
    waits: list[float] = []
    by_task: dict[str, float] = {}
    outcomes: dict[str, int] = {}
    for p in records:
        outcome = str(getattr(p.outcome, "value", p.outcome))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if p.started_at is not None and p.decided_at is not None:
            w = (p.started_at - p.decided_at).total_seconds()
            waits.append(w)
            by_task[p.task_id] = max(by_task.get(p.task_id, 0.0), w)
    waits.sort()
    return (
        {
            "tries": len(records),
            "outcomes": outcomes,
            "ooms": len(ooms),
            "wait_max_s": waits[-1] if waits else None,
            "wait_median_s": statistics.median(waits) if waits else None,
            "wait_p95_s": waits[int(0.95 * (len(waits) - 1))] if waits else None,
        },
        by_task,
    )


def summarise(result: Result, stack: AirflowStack, run_id: str, starvation_s: float) -> None:
    n = result.tasks
    rows = stack.query(
        "select coalesce(state, 'none'), count(*) from task_instance where dag_id = :d and run_id = :r group by 1",
        d=DAG_ID,
        r=run_id,
    )
    states = {str(state): int(count) for state, count in rows}
    spans = stack.query(
        "select min(queued_dttm), max(end_date) from task_instance where dag_id = :d and run_id = :r",
        d=DAG_ID,
        r=run_id,
    )
    first_queued, last_end = spans[0] if spans else (None, None)
    placed, by_task = placements_summary(stack, n)
    samples = result.samples
    rss = [s.rss_mib for s in samples if s.rss_mib is not None]
    half = result.wall_s / 2
    second = [(float(s.states.get("success", 0)), s.rss_mib) for s in samples if s.t >= half and s.rss_mib is not None]
    medians = [s.pass_median_ms for s in samples if s.pass_median_ms is not None]
    maxes = [s.pass_max_ms for s in samples if s.pass_max_ms is not None]
    loaded = [s for s in samples if s.waiting is not None and s.waiting >= n / 2 and s.pass_median_ms is not None]
    waiting = [s.waiting for s in samples if s.waiting is not None]
    result.summary = {
        "done": states.get("success", 0),
        "failed": states.get("failed", 0) + states.get("upstream_failed", 0),
        "other": sum(v for k, v in states.items() if k not in ("success", "failed", "upstream_failed")),
        "states": states,
        "span_s": (_dt(last_end) - _dt(first_queued)).total_seconds() if first_queued and last_end else None,
        "rss_start_mib": rss[0] if rss else None,
        "rss_peak_mib": max(rss) if rss else None,
        "rss_end_mib": rss[-1] if rss else None,
        "rss_slope_second_half_mib_per_1000": _slope_per_1000([(x, y) for x, y in second if y is not None]),
        "pass_median_ms": statistics.median(medians) if medians else None,
        "pass_max_ms": max(maxes) if maxes else None,
        "pass_median_ms_loaded": statistics.median(s.pass_median_ms or 0.0 for s in loaded) if loaded else None,
        "pass_max_ms_loaded": max(s.pass_max_ms or 0.0 for s in loaded) if loaded else None,
        "waiting_peak": max(waiting) if waiting else None,
        "fds_start": next((s.fds for s in samples if s.fds is not None), None),
        "fds_end": next((s.fds for s in reversed(samples) if s.fds is not None), None),
        "starvation_s": starvation_s,
        "load1_mean": statistics.fmean(s.load1 for s in samples) if samples else None,
        "inherited_locks": inherited_locks(stack, run_id),
        **placed,
    }
    result.waits_by_task = by_task


def fmt(value: Any, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(result: Result) -> None:
    s = result.summary
    print(
        f"Load: {result.tasks} GPU tasks through the real scheduler (CarmaExecutor, simulated 8xA100-40GB, {result.db})"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}; "
        f"mean 1-min load during the run {fmt(s.get('load1_mean'), '.2f')}"
    )
    rows = [
        ("tasks done / failed / other", f"{s['done']} / {s['failed']} / {s['other']}"),
        ("run state", str(result.run_state)),
        ("wall time, trigger -> run done (s)", fmt(result.wall_s)),
        ("first queued -> last end (s)", fmt(s["span_s"])),
        ("throughput (tasks/min)", fmt(s["done"] / result.wall_s * 60 if result.wall_s else None)),
        ("executor queue peak (waiting)", fmt(s["waiting_peak"], "d")),
        (
            "scheduler RSS start / peak / end (MiB)",
            f"{fmt(s['rss_start_mib'], '.0f')} / {fmt(s['rss_peak_mib'], '.0f')} / {fmt(s['rss_end_mib'], '.0f')}",
        ),
        ("RSS slope, second half (MiB per 1000 tasks)", fmt(s["rss_slope_second_half_mib_per_1000"])),
        ("scheduler open descriptors start / end", f"{fmt(s['fds_start'], 'd')} / {fmt(s['fds_end'], 'd')}"),
        ("scheduling pass median / max (ms)", f"{fmt(s['pass_median_ms'], '.2f')} / {fmt(s['pass_max_ms'], '.1f')}"),
        (
            "  the same while >= N/2 wait (ms)",
            f"{fmt(s['pass_median_ms_loaded'], '.2f')} / {fmt(s['pass_max_ms_loaded'], '.1f')}",
        ),
        ("wait decided -> started median / p95 (s)", f"{fmt(s['wait_median_s'])} / {fmt(s['wait_p95_s'])}"),
        ("max wait vs starvation bound (s)", f"{fmt(s['wait_max_s'])} / {s['starvation_s']:g}"),
        ("tries recorded / CUDA OOMs", f"{s['tries']} / {s['ooms']}"),
        ("tasks that inherited the ledger lock", str(s["inherited_locks"])),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:{width}}  {value}")
    if result.waits_by_task:
        print(
            "max wait by declared memory: "
            + ", ".join(
                f"{k.removeprefix('train_').removesuffix('gib').lstrip('0')} GiB {v:.0f} s"
                for k, v in sorted(result.waits_by_task.items())
            )
        )


def plot(result: Result, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ts = [s.t for s in result.samples]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(ts, [s.rss_mib for s in result.samples], color="tab:blue")
    axes[0].set_ylabel("scheduler RSS (MiB)")
    axes[1].plot(ts, [s.waiting for s in result.samples], label="waiting in executor")
    axes[1].plot(ts, [s.running for s in result.samples], label="running")
    axes[1].plot(ts, [s.states.get("success", 0) for s in result.samples], label="done")
    axes[1].set_ylabel("tasks")
    axes[1].legend(loc="upper right")
    axes[2].plot(ts, [s.pass_median_ms for s in result.samples], label="median of last 256")
    axes[2].plot(ts, [s.pass_max_ms for s in result.samples], label="max of last 256")
    axes[2].set_ylabel("scheduling pass (ms)")
    axes[2].set_xlabel("seconds since trigger")
    axes[2].legend(loc="upper right")
    fig.suptitle(f"{result.tasks} GPU tasks, CarmaExecutor on simulated 8xA100-40GB ({result.db})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000, help="GPU tasks in the run (default 2000)")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--timeout", type=float, default=5400.0, help="give up after this many seconds")
    parser.add_argument("--starvation", type=float, default=None, help="[carma] starvation_seconds (default 3600)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "load")
    parser.add_argument("--keep", action="store_true", help="keep the Airflow home (and the database)")
    args = parser.parse_args()
    if args.tasks < 1:
        parser.error("--tasks must be >= 1")

    home = Path(tempfile.mkdtemp(prefix="carma-load-"))
    pg_name: str | None = None
    db_url: str | None = None
    if args.db == "postgres":
        pg_name, db_url = make_pg_database()
    stack = build_stack(home, args.tasks, db_url, args.starvation)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that the finally below stops Airflow
    if db_url is None:
        stack.env["AIRFLOW__CARMA__STORE_URL"] = f"sqlite:///{home / 'carma.db'}"
    result = Result(tasks=args.tasks, db="PostgreSQL" if db_url else "SQLite")
    starvation = args.starvation if args.starvation is not None else DEFAULT_STARVATION_S
    print(f"airflow home {home}; {result.db}", file=sys.stderr)
    run_id = ""
    try:
        stack.start()
        stack.wait_for_dag(DAG_ID, timeout=300)
        t0 = time.time()
        run_id = stack.trigger(DAG_ID)
        deadline = t0 + args.timeout
        while True:
            s = sample(stack, run_id, t0)
            result.samples.append(s)
            print(
                f"  t={s.t:7.1f}s rss={fmt(s.rss_mib, '.0f')}MiB waiting={s.waiting} running={s.running} "
                f"fds={s.fds} pass med/max={s.pass_median_ms}/{s.pass_max_ms}ms states={s.states} load={s.load1:.1f}",
                file=sys.stderr,
                flush=True,
            )
            state_rows = stack.query("select state from dag_run where dag_id = :d and run_id = :r", d=DAG_ID, r=run_id)
            result.run_state = str(state_rows[0][0]) if state_rows else None
            if result.run_state in ("success", "failed") or time.time() > deadline:
                break
            if stack.procs["scheduler"].poll() is not None:
                print("scheduler exited:\n" + stack.tail("scheduler"), file=sys.stderr)
                break
            time.sleep(max(0.0, args.every - (time.time() - t0 - s.t)))
        result.wall_s = time.time() - t0
        result.samples.append(sample(stack, run_id, t0))
        summarise(result, stack, run_id, starvation)
    finally:
        stop_stack(stack)
        if pg_name is not None and not args.keep:
            drop_pg_database(pg_name)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)

    print_table(result)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"load_{args.tasks}.json"
    target.write_text(json.dumps(asdict(result), indent=1, default=str))
    png = args.out / f"load_{args.tasks}.png"
    print(f"series: {target}" + (f", {png}" if plot(result, png) else ""))
    summary = result.summary
    ok = result.run_state == "success" and summary["done"] == args.tasks and summary["failed"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
