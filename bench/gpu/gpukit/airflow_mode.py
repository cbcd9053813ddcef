"""Airflow mode: the kit's DAG through a real Airflow 3.3 with CarmaExecutor, once per policy.

For each policy a throwaway Airflow (api-server, scheduler, dag-processor; SQLite; carma's
:class:`~carma_airflow.dev.devstack.AirflowStack`) starts with ``[carma] policy`` set, runs
``carma_gpu_kit`` (bench/gpu/dags) and stops.  The tries come from carma's store (where the
executor put them, with GPUs, times, outcome and peak), each task's figures from its XCom, and
GPU telemetry from the kit's own monitor sampling beside the executor's.  The figures are then
the same as light mode's.  Each run's evidence (``carma why`` of every task, Airflow's try
history, carma's reason in the crashed try's log) goes to ``work/<policy>/evidence.json``
(:mod:`gpukit.evidence`).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from carma_airflow.monitor.base import Probe
from carma_airflow.monitor.sampler import Monitor, make_probe
from gpukit.driver import GPUKIT_DIR, RunResult, SampleRow, TryRecord
from gpukit.evidence import collect, evidence_lines
from gpukit.train import BACKEND_ENV, SIM_SCALE_ENV
from gpukit.workload import TaskSpec, kit_tasks, with_steps

DAG_ID = "carma_gpu_kit"


class _Sampler:
    """Samples the GPUs on a thread while a run goes on; rows are relative to ``t0``."""

    def __init__(self, probe: Probe, period_s: float) -> None:
        self.monitor = Monitor(probe, period_s=period_s)
        self.period_s = period_s
        self.rows: list[SampleRow] = []
        self.cpu_s = self.wall_s = 0.0
        self.count = 0
        self.gpus: list[dict[str, Any]] = []
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self.t0 = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            c, w = time.thread_time(), time.perf_counter()
            samples = self.monitor.sample_once()
            self.cpu_s += time.thread_time() - c
            self.wall_s += time.perf_counter() - w
            self.count += 1
            now = time.time() - self.t0
            if not self.gpus:
                self.gpus = [
                    {"uuid": s.uuid, "index": s.index, "name": s.name, "memory_total_mib": s.memory_total_mib}
                    for s in samples
                ]
            self.rows.extend(SampleRow.of(now, s) for s in samples if s.ok)
            self._stop.wait(self.period_s)


def _one_run(
    args: argparse.Namespace, out: Path, policy: str, tasks: list[TaskSpec], probe: Probe, state_dir: Path
) -> RunResult:
    from carma_airflow.dev.devstack import AirflowStack
    from carma_airflow.store.store import Store

    run_dir = out / "work" / policy
    home = run_dir / "home"
    home.mkdir(parents=True)
    work = run_dir / "work.json"
    work.write_text(json.dumps({"policy": policy, "tasks": [asdict(t) for t in tasks]}))
    backend = "simulated" if args.dry_run else "nvml"
    stack = AirflowStack(
        home,
        GPUKIT_DIR / "dags",
        gpu_backend=backend,
        simulated_gpus=args.sim_gpus,
        policy=policy,
        state_dir=str(state_dir),
        sample_period="0.5",
        oom_retry_delay="1",
        AIRFLOW__CORE__PARALLELISM="32",
    )
    stack.env.update(
        {
            "CARMA_GPU_KIT_WORK": str(work),
            "CARMA_GPU_KIT_DIR": str(GPUKIT_DIR),
            "CARMA_GPU_KIT_DELAY_SCALE": str(args.sim_scale if args.dry_run else 1.0),
            BACKEND_ENV: backend,
            SIM_SCALE_ENV: str(args.sim_scale),
            "PYTHONPATH": os.pathsep.join([str(GPUKIT_DIR), str(GPUKIT_DIR.parents[1])]),
        }
    )
    print(f"[kit] {policy}: starting Airflow (api-server, scheduler, dag-processor) in {home}", flush=True)
    stack.start()
    sampler = _Sampler(probe, 0.5)
    try:
        run_id = stack.trigger(DAG_ID)
        sampler.start()
        try:
            state = stack.wait_run(DAG_ID, run_id, timeout=args.timeout)
        except AssertionError:  # past --timeout: this run's figures are partial, the next policy still runs
            state = f"still running after --timeout {args.timeout:g} s (figures partial)"
        print(f"[kit] {policy}: DAG run {state}", flush=True)
        xcoms = {t.name: stack.xcom(DAG_ID, run_id, t.name) for t in tasks}
        try:  # carma why, Airflow's try history, carma's reason in the crashed try's log
            for line in evidence_lines(policy, collect(stack, DAG_ID, run_id, [t.name for t in tasks], run_dir)):
                print(line, flush=True)
        except Exception as exc:  # evidence is a report: the figures still come
            print(f"[kit] {policy}: evidence not collected: {type(exc).__name__}: {exc}", flush=True)
    finally:
        sampler.stop()
        stack.stop()
    records = Store(f"sqlite:///{home / 'carma.db'}").placements(dag_id=DAG_ID, limit=1000)
    index_of = {g["uuid"]: int(g["index"]) for g in sampler.gpus}
    tries: list[TryRecord] = []
    for r in sorted(records, key=lambda r: r.started_at or r.decided_at):
        if r.started_at is None:
            continue
        outcome = getattr(r.outcome, "value", str(r.outcome))
        started = r.started_at.timestamp() - sampler.t0
        ended = r.ended_at.timestamp() - sampler.t0 if r.ended_at else None
        metrics = xcoms.get(r.task_id) if outcome == "success" else None
        tries.append(
            TryRecord(
                task=r.task_id,
                try_number=r.try_number,
                key=r.key,
                declared_mib=next((t.declared_mib for t in tasks if t.name == r.task_id), 0),
                request_mib=int(r.estimate_mib or 0),
                gpu_uuids=list(r.gpu_uuids),
                gpu_indices=[index_of.get(u, -1) for u in r.gpu_uuids],
                submitted_s=r.decided_at.timestamp() - sampler.t0,
                started_s=started,
                summary=r.summary,
                collocated="co-tenants: none" not in r.summary,
                co_tenants=[],
                ended_s=ended,
                outcome=outcome,
                peak_mib=r.peak_mib,
                metrics=metrics if isinstance(metrics, dict) else {},
            )
        )
    _fill_co_tenants(tries)
    _fill_oom_details(tries, stack)
    ends = [t.ended_s for t in tries if t.ended_s is not None]
    starts = [t.started_s for t in tries]
    failed = sorted({t.task for t in tries} - {t.task for t in tries if t.outcome == "success"})
    return RunResult(
        policy=policy,
        backend=backend,
        makespan_s=(max(ends) - min(starts)) if ends and starts else float("nan"),
        tries=tries,
        samples=sampler.rows,
        gpus=sampler.gpus,
        sample_cpu_s=sampler.cpu_s,
        sample_wall_s=sampler.wall_s,
        sample_count=sampler.count,
        timed_out=state not in ("success", "failed"),
        failed_tasks=failed,
    )


def _fill_co_tenants(tries: list[TryRecord]) -> None:
    for t in tries:
        t.co_tenants = sorted(
            {
                o.task
                for o in tries
                if o is not t
                and not set(o.gpu_uuids).isdisjoint(t.gpu_uuids)
                and o.started_s <= t.started_s < (o.ended_s if o.ended_s is not None else float("inf"))
            }
        )


def _fill_oom_details(tries: list[TryRecord], stack: Any) -> None:
    """The OOM message and the planner's reason for the retry, from carma's store."""
    for t in tries:
        if t.outcome != "oom":
            continue
        nxt = next((o for o in tries if o.task == t.task and o.try_number == t.try_number + 1), None)
        t.message = "CUDA out of memory (CarmaExecutor recorded the OOM; the message is in the task's log)"
        if nxt is not None:
            t.recovery = f"retry planned by CarmaExecutor: {nxt.request_mib} MiB, {nxt.summary}"


def run_airflow(args: argparse.Namespace, out: Path) -> int:
    from gpukit.cli import _finish, _kit_info, policies_of
    from gpukit.report import build_figures

    backend = "simulated" if args.dry_run else "nvml"
    state_dir = out / "work" / "carma-state"
    state_dir.mkdir(parents=True)
    probe = make_probe(backend, args.sim_gpus, state_dir / "simulated-gpus.json")
    began = time.time()
    try:
        total = min(s.memory_total_mib for s in probe.sample() if s.ok)
        tasks = kit_tasks(total, scale=args.scale)
        runs: list[RunResult] = []
        for policy in policies_of(args):
            if runs:
                steps = {r.task: int(r.metrics["steps"]) for r in runs[0].tries if r.metrics.get("steps")}
                tasks = with_steps(tasks, steps)
            runs.append(_one_run(args, out, policy, tasks, probe, state_dir))
    finally:
        probe.close()
    fig = build_figures(runs[0], runs[-1], _kit_info(args, "airflow", backend, began, runs))
    return _finish(fig, runs, out)
