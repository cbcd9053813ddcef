"""The executor's parts, built once from its settings at ``start()`` (tests pass fakes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from carma_airflow.core.estimators import MemoryEstimator, make_estimator
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.queueing import Backfill, QueueDiscipline, make_queue
from carma_airflow.core.recovery import RecoverySettings
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.executor.launch import Launcher, LauncherProcess
from carma_airflow.executor.writer import StoreWriter
from carma_airflow.settings import CarmaSettings

if TYPE_CHECKING:
    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store


@dataclass(slots=True)
class Parts:
    store: Store
    writer: StoreWriter
    launcher: Launcher
    local_launcher: LauncherProcess | None  # this host's launcher process (closed at the end)
    monitor: GpuSource
    placer: Placer
    queue: QueueDiscipline
    estimator: MemoryEstimator
    recovery: RecoverySettings
    ledger_path: Path


def build_parts(
    settings: CarmaSettings, *, background_writes: bool, monitor: GpuSource | None = None, store: Store | None = None
) -> Parts:
    from carma_airflow.monitor.sampler import Monitor, make_probe
    from carma_airflow.store.store import Store

    state = Path(settings.state_dir)
    (state / "results").mkdir(parents=True, exist_ok=True)
    ledger_path = state / "simulated-gpus.json"
    if store is None:
        store = Store(settings.store_url)
        store.migrate()
    writer = StoreWriter(store, background=background_writes)
    local_launcher: LauncherProcess | None = None
    launcher: Launcher
    if settings.dispatch != "celery":
        # a fresh interpreter (exec'd, not forked): the threads of this process do not matter
        local_launcher = LauncherProcess()
        launcher = local_launcher
    else:
        # GPUs of every host come from their agents through the store; tries go to the chosen
        # host's Celery queue (carma_airflow.distributed)
        from carma_airflow.distributed.dispatch import celery_backend

        launcher, cluster_monitor = celery_backend(settings, store)
        monitor = monitor or cluster_monitor
    if monitor is None:
        probe = make_probe(settings.gpu_backend, settings.simulated_gpus, ledger_path, host=settings.host)
        local = Monitor(probe, period_s=settings.sample_period)
        local.sample_once()  # fail fast with the probe's own message (no driver, bad spec)
        local.start()
        monitor = local
    policy = make_policy(settings.policy)
    if isinstance(policy, InterferenceAware):
        policy.max_tenants = settings.max_tenants
    placer = Placer(
        policy,
        PlacementSettings(
            reserve_mib=settings.reserve_mib,
            headroom_mib=settings.headroom_mib,
            floor_mib=settings.floor_mib,
            lock_s=settings.lock_seconds,
        ),
    )
    queue = make_queue(settings.queue)
    if isinstance(queue, Backfill):
        queue.starvation_s = settings.starvation_seconds
    return Parts(
        store=store,
        writer=writer,
        launcher=launcher,
        local_launcher=local_launcher,
        monitor=monitor,
        placer=placer,
        queue=queue,
        estimator=make_estimator(settings.estimator, settings.floor_mib),
        recovery=RecoverySettings(
            max_oom_retries=settings.oom_retries,
            headroom_mib=settings.headroom_mib,
            max_request_mib=_largest_request_mib(monitor, settings),
        ),
        ledger_path=ledger_path,
    )


def _largest_request_mib(monitor: GpuSource, settings: CarmaSettings) -> int | None:
    """What an OOM retry may ask at most: the largest GPU seen at start less the reserve and the
    headroom (a larger request would never fit); None when no GPU is known yet (remote hosts)."""
    totals = [s.memory_total_mib for s in monitor.latest().values() if s.memory_total_mib]
    if not totals:
        return None
    return max(totals) - settings.reserve_mib - settings.headroom_mib


__all__ = ["Parts", "build_parts"]
