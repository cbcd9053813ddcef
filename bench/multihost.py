"""Multi-host scale benchmark: 128 GPU hosts x 8 GPUs, 10,000 pending tasks, PostgreSQL store.

Measures and prints (never asserts; always exits 0):

1. store load of the agents: 128 simulated agents (:class:`carma_airflow.distributed.agent.Agent`
   with a synthetic probe) publish their host row every ``--period`` seconds for ``--seconds``
   seconds from ``--threads`` threads; rows/s written, bytes per row, publish latency p50/p99;
2. the executor's read of the cluster: :meth:`ClusterMonitor.refresh` (one query over every host
   row, JSON decoded, windows updated) while the agents write, median and p99;
3. one placement pass as the executor runs it with celery dispatch: ``latest()`` -> ``build_view``
   over 1,024 GPUs -> backfill ``plan`` -> ``Placer.schedule`` of 10,000 pending requests from the
   task catalogue (the same requests as bench/speed.py), on an idle cluster.

Usage::

    .venv/bin/python bench/multihost.py                 # PostgreSQL at 127.0.0.1:5432 (a throwaway database)
    .venv/bin/python bench/multihost.py --quick         # 8 hosts, 500 tasks, 3 s (smoke run)
    .venv/bin/python bench/multihost.py --store-url postgresql+psycopg://user@db/carma --json
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed import NOW, catalog_requests

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.queueing import make_queue
from carma_airflow.distributed.agent import Agent
from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.samples import to_json
from carma_airflow.executor.gpus import build_view
from carma_airflow.monitor.base import GpuSample
from carma_airflow.sim import load_catalog, packaged
from carma_airflow.store.store import Store

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


class SyntheticProbe:
    """8 H100s of one host with drifting memory and activity (what an agent reads each period)."""

    backend = "synthetic"

    def __init__(self, host: str, gpus: int, seed: int) -> None:
        self.host = host
        self.gpus = gpus
        self.rng = random.Random(seed)
        self.offset = seed * gpus

    def sample(self) -> list[GpuSample]:
        now = time.time()
        out = []
        for i in range(self.gpus):
            used = self.rng.randint(0, 60_000)
            # NOTE: a unique index per GPU across hosts: with NVML indices (0..7 on every host) the
            # core placer's by-memory index can compare two GpuFacts on a tie and raise TypeError
            # (docs/multihost.md, "Known limits"); real hosts need that fixed in core/placer.py
            index = self.offset + i
            act = self.rng.random()
            out.append(
                GpuSample(
                    f"GPU-{self.host}-{i}", index, "H100-80GB", self.host, 81_920, used, 81_920 - used, now,
                    busy=act, smact=act, smocc=act * 0.6, drama=act * 0.5, activity_source="gpm",
                    power_w=100 + 500 * act, energy_j=now,
                )
            )  # fmt: skip
        return out

    def close(self) -> None:
        pass


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))] if ordered else float("nan")


def run(
    store: Store, hosts: int, gpus: int, tasks: int, seconds: float, period: float, threads: int
) -> dict[str, float]:
    settings = CarmaSettings.load(
        {"gpu_backend": "simulated", "store_url": "sqlite://", "host": "x", "dispatch": "celery"}.get, "/tmp"
    )
    agents = [
        Agent(settings, store, SyntheticProbe(f"gpu-{h:03d}", gpus, h)) for h in range(hosts)
    ]  # one store (connection pool) per bench process, as many agent processes would each hold one
    for a in agents:
        a.settings = CarmaSettings.load({**_base(a), "host": a.probe.host}.get, "/tmp")  # type: ignore[attr-defined]
        a.beat()  # every host known before measuring
        store.worker_beat(a.settings.host, time.time())
    row_bytes = statistics.mean(len(json.dumps([to_json(s) for s in a.probe.sample()])) for a in agents[:8])

    latencies: list[float] = []
    worker_beats: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(share: list[Agent]) -> None:
        while not stop.is_set():
            began = time.perf_counter()
            for a in share:
                t0 = time.perf_counter()
                a.beat()
                t1 = time.perf_counter()
                store.worker_beat(a.settings.host, time.time())  # the host's Celery worker, same period
                t2 = time.perf_counter()
                with lock:
                    latencies.append(t1 - t0)
                    worker_beats.append(t2 - t1)
            stop.wait(max(0.0, period - (time.perf_counter() - began)))

    shares = [agents[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=writer, args=(s,), daemon=True) for s in shares]
    view = ClusterMonitor(store, host_timeout_s=30, period_s=0.0)
    began = time.perf_counter()
    for w in workers:
        w.start()
    reads: list[float] = []
    while time.perf_counter() - began < seconds:
        t0 = time.perf_counter()
        view.refresh(force=True)
        reads.append(time.perf_counter() - t0)
        time.sleep(0.2)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - began
    written = len(latencies)

    # one placement pass as the executor runs it (view from the store, then plan + schedule)
    catalog = load_catalog(packaged("task_catalog.csv"))
    pending = catalog_requests(catalog, tasks)
    pending = [r.__class__(**{**_fields(r), "submitted_at": NOW - 60.0}) for r in pending]
    queue = make_queue("backfill")
    placer = Placer(make_policy("interference-aware"))
    passes = []
    placed = 0
    for _ in range(3):
        t0 = time.perf_counter()
        samples = list(view.latest().values())
        now = time.time()
        cluster = build_view(
            now,
            samples,
            {s.uuid: view.window(s.uuid) for s in samples},
            {s.uuid: view.age(s.uuid, now) for s in samples},
            10.0,
        )
        t1 = time.perf_counter()
        plan = queue.plan(pending, now)
        result = placer.schedule(plan.ordered, cluster, blocking=plan.blocking, protected=plan.protected)
        t2 = time.perf_counter()
        placed = len(result.placed)
        reasons = sorted({d.summary for d in result.by_key.values()})[:3]
        passes.append((t1 - t0, t2 - t1, t2 - t0))
    view_s = statistics.median(p[0] for p in passes)
    schedule_s = statistics.median(p[1] for p in passes)
    total_s = statistics.median(p[2] for p in passes)
    return {
        "hosts": hosts,
        "gpus": hosts * gpus,
        "pending": tasks,
        "rows_per_s": written / elapsed,
        "rows_per_s_target": hosts / period,
        "worker_beats_per_s": len(worker_beats) / elapsed,
        "worker_beat_p99_ms": _pct(worker_beats, 0.99) * 1000,
        "row_bytes": row_bytes,
        "kib_per_s": written / elapsed * row_bytes / 1024,
        "publish_p50_ms": _pct(latencies, 0.5) * 1000,
        "publish_p99_ms": _pct(latencies, 0.99) * 1000,
        "refresh_p50_ms": _pct(reads, 0.5) * 1000,
        "refresh_p99_ms": _pct(reads, 0.99) * 1000,
        "view_ms": view_s * 1000,
        "plan_schedule_ms": schedule_s * 1000,
        "pass_ms": total_s * 1000,
        "placed": placed,
        "waiting_reasons": reasons,  # type: ignore[dict-item]
    }


def _base(agent: Agent) -> dict[str, str]:
    return {"gpu_backend": "simulated", "store_url": "sqlite://", "dispatch": "celery"}


def _fields(request: object) -> dict[str, object]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store-url", help="PostgreSQL URL (default: a throwaway database on 127.0.0.1:5432)")
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--period", type=float, default=1.0, help="agent sample_period")
    parser.add_argument("--threads", type=int, default=8, help="threads the simulated agents write from")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.hosts, args.tasks, args.seconds, args.threads = 8, 500, 3.0, 2
    import sqlalchemy as sa

    made = None
    url = args.store_url
    if url is None:
        made = f"carma_bench_{secrets.token_hex(4)}"
        admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{made}"')
        url = sa.make_url(PG_ADMIN).set(database=made).render_as_string(hide_password=False)
    store = Store(url)
    try:
        store.migrate()
        figures = run(store, args.hosts, args.gpus, args.tasks, args.seconds, args.period, args.threads)
    finally:
        store.close()
        if made is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{made}" WITH (FORCE)')
            admin.dispose()
    f = figures
    print(f"multi-host: {f['hosts']} hosts x {args.gpus} GPUs = {f['gpus']} GPUs, {f['pending']} pending tasks")
    print(f"  agents -> store : {f['rows_per_s']:.0f} host rows/s written (wanted {f['rows_per_s_target']:.0f}), "
          f"{f['row_bytes'] / 1024:.1f} KiB/row, {f['kib_per_s']:.0f} KiB/s; publish p50 {f['publish_p50_ms']:.1f} ms, "
          f"p99 {f['publish_p99_ms']:.1f} ms")  # fmt: skip
    print(f"  workers -> store: {f['worker_beats_per_s']:.0f} heartbeats/s, p99 {f['worker_beat_p99_ms']:.1f} ms")
    print(f"  executor read   : refresh (all host rows) p50 {f['refresh_p50_ms']:.1f} ms, "
          f"p99 {f['refresh_p99_ms']:.1f} ms")  # fmt: skip
    print(f"  placement pass  : view {f['view_ms']:.0f} ms + plan/schedule {f['plan_schedule_ms']:.0f} ms "
          f"= {f['pass_ms']:.0f} ms, {f['placed']} placed")  # fmt: skip
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
