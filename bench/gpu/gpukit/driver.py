"""Light mode: carma's placement, monitor and task-launch path without Airflow.

One run = one policy over the kit's tasks.  Every tick the driver samples the GPUs through
carma's :class:`~carma_airflow.monitor.Monitor` (NVML or simulated probe), reaps ended task
processes (their result file says success / CUDA OOM / other, as for CarmaExecutor), plans the
next try of an OOM with carma's recovery planner, builds the placer's view with carma's
``build_view`` from the samples and its own tenant book, and lets carma's :class:`Placer` (the
policy under test, the backfill queue) decide.  A placed task starts as its own process with the
environment CarmaExecutor gives GPU tasks: ``CUDA_VISIBLE_DEVICES`` set to its GPUs' UUIDs,
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, the framework guards and the result file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from carma_airflow.core.decision import Outcome
from carma_airflow.core.gpu import Tenant
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.queueing import Backfill
from carma_airflow.core.recovery import GiveUp, RecoverySettings, classify_failure, plan_recovery
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.monitor.base import GpuSample
from carma_airflow.monitor.sampler import Monitor
from gpukit.carma_shim import TryResult, build_view, gpu_task_env, read_result, tenants_seen
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
    oom_retries: int


@dataclass(slots=True)
class _Waiting:
    spec: TaskSpec
    request: TaskRequest
    oom_retries: int
    not_before: float
    recovery: str | None = None


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
        self.queue = Backfill()
        self.recovery = RecoverySettings()
        self.tasks = tasks
        self.work_dir = work_dir
        self.backend = backend
        self.ledger_path = ledger_path
        self.sim_scale = sim_scale
        self.tick_s = tick_s
        self.oom_retry_delay_s = oom_retry_delay_s
        self.timeout_s = timeout_s
        self.python = python
        self.tenants: dict[str, list[Tenant]] = {}
        self.last_placed: dict[str, float] = {}
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
        waiting: dict[str, _Waiting] = {}
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
                    retry = self._finish(act, now, t0)
                    if retry is not None:
                        waiting[retry.request.key] = retry
            while pending and pending[0].delay_s * time_scale <= now - t0:
                spec = pending.pop(0)
                req = TaskRequest(
                    key=f"{spec.name}#1",
                    label=spec.name,
                    memory=MemoryNeed(spec.declared_mib, "declared"),
                    priority=spec.priority,
                    submitted_at=now,
                )
                waiting[req.key] = _Waiting(spec, req, 0, now)
            due = [w for w in waiting.values() if w.not_before <= now]
            if due:
                view = build_view(
                    now,
                    samples,
                    {s.uuid: self.monitor.window(s.uuid) for s in samples},
                    self._tenants_now(now),
                    self.last_placed,
                    {s.uuid: self.monitor.age(s.uuid, now) for s in samples},
                    10.0,
                )
                plan = self.queue.plan([w.request for w in due], now)
                result = self.placer.schedule(plan.ordered, view, blocking=plan.blocking, protected=plan.protected)
                for decision in result.placed:
                    w = waiting.pop(decision.request_key)
                    act = self._launch(w, decision, view, now, t0)
                    active[w.request.key] = act
                for rkey, decision in result.by_key.items():
                    if decision.outcome is Outcome.NEVER_FITS and rkey in waiting:
                        w = waiting.pop(rkey)
                        self.failed.append(w.spec.name)
                        print(f"[kit] {w.spec.name} can never be placed: {decision.summary}", flush=True)
            if not pending and not waiting and not active:
                break
            if now - t0 > self.timeout_s:
                timed_out = True
                for act in active.values():
                    act.proc.kill()
                    act.proc.wait()
                    self.failed.append(act.spec.name)
                self.failed += [w.spec.name for w in waiting.values()] + [p.name for p in pending]
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

    def _tenants_now(self, now: float) -> dict[str, list[Tenant]]:
        """As CarmaExecutor: after the lock time the monitor's readings include a tenant."""
        return tenants_seen(self.tenants, now, self.placer.settings.lock_s)

    def _launch(self, w: _Waiting, decision: Any, view: Any, now: float, t0: float) -> _Active:
        req = w.request
        tag = f"{w.spec.name}.try{req.try_number}"
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
        spec = w.spec
        log = open(log_path, "wb")  # noqa: SIM115 - the child holds it; closed after the child ends
        try:
            proc = subprocess.Popen(
                [self.python, "-m", "gpukit.train", spec.to_json()],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(GPUKIT_DIR),
            )
        finally:
            log.close()
        co = [t.label for u in decision.gpu_uuids for t in self.tenants.get(u, [])]
        for uuid in decision.gpu_uuids:
            self.tenants.setdefault(uuid, []).append(
                Tenant(req.key, req.label, req.memory.mib, now, exclusive=self.placer.needs_idle(req))
            )
            self.last_placed[uuid] = now
        record = TryRecord(
            task=spec.name,
            try_number=req.try_number,
            key=req.key,
            declared_mib=spec.declared_mib,
            request_mib=req.memory.mib,
            gpu_uuids=list(decision.gpu_uuids),
            gpu_indices=[view.by_uuid[u].index for u in decision.gpu_uuids],
            submitted_s=req.submitted_at - t0,
            started_s=now - t0,
            summary=decision.summary,
            collocated=bool(co),
            co_tenants=co,
            recovery=None,
            log=str(log_path),
        )
        if w.recovery:
            record.message = f"planned by recovery: {w.recovery}"
        self.tries.append(record)
        print(f"[kit] {self.placer.policy.name}: {spec.name} try {req.try_number} {decision.summary}", flush=True)
        return _Active(spec, req, record, proc, result_path, metrics_path, log_path, w.oom_retries)

    def _finish(self, act: _Active, now: float, t0: float) -> _Waiting | None:
        rec = act.record
        rec.ended_s = now - t0
        rec.exit_code = act.proc.returncode
        for uuid in rec.gpu_uuids:
            self.tenants[uuid] = [t for t in self.tenants.get(uuid, []) if t.key != act.request.key]
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
            return None
        failure = classify_failure(result.exc_type, result.message, rec.exit_code)
        rec.outcome = "oom" if failure.is_oom else "failed"
        rec.message = (result.message or "")[:500]
        if not failure.is_oom:
            self.failed.append(act.spec.name)
            print(f"[kit] {act.spec.name} failed ({failure.kind.value}): {rec.message[:200]}", flush=True)
            return None
        plan = plan_recovery(
            act.request,
            failure,
            oom_retries_done=act.oom_retries,
            peak_mib=result.peak_mib,
            crashed_gpus=tuple(rec.gpu_uuids),
            now=now,
            settings=self.recovery,
        )
        if isinstance(plan, GiveUp):
            rec.recovery = plan.reason
            self.failed.append(act.spec.name)
            print(f"[kit] {act.spec.name}: {plan.reason}", flush=True)
            return None
        rec.recovery = plan.reason
        print(f"[kit] {act.spec.name}: {plan.reason}", flush=True)
        nxt = replace(plan.request, submitted_at=now)
        return _Waiting(act.spec, nxt, act.oom_retries + 1, now + self.oom_retry_delay_s, plan.reason)
