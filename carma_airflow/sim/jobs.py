"""Per job of a trace, what the simulation records (tries, OOMs, waits, outcome), and the result
built from those records and the GPUs' integrals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from carma_airflow.sim.gpus import SimGpu
from carma_airflow.sim.metrics import NeverFit, SimResult, TaskRecord, TimelineEntry
from carma_airflow.sim.workload import Arrival


@dataclass(slots=True)
class JobRecord:
    arrival: Arrival
    tries: int = 0
    ooms: int = 0
    first_start: float | None = None
    waited: float = 0.0
    end: float | None = None
    outcome: str = "pending"
    last_run_s: float = 0.0
    gpus: tuple[int, ...] = ()
    saved_work: float = 0.0  # solo seconds of work its last checkpoint saved (a retry resumes there)
    last_resumed_s: float = 0.0  # the work its last try resumed from


def makespan_of(jobs: Sequence[JobRecord], arrivals: Sequence[Arrival]) -> tuple[float, float]:
    """The trace's start (first submission) and makespan (to the last successful end)."""
    ends = [j.end for j in jobs if j.end is not None and j.outcome == "success"]
    start = min((a.submit_s for a in arrivals), default=0.0)
    return start, (max(ends) - start) if ends else 0.0


def build_result(
    *,
    policy: str,
    estimator: str,
    queue: str,
    recovery: str,
    jobs: Sequence[JobRecord],
    gpus: Sequence[SimGpu],
    timeline: Sequence[TimelineEntry],
    makespan_s: float,
    oom_crashes: int,
    retries: int,
    passes: int,
    never_fits: Sequence[NeverFit],
    victims: int = 0,
    fence: dict[str, object] | None = None,
    checkpoint_every_s: float = 0.0,
    crashed_gpu_s: float = 0.0,
    lost_gpu_s: float = 0.0,
) -> SimResult:
    records = tuple(
        TaskRecord(
            job_id=j.arrival.job_id,
            task=j.arrival.task.name,
            gpus=j.arrival.task.gpus,
            submit_s=j.arrival.submit_s,
            first_start_s=j.first_start,
            end_s=j.end,
            wait_s=j.waited,
            run_s=j.last_run_s,
            solo_s=j.arrival.task.solo_s,
            tries=j.tries,
            oom_crashes=j.ooms,
            resumed_s=j.last_resumed_s,
            outcome="success" if j.outcome == "success" else "lost",
        )
        for j in sorted(jobs, key=lambda j: j.arrival.job_id)
    )
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.spec.name] = counts.get(g.spec.name, 0) + 1
    return SimResult(
        policy=policy,
        estimator=estimator,
        queue=queue,
        recovery=recovery,
        gpus=",".join(f"{n}x{name}" for name, n in counts.items()),
        tasks=records,
        timeline=tuple(timeline),
        integrals=tuple(g.integ for g in gpus),
        makespan_s=makespan_s,
        oom_crashes=oom_crashes,
        victims=victims,
        fence=dict(fence or {}),
        checkpoint_every_s=checkpoint_every_s,
        crashed_gpu_s=crashed_gpu_s,
        lost_gpu_s=lost_gpu_s,
        retries=retries,
        passes=passes,
        never_fits=tuple(never_fits),
    )


__all__ = ["JobRecord", "build_result", "makespan_of"]
