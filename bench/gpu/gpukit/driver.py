"""Light mode: carma's placement, monitor and task-launch path without Airflow.

One run = one policy over the kit's tasks.  Every tick the driver samples the GPUs through
carma's :class:`~carma_airflow.monitor.Monitor` (NVML or simulated probe), reaps ended task
processes (their result file says success / CUDA OOM / other, as for CarmaExecutor), plans the
next try of an OOM, and runs one pass of carma's
:class:`~carma_airflow.core.cycle.SchedulingCycle` over the GPUs as ``build_view`` reads them from
the samples: the cycle owns the waiting tries, the reservations and the recovery planner, and its
:class:`Placer` (the policy under test, the backfill queue) decides, as in CarmaExecutor and in the
simulator.  A placed task starts as its own process with the
environment CarmaExecutor gives GPU tasks: ``CUDA_VISIBLE_DEVICES`` set to its GPUs' UUIDs,
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, the framework guards and the result file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carma_airflow.core.cycle import Placed, SchedulingCycle
from carma_airflow.core.gpu import ClusterView
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.queueing import Backfill
from carma_airflow.core.recovery import GiveUp, RecoverySettings, classify_failure, oom_reached
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.monitor.base import GpuSample
from carma_airflow.monitor.sampler import Monitor
from gpukit.carma_shim import TryResult, build_view, gpu_task_env, read_result
from gpukit.train import BACKEND_ENV, LEDGER_ENV, METRICS_ENV, SIM_SCALE_ENV
from gpukit.workload import TaskSpec

GPUKIT_DIR = Path(__file__).resolve().parents[1]


@dataclass(slots=True)
class TryRecord:
    """One try of one task, as the report needs it (times relative to the run's start)."""

    task: str
    try_number: int
    key: str
    declared_mib: int
    request_mib: int
    gpu_uuids: list[str]
    gpu_indices: list[int]
    submitted_s: float
    started_s: float
    summary: str
    collocated: bool
    co_tenants: list[str]
    ended_s: float | None = None
    outcome: str = "running"  # success | oom | failed
    exit_code: int | None = None
    peak_mib: int | None = None
    message: str | None = None
    recovery: str | None = None  # the planner's reason for the next try, after an OOM
    metrics: dict[str, Any] = field(default_factory=dict)
    log: str = ""


@dataclass(slots=True)
class SampleRow:
    t: float
    uuid: str
    index: int
    used_mib: int
    total_mib: int
    smact: float | None
    smocc: float | None
    drama: float | None
    busy: float | None
    power_w: float | None
    energy_j: float | None
    source: str

    @classmethod
    def of(cls, t: float, s: GpuSample) -> SampleRow:
        """The row of one healthy sample taken at run time ``t``."""
        return cls(
            t,
            s.uuid,
            s.index,
            s.memory_used_mib,
            s.memory_total_mib,
            s.smact,
            s.smocc,
            s.drama,
            s.busy,
            s.power_w,
            s.energy_j,
            s.activity_source,
        )


@dataclass(slots=True)
class RunResult:
    policy: str
    backend: str
    makespan_s: float
    tries: list[TryRecord]
    samples: list[SampleRow]
    gpus: list[dict[str, Any]]
    sample_cpu_s: float
    sample_wall_s: float
    sample_count: int
    timed_out: bool
    failed_tasks: list[str]


@dataclass(slots=True)
class _Active:
    spec: TaskSpec
    request: TaskRequest
    record: TryRecord
    proc: subprocess.Popen[bytes]
    result_path: Path
    metrics_path: Path
    log_path: Path


class LightDriver:
    """Runs the kit's tasks through carma's placer with one policy; see the module docstring."""

    def __init__(
        self,
        monitor: Monitor,
        policy: str,
        tasks: list[TaskSpec],
        work_dir: Path,
        *,
        backend: str,
        ledger_path: Path | None = None,
        sim_scale: float = 0.15,
        tick_s: float = 0.5,
        oom_retry_delay_s: float = 1.0,
        timeout_s: float = 600.0,
        python: str = sys.executable,
        max_tenants: int = 3,
    ) -> None:
        self.monitor = monitor
        pol = make_policy(policy)
        if hasattr(pol, "max_tenants") and pol.collocates:
            pol.max_tenants = max_tenants
        self.placer = Placer(pol, PlacementSettings())
        # its ledger counts a tenant as seen by the monitor after the lock time, as CarmaExecutor's
        self.cycle = SchedulingCycle(self.placer, Backfill(), recovery=RecoverySettings())
        self.tasks = tasks
        self.work_dir = work_dir
        self.backend = backend
        self.ledger_path = ledger_path
        self.sim_scale = sim_scale
        self.tick_s = tick_s
        self.oom_retry_delay_s = oom_retry_delay_s
        self.timeout_s = timeout_s
        self.python = python
        self._specs: dict[str, TaskSpec] = {}  # request key -> the kit task it tries
        self._planned_by: dict[str, str] = {}  # request key -> the recovery reason that planned it
        self.samples: list[SampleRow] = []
        self.tries: list[TryRecord] = []
        self.failed: list[str] = []
        self._wall_s = 0.0

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        # simulated tasks run sim_scale seconds per real second: so do their submission delays
        time_scale = self.sim_scale if self.backend == "simulated" else 1.0
        pending = sorted(self.tasks, key=lambda t: t.delay_s)
        active: dict[str, _Active] = {}
        timed_out = False
        cpu_s = 0.0
        rounds = 0
        gpus: list[dict[str, Any]] = []
        while True:
            now = time.time()
            began_cpu, began_wall = time.thread_time(), time.perf_counter()
            samples = self.monitor.sample_once()
            cpu_s += time.thread_time() - began_cpu
            self._wall_s += time.perf_counter() - began_wall
            rounds += 1
            if not gpus:
                gpus = [
                    {"uuid": s.uuid, "index": s.index, "name": s.name, "memory_total_mib": s.memory_total_mib}
                    for s in samples
                ]
            self._record_samples(samples, now - t0)
            for key, act in list(active.items()):
                if act.proc.poll() is not None:
                    del active[key]
                    self._finish(act, now, t0)
            while pending and pending[0].delay_s * time_scale <= now - t0:
                spec = pending.pop(0)
                req = TaskRequest(
                    key=f"{spec.name}#1",
                    label=spec.name,
                    memory=MemoryNeed(spec.declared_mib, "declared"),
                    priority=spec.priority,
                    submitted_at=now,
                )
                self._specs[req.key] = spec
                self.cycle.submit(req, now)
            if len(self.cycle):
                # the monitor's GPUs, no tenants: the cycle lays its reservations over them
                observed = build_view(
                    now,
                    samples,
                    {s.uuid: self.monitor.window(s.uuid) for s in samples},
                    {s.uuid: self.monitor.age(s.uuid, now) for s in samples},
                    10.0,
                )
                result = self.cycle.run(now, observed.gpus)
                for placed in result.placed:
                    active[placed.request.key] = self._launch(placed, result.view, now, t0)
                for nf in result.never_fits:
                    name = self._specs[nf.request.key].name
                    self.failed.append(name)
                    print(f"[kit] {name} can never be placed: {nf.decision.summary}", flush=True)
            if not pending and not len(self.cycle) and not active:
                break
            if now - t0 > self.timeout_s:
                timed_out = True
                for act in active.values():
                    act.proc.kill()
                    act.proc.wait()
                    self.failed.append(act.spec.name)
                self.failed += [self._specs[r.key].name for r in self.cycle.waiting_requests()]
                self.failed += [p.name for p in pending]
                print(f"[kit] run with {self.placer.policy.name} passed its {self.timeout_s:.0f} s limit", flush=True)
                break
            time.sleep(max(0.0, self.tick_s - (time.time() - now)))
        ends = [r.ended_s for r in self.tries if r.ended_s is not None]
        starts = [r.started_s for r in self.tries]
        makespan = (max(ends) - min(starts)) if ends and starts else float("nan")
        return RunResult(
            policy=self.placer.policy.name,
            backend=self.backend,
            makespan_s=makespan,
            tries=self.tries,
            samples=self.samples,
            gpus=gpus,
            sample_cpu_s=cpu_s,
            sample_wall_s=self._wall_s,
            sample_count=rounds,
            timed_out=timed_out,
            failed_tasks=sorted(set(self.failed)),
        )

    # -- helpers -----------------------------------------------------------------------------

    def _record_samples(self, samples: list[GpuSample], t: float) -> None:
        self.samples.extend(SampleRow.of(t, s) for s in samples if s.error is None)

    def _co_tenants(self, uuid: str, key: str) -> list[str]:
        """Who was on the GPU when try ``key`` joined it (its pass reserved it already)."""
        out = []
        for r in self.cycle.reservations.on(uuid):
            if r.key == key:
                break
            out.append(r.label)
        return out

    def _launch(self, placed: Placed, view: ClusterView, now: float, t0: float) -> _Active:
        req, decision = placed.request, placed.decision
        spec = self._specs[req.key]
        tag = f"{spec.name}.try{req.try_number}"
        result_path = self.work_dir / f"{tag}.result.json"
        metrics_path = self.work_dir / f"{tag}.metrics.json"
        log_path = self.work_dir / f"{tag}.log"
        for p in (result_path, metrics_path):
            p.unlink(missing_ok=True)
        env = dict(os.environ)
        env.update(gpu_task_env(decision.gpu_uuids, result_path=str(result_path), placement=decision.summary))
        env.update(
            {
                METRICS_ENV: str(metrics_path),
                BACKEND_ENV: self.backend,
                SIM_SCALE_ENV: str(self.sim_scale),
                "PYTHONPATH": os.pathsep.join(
                    [str(GPUKIT_DIR), str(GPUKIT_DIR.parents[1]), env.get("PYTHONPATH", "")]
                ).rstrip(os.pathsep),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.ledger_path is not None:
            env[LEDGER_ENV] = str(self.ledger_path)
        log = open(log_path, "wb")  # noqa: SIM115 - the child holds it; closed after the child ends
        try:
            proc = subprocess.Popen(
                [self.python, "-m", "gpukit.train", spec.to_json()],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(GPUKIT_DIR),
            )
        except BaseException:
            self.cycle.release(req.key)  # it never started: its reservation must not outlive it
            raise
        finally:
            log.close()
        co = [label for u in decision.gpu_uuids for label in self._co_tenants(u, req.key)]
        record = TryRecord(
            task=spec.name,
            try_number=req.try_number,
            key=req.key,
            declared_mib=spec.declared_mib,
            request_mib=req.memory.mib,
            gpu_uuids=list(decision.gpu_uuids),
            gpu_indices=[view.by_uuid[u].index for u in decision.gpu_uuids],
            submitted_s=now - placed.waited_s - t0,  # when this try was queued
            started_s=now - t0,
            summary=decision.summary,
            collocated=bool(co),
            co_tenants=co,
            recovery=None,
            log=str(log_path),
        )
        planned_by = self._planned_by.pop(req.key, None)
        if planned_by:
            record.message = f"planned by recovery: {planned_by}"
        self.tries.append(record)
        print(f"[kit] {self.placer.policy.name}: {spec.name} try {req.try_number} {decision.summary}", flush=True)
        return _Active(spec, req, record, proc, result_path, metrics_path, log_path)

    def _finish(self, act: _Active, now: float, t0: float) -> None:
        """Record how a try ended; the cycle releases its GPUs and, after a CUDA OOM, queues the
        next try its recovery planned (after ``oom_retry_delay_s``)."""
        rec = act.record
        rec.ended_s = now - t0
        rec.exit_code = act.proc.returncode
        result = read_result(act.result_path)
        if result is None:  # as CarmaExecutor: no result file means the process died first
            killed = rec.exit_code in (-9, 137)
            result = TryResult(
                "failed",
                "killed" if killed else "other",
                message=f"task process ended with exit code {rec.exit_code} ({'killed' if killed else 'no result'})",
            )
        rec.peak_mib = result.peak_mib
        if act.metrics_path.exists():
            try:
                rec.metrics = json.loads(act.metrics_path.read_text())
            except ValueError:
                rec.metrics = {}
        if result.state == "success" and rec.exit_code == 0:
            rec.outcome = "success"
            self.cycle.release(act.request.key)
            return
        failure = classify_failure(result.exc_type, result.message, rec.exit_code)
        rec.outcome = "oom" if failure.is_oom else "failed"
        rec.message = (result.message or "")[:500]
        if not failure.is_oom:
            self.cycle.release(act.request.key)
            self.failed.append(act.spec.name)
            print(f"[kit] {act.spec.name} failed ({failure.kind.value}): {rec.message[:200]}", flush=True)
            return
        plan = self.cycle.recover(
            act.request.key,
            failure,
            now=now,
            peak_mib=oom_reached(result.peak_mib, result.message),  # held + asked, as the executor reads it
            not_before=now + self.oom_retry_delay_s,
        )
        rec.recovery = plan.reason
        print(f"[kit] {act.spec.name}: {plan.reason}", flush=True)
        if isinstance(plan, GiveUp):
            self.failed.append(act.spec.name)
            return
        self._specs[plan.request.key] = act.spec
        self._planned_by[plan.request.key] = plan.reason
