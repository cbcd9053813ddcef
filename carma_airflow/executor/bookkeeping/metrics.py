"""CarmaExecutor's metrics, sent through Airflow's own Stats (StatsD, Datadog or OpenTelemetry).

Airflow chooses and configures the backend from ``[metrics]`` (``statsd_on``, ``otel_on``, ...)
when the executor is built (``BaseExecutor.__init__`` calls ``stats.initialize``); these
functions only name and shape the measurements.  Every name starts with ``carma.`` and the
backend adds ``[metrics] statsd_prefix`` (``airflow.`` by default) in front of it.

Names follow Airflow's rules (ASCII letters, digits, ``_``, ``.``, ``-``; at most 250
characters).  Per-GPU gauges carry the GPU in the name (``carma.gpu.2.tenants``), so plain
StatsD, which has no tags, keeps GPUs apart; the GPU's index, UUID, model and host are also
tags for backends that have them (OpenTelemetry, Datadog, StatsD with InfluxDB tags).  Every
metric is listed in ``docs/metrics.md``.

A metric never raises into the executor: Airflow's backends drop invalid names with a log line
and StatsD is fire-and-forget UDP.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Literal

from airflow.observability import stats

from carma_airflow.core.gpu import GpuHealth
from carma_airflow.core.policies.base import GpuFacts

log = logging.getLogger(__name__)

PREFIX = "carma"

PLACEMENTS = f"{PREFIX}.placements"
SHARED_PLACEMENTS = f"{PREFIX}.shared_placements"
WAITING = f"{PREFIX}.waiting"
RUNNING = f"{PREFIX}.running"
PENDING_WRITES = f"{PREFIX}.store.pending_writes"
PARKED_WRITES = f"{PREFIX}.store.parked_writes"
WAIT_TIME = f"{PREFIX}.wait_time"
OOM = f"{PREFIX}.oom"
NEVER_FITS = f"{PREFIX}.never_fits"
RECOVERY = f"{PREFIX}.recovery"
DECISION_TIME = f"{PREFIX}.decision_time"
GPU = f"{PREFIX}.gpu"
EXECUTOR_ERRORS = f"{PREFIX}.executor_errors"
PEER_LAPSES = f"{PREFIX}.peer_lapses"

RecoveryOutcome = Literal["retried", "gave_up", "recovered"]
RECOVERY_OUTCOMES: tuple[RecoveryOutcome, ...] = ("retried", "gave_up", "recovered")

# per-GPU gauges, published as carma.gpu.<gpu>.<field>
GPU_FIELDS = (
    "memory_used_mib",
    "memory_free_mib",
    "memory_usable_mib",
    "sm_activity",
    "sm_occupancy",
    "dram_activity",
    "tenants",
    "high_risk",
    "health",
)
HEALTH_CODES = {GpuHealth.HEALTHY: 0, GpuHealth.STALE: 1, GpuHealth.QUARANTINED: 2}

# every metric name this module sends, with its StatsD type (the docs test reads this)
ALL_METRICS: dict[str, str] = {
    PLACEMENTS: "c",
    SHARED_PLACEMENTS: "c",
    WAITING: "g",
    RUNNING: "g",
    PENDING_WRITES: "g",
    PARKED_WRITES: "c",
    WAIT_TIME: "ms",
    OOM: "c",
    NEVER_FITS: "c",
    **{f"{RECOVERY}.{outcome}": "c" for outcome in RECOVERY_OUTCOMES},
    DECISION_TIME: "ms",
    EXECUTOR_ERRORS: "c",
    PEER_LAPSES: "c",
    **{f"{GPU}.<gpu>.{name}": "g" for name in GPU_FIELDS},
}


def gpu_key(index: int, uuid: str) -> str:
    """The GPU's part of a metric name: its index; a MIG instance (which shares its parent's
    index) adds a stable suffix from its UUID."""
    if not uuid.startswith("MIG-"):
        return str(index)
    tail = "".join(c if c.isalnum() else "_" for c in uuid.rsplit("-", 1)[-1])[-12:]
    return f"{index}_mig_{tail}"


def _tags(**values: object) -> dict[str, str]:
    return {k: str(v) for k, v in values.items() if v is not None}


def gpu_gauges(facts: Iterable[GpuFacts]) -> None:
    """Per-GPU gauges from one scheduling pass's facts (``Placer.facts(view)``).

    Memory is in MiB: ``memory_used_mib`` and ``memory_free_mib`` as the monitor read them,
    ``memory_usable_mib`` what the placer may still hand out (free less the reserve and the
    reservations of tenants the monitor has not seen yet; never below 0).  Activities are the
    window scores the risk rule reads (0..1, SM activity with the prior of unseen tenants),
    ``high_risk`` is 1 when the paper's rule excludes the GPU from collocation, ``health`` is
    0 healthy, 1 stale telemetry, 2 quarantined.
    """
    for f in facts:
        st = f.state
        base = f"{GPU}.{gpu_key(st.index, st.uuid)}"
        tags = _tags(gpu_index=st.index, gpu_uuid=st.uuid, gpu_model=st.spec.name, host=st.host)
        values: dict[str, float] = {
            "memory_used_mib": st.used_mib,
            "memory_free_mib": st.free_mib,
            "memory_usable_mib": max(0, f.usable_free_mib),
            "sm_activity": round(f.smact, 4),
            "sm_occupancy": round(f.smocc, 4),
            "dram_activity": round(f.drama, 4),
            "tenants": f.tenants,
            "high_risk": 1 if f.high_risk else 0,
            "health": HEALTH_CODES[st.health],
        }
        for name in GPU_FIELDS:
            stats.gauge(f"{base}.{name}", values[name], tags=tags)


def placed(policy: str, shared: bool) -> None:
    """One task placed; ``shared``: on a GPU that already had tenants (collocated)."""
    tags = _tags(policy=policy, shared=str(shared).lower())
    stats.incr(PLACEMENTS, tags=tags)
    if shared:
        stats.incr(SHARED_PLACEMENTS, tags=_tags(policy=policy))


def waiting(count: int) -> None:
    """How many tasks wait in the executor for GPUs now."""
    stats.gauge(WAITING, count)


def running(count: int) -> None:
    """How many GPU tasks run now."""
    stats.gauge(RUNNING, count)


def pending_writes(count: int) -> None:
    """Store writes held by the executor's writer: above zero for long means the store is unreachable."""
    stats.gauge(PENDING_WRITES, count)


def heartbeat(waiting_count: int, running_count: int, pending: int) -> None:
    """The gauges set once a heartbeat: :func:`waiting`, :func:`running` and :func:`pending_writes`."""
    waiting(waiting_count)
    running(running_count)
    pending_writes(pending)


def parked_write(write: str) -> None:
    """The store refused a write for good (a constraint, a value, the schema): it was parked in
    ``parked-writes.jsonl`` under the state folder and the writes behind it went on (writer.py)."""
    stats.incr(PARKED_WRITES, tags=_tags(write=write))


def wait_seconds(seconds: float) -> None:
    """How long a task waited, from hand-over to placement (a timer, sent in milliseconds)."""
    stats.timing(WAIT_TIME, timedelta(seconds=max(0.0, seconds)))


def oom(dag_id: str | None = None, task_id: str | None = None) -> None:
    """A try ended in a CUDA out-of-memory crash."""
    stats.incr(OOM, tags=_tags(dag_id=dag_id, task_id=task_id))


def recovery(outcome: RecoveryOutcome) -> None:
    """What followed an OOM: ``retried`` (a retry was planned on a safer GPU), ``gave_up`` (OOM
    retries spent), ``recovered`` (a try after an OOM succeeded)."""
    if outcome not in RECOVERY_OUTCOMES:
        log.warning("carma metrics: unknown recovery outcome %r (use one of %s)", outcome, RECOVERY_OUTCOMES)
        return
    stats.incr(f"{RECOVERY}.{outcome}")


def never_fits(dag_id: str | None = None, task_id: str | None = None) -> None:
    """A task failed at once because no GPU set of the cluster could ever take it."""
    stats.incr(NEVER_FITS, tags=_tags(dag_id=dag_id, task_id=task_id))


def executor_error(step: str) -> None:
    """A step of the executor failed and was logged; the scheduler ran on (executor.py)."""
    stats.incr(EXECUTOR_ERRORS, tags=_tags(step=step))


def peer_lapse() -> None:
    """This executor's heartbeat in the store lapsed past ``[carma] peer_timeout_seconds`` (a stalled
    scheduler or a store outage): its peers may have taken it for gone meanwhile (peers.py)."""
    stats.incr(PEER_LAPSES)


def decision_time(ms: float) -> None:
    """Time one scheduling pass took (view, queue order, placer), in milliseconds."""
    stats.timing(DECISION_TIME, timedelta(milliseconds=max(0.0, ms)))


__all__ = [
    "ALL_METRICS",
    "RecoveryOutcome",
    "decision_time",
    "executor_error",
    "gpu_gauges",
    "gpu_key",
    "heartbeat",
    "never_fits",
    "oom",
    "parked_write",
    "peer_lapse",
    "pending_writes",
    "placed",
    "recovery",
    "running",
    "wait_seconds",
    "waiting",
]
