"""What a simulation measured: per-task records, per-GPU integrals, and the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(slots=True)
class GpuIntegrals:
    """Time integrals of one GPU's telemetry (value x seconds)."""

    smact: float = 0.0
    smocc: float = 0.0
    drama: float = 0.0
    memory_frac: float = 0.0
    energy_j: float = 0.0
    busy_s: float = 0.0

    def add(
        self, dt: float, smact: float, smocc: float, drama: float, mem_frac: float, power_w: float, busy: bool
    ) -> None:
        if dt <= 0:
            return
        self.smact += smact * dt
        self.smocc += smocc * dt
        self.drama += drama * dt
        self.memory_frac += mem_frac * dt
        self.energy_j += power_w * dt
        if busy:
            self.busy_s += dt


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    job_id: int
    task: str
    gpus: tuple[int, ...]
    start: float
    end: float
    outcome: str  # success | oom
    reason: str = ""  # an OOM's: who was stopped, and why (sim/engine.crash_reason)
    lost_gpu_s: float = 0.0  # an OOM's: GPU-seconds thrown away (since its last checkpoint, or its start)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    job_id: int
    task: str
    gpus: int
    submit_s: float
    first_start_s: float | None
    end_s: float | None
    wait_s: float
    run_s: float
    solo_s: float
    tries: int
    oom_crashes: int
    outcome: str  # success | lost
    resumed_s: float = 0.0  # solo work its last try resumed from (a checkpoint); 0: from the start


@dataclass(frozen=True, slots=True)
class NeverFit:
    """A task the placer found could never run on these GPUs (it ends ``lost`` without a try)."""

    job_id: int
    task: str
    reason: str  # the placer's summary, e.g. "never fits: asks for 8 GPUs but the largest host has 4 ..."


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    estimator: str
    queue: str
    recovery: str
    gpus: str
    tasks: tuple[TaskRecord, ...]
    timeline: tuple[TimelineEntry, ...]
    integrals: tuple[GpuIntegrals, ...]
    makespan_s: float
    oom_crashes: int
    retries: int
    passes: int
    never_fits: tuple[NeverFit, ...] = ()
    victims: int = 0  # OOM crashes of tries that asked for no more than the placer counted (sim/fencing.py)
    # the fence modelled (sim/fencing.SimFence.summary: host, isolation, mechanism, cap_rule, fence)
    fence: dict[str, Any] = field(default_factory=dict)
    checkpoint_every_s: float = 0.0
    crashed_gpu_s: float = 0.0  # GPU-seconds the crashed tries had run: all lost without checkpoints
    lost_gpu_s: float = 0.0  # ... of which thrown away (since each one's last checkpoint)

    def frame(self) -> pd.DataFrame:
        """One row per task."""
        return pd.DataFrame([_asdict(t) for t in self.tasks], columns=list(TaskRecord.__slots__))

    def summary(self) -> dict[str, Any]:
        df = self.frame()
        done = df[df["outcome"] == "success"]
        span = self.makespan_s if self.makespan_s > 0 else 1.0
        n_gpu = max(1, len(self.integrals))
        denom = span * n_gpu
        jct = done["end_s"] - done["submit_s"]
        slow = done["run_s"] / (done["solo_s"] - done["resumed_s"])
        return {
            "policy": self.policy,
            "estimator": self.estimator,
            "queue": self.queue,
            "recovery": self.recovery,
            "gpus": self.gpus,
            "tasks": len(df),
            "completed": len(done),
            "lost": int((df["outcome"] != "success").sum()),
            "oom_crashes": self.oom_crashes,
            "victims": self.victims,
            **self.fence,
            "checkpoint_every_s": self.checkpoint_every_s,
            "crashed_gpu_s": round(self.crashed_gpu_s, 1),
            "lost_gpu_s": round(self.lost_gpu_s, 1),
            "retries": self.retries,
            "makespan_s": round(self.makespan_s, 1),
            "mean_wait_s": round(float(done["wait_s"].mean()), 1) if len(done) else 0.0,
            "p95_wait_s": round(float(done["wait_s"].quantile(0.95)), 1) if len(done) else 0.0,
            "max_wait_s": round(float(done["wait_s"].max()), 1) if len(done) else 0.0,
            "mean_jct_s": round(float(jct.mean()), 1) if len(done) else 0.0,
            "mean_slowdown": round(float(slow.mean()), 3) if len(done) else 0.0,
            "sm_activity_mean": round(sum(i.smact for i in self.integrals) / denom, 4),
            "sm_occupancy_mean": round(sum(i.smocc for i in self.integrals) / denom, 4),
            "dram_activity_mean": round(sum(i.drama for i in self.integrals) / denom, 4),
            "memory_used_mean": round(sum(i.memory_frac for i in self.integrals) / denom, 4),
            "energy_kwh": round(sum(i.energy_j for i in self.integrals) / 3.6e6, 3),
            "scheduling_passes": self.passes,
        }


def _asdict(obj: object) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}  # type: ignore[attr-defined]
