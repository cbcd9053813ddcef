"""The executor's parts, built once from its settings at ``start()`` (tests pass fakes).

:func:`build_parts` registers how to close each part it makes on the caller's ``ExitStack``
(runtime.py), so a start that fails half-way closes what it made; the monitor is checked first,
before anything that costs a thread, a process or a connection.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.estimators import MemoryEstimator, make_estimator
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import Policy, make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.floor import set_floor
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.policies.predictive import Predictive
from carma_airflow.core.queueing import Backfill, QueueDiscipline, make_queue
from carma_airflow.core.recovery import RecoverySettings, max_retry_request_mib
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.executor.bookkeeping import StoreWriter
from carma_airflow.launching import Launcher, LauncherProcess

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
    settings: CarmaSettings,
    stack: ExitStack,
    *,
    background_writes: bool,
    close_timeout_s: Callable[[], float],
    monitor: GpuSource | None = None,
    store: Store | None = None,
) -> Parts:
    """Build and start the parts; each one's close goes on ``stack`` as it is made (a monitor the
    caller passes in is stopped too, as at the executor's end; a store it passes in is left open).
    ``close_timeout_s``: how long the writer and the launcher get when they are closed."""
    from carma_airflow.monitor.sampler import Monitor, make_probe
    from carma_airflow.store.store import Store

    state = Path(settings.state_dir)
    (state / "results").mkdir(parents=True, exist_ok=True)
    ledger_path = state / "simulated-gpus.json"
    if monitor is None and settings.dispatch != "celery":
        probe = make_probe(
            settings.gpu_backend,
            settings.simulated_gpus,
            ledger_path,
            host=settings.host,
            nvml_detail_every=settings.nvml_detail_every,
        )
        stack.callback(probe.close)
        local = Monitor(probe, period_s=settings.sample_period)
        local.sample_once()  # fail fast with the probe's own message (no driver, bad spec)
        local.start()
        monitor = local
    if monitor is not None:
        stack.callback(monitor.stop)
    if store is None:
        store = stack.enter_context(Store(settings.store_url))  # its pooled connections go at the close
        store.migrate()
    writer = StoreWriter(  # held and parked writes under the state folder; telemetry retention
        store, background=background_writes, state_dir=state, retention_s=settings.telemetry_retention_s
    )
    stack.callback(lambda: writer.close(timeout_s=close_timeout_s()))
    local_launcher: LauncherProcess | None = None
    launcher: Launcher
    if settings.dispatch != "celery":
        # a fresh interpreter (exec'd, not forked): the threads of this process do not matter
        process = LauncherProcess()
        stack.callback(lambda: process.close(timeout_s=close_timeout_s()))
        launcher = local_launcher = process
    else:
        # GPUs of every host come from their agents through the store; tries go to the chosen
        # host's Celery queue (carma_airflow.distributed)
        from carma_airflow.distributed.dispatch import celery_backend

        launcher, cluster_monitor = celery_backend(settings, store)
        close = getattr(launcher, "close", None)
        if close is not None:  # remote tries: pending dispatch-end writes and revokes
            stack.callback(lambda: close(timeout_s=close_timeout_s()))
        if monitor is None:
            monitor = cluster_monitor
            stack.callback(monitor.stop)
    assert monitor is not None  # this host's, the cluster's, or the caller's
    placer, queue, estimator = placement_parts(settings, _largest_idle_mib(monitor, settings))
    return Parts(
        store=store,
        writer=writer,
        launcher=launcher,
        local_launcher=local_launcher,
        monitor=monitor,
        placer=placer,
        queue=queue,
        estimator=estimator,
        recovery=recovery_settings(settings, _largest_request_mib(monitor, settings)),
        ledger_path=ledger_path,
    )


def placement_settings(settings: CarmaSettings) -> PlacementSettings:
    """The placer's constants from ``[carma]`` (the rest: core/settings.py's defaults)."""
    return PlacementSettings(
        reserve_mib=settings.reserve_mib,
        headroom_mib=settings.headroom_mib,
        floor_mib=settings.floor_mib,
        lock_s=settings.lock_seconds,
    )


def placement_parts(
    settings: CarmaSettings, largest_mib: int | None = None
) -> tuple[Placer, QueueDiscipline, MemoryEstimator]:
    """The placer (its policy with the tenant cap and the floor), the queue and the memory
    estimator that ``[carma]`` configures: what the simulator's defaults must decide alike
    (tests/sim/test_executor_defaults.py); ``largest_mib``: what the largest GPU offers an idle
    try (a learned estimate's margin reaches at most that)."""
    placer = Placer(configured_policy(settings), placement_settings(settings))
    queue = make_queue(settings.queue)
    if isinstance(queue, Backfill):
        queue.starvation_s = settings.starvation_seconds
    return placer, queue, make_estimator(settings.estimator, settings.floor_mib, largest_mib)


def recovery_settings(settings: CarmaSettings, max_request_mib: int | None) -> RecoverySettings:
    """How OOM retries are planned: ``[carma] oom_retries``, the headroom, and what a retry may ask
    at most (``max_request_mib``: the largest GPU less the reserve and the headroom)."""
    return RecoverySettings(
        max_oom_retries=settings.oom_retries, headroom_mib=settings.headroom_mib, max_request_mib=max_request_mib
    )


def configured_policy(settings: CarmaSettings) -> Policy:
    """The ``[carma]`` policy with what its options set: the tenant cap and the floors."""
    policy = make_policy(settings.policy)
    if isinstance(policy, (InterferenceAware, CompletionTime, Predictive)):  # the policies that cap tenants
        policy.max_tenants = settings.max_tenants
    floor = settings.min_gain_value  # validated: set only for a policy with a floor
    if floor is not None:
        set_floor(policy, floor)
    learned_set, learned = settings.learned_floor_value  # validated: set only for completion-time
    if learned_set and isinstance(policy, CompletionTime):
        policy.settings = replace(policy.settings, learned_floor=learned)
    return policy


def _largest_idle_mib(monitor: GpuSource, settings: CarmaSettings) -> int | None:
    """What the largest GPU seen at start offers an idle try (its memory less the reserve); None
    when no GPU is known yet (remote hosts)."""
    totals = [s.memory_total_mib for s in monitor.latest().values() if s.memory_total_mib]
    return max(totals) - settings.reserve_mib if totals else None


def _largest_request_mib(monitor: GpuSource, settings: CarmaSettings) -> int | None:
    """What an OOM retry may ask at most: the largest GPU seen at start less the reserve and the
    headroom, as the simulator bounds it (core/recovery.max_retry_request_mib; a larger request
    would never fit); None when no GPU is known yet (remote hosts)."""
    totals = [s.memory_total_mib for s in monitor.latest().values() if s.memory_total_mib]
    if not totals:
        return None
    return max_retry_request_mib(max(totals), settings.reserve_mib, settings.headroom_mib)


__all__ = ["Parts", "build_parts", "placement_parts", "placement_settings", "recovery_settings"]
