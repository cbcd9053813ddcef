"""CarmaExecutor: collocation-aware GPU dispatch for Airflow 3.

Flow per task (see docs): the scheduler hands a workload over -> its ``executor_config`` is
validated and turned into a TaskRequest (memory: declared, else learned from earlier runs, else
the floor; after a CUDA OOM: the recovery planner) -> it waits in the executor's own queue
(counted in ``running`` so parallelism holds) -> each heartbeat the placer decides over the
live GPU view -> a placed task runs in its own process whose environment carries
CUDA_VISIBLE_DEVICES -> when the process ends, the try's result file says success / OOM /
other, the GPUs are released and the store learns.

Waiting longer than ``[scheduler] task_queued_timeout`` is safe: ``revoke_task`` declines for
tasks that wait for a GPU (the scheduler then leaves them queued), and the task's token is
issued anew at launch.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor
from airflow.utils.state import TaskInstanceState

from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.errors import CarmaError, ConfigError
from carma_airflow.core.estimators import TaskMemoryInfo, make_estimator
from carma_airflow.core.gpu import ClusterView, Tenant
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.queueing import Backfill, make_queue
from carma_airflow.core.recovery import (
    Failure,
    FailureKind,
    RecoverySettings,
    RetryPlan,
    advised_memory_gib,
    author_retry_left,
    plan_recovery,
)
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import TaskRequest
from carma_airflow.dagparse.cluster_policy import author_retries_of, refusal_env
from carma_airflow.executor import metrics
from carma_airflow.executor.envcheck import check_task_env
from carma_airflow.executor.launch import KILL_GRACE_S, Ended, Launcher, LauncherProcess, TaskHandle
from carma_airflow.executor.taskenv import gpu_task_env, tenants_seen
from carma_airflow.executor.view import build_view
from carma_airflow.executor.writer import StoreWriter
from carma_airflow.settings import CarmaSettings
from carma_airflow.task_config import GpuTaskConfig, parse_task_config
from carma_airflow.taskrun.killguard import retry_on_kill_env
from carma_airflow.taskrun.outcome import TryResult

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey

    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store


WAIT_RECORD_S = 60.0  # a waiting task's unchanged kind of reason is written at most this often
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def request_key(key: TaskInstanceKey) -> str:
    return f"{key.dag_id}/{key.task_id}/{key.run_id}/{key.map_index}/{key.try_number}"


@dataclass(slots=True)
class _Waiting:
    workload: ExecuteTask
    config: GpuTaskConfig
    request: TaskRequest
    prior_ooms: int = 0
    last_summary: str = ""
    recorded_shape: str = ""  # the reason last written to the store and log, numbers left out
    recorded_at: float = 0.0


@dataclass(slots=True)
class _Active:
    ti: Any  # the workload's TaskInstanceDTO, or the TaskInstance of an adopted try
    request: TaskRequest
    gpu_uuids: tuple[str, ...]
    handle: TaskHandle
    started_at: float
    prior_ooms: int = 0
    fault: str | None = None  # why the executor stopped the try (its GPU failed)


class CarmaExecutor(BaseExecutor):
    """Places GPU tasks on GPUs they can share safely; see the module docstring."""

    is_local = True
    serve_logs = True
    supports_callbacks = False
    background_writes = True  # False: every store write inside the heartbeat (bench/pass_cost.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings: CarmaSettings | None = None
        self.waiting: dict[TaskInstanceKey, _Waiting] = {}
        self.active: dict[TaskInstanceKey, _Active] = {}
        self.bare: dict[TaskInstanceKey, TaskHandle] = {}  # tasks run without GPUs (invalid executor_config)
        # a next try that arrived while the process of its previous try is still ending: it is
        # planned (recovery after an OOM) once that try's outcome and GPUs are known
        self.deferred: dict[TaskInstanceKey, ExecuteTask] = {}
        self.tenants: dict[str, list[Tenant]] = {}
        self.last_placed: dict[str, float] = {}
        self._by_request: dict[str, TaskInstanceKey] = {}
        self.monitor: GpuSource | None = None
        self._host_of: dict[str, str] = {}  # GPU UUID -> its host
        self.store: Store | None = None
        self._samples_at = 0.0
        # tries an earlier executor on this host started whose processes still run (restart)
        self.orphans: dict[str, _Active] = {}
        # how recent tries of each task ended (try, outcome, peak, estimate, GPUs): recovery
        # plans from memory, so it works while the store is unreachable
        self._recent: dict[tuple[str, str, str, int], list[tuple[int, str, int | None, int, tuple[str, ...]]]] = {}
        self.writer: StoreWriter | None = None  # store writes, off the scheduler loop (writer.py)
        self.local_launcher: LauncherProcess | None = None
        self._faulted_since: dict[str, float] = {}
        self._pass_ms: deque[float] = deque(maxlen=256)
        self._snapshot_at = 0.0

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.configure(CarmaSettings.from_airflow())

    def configure(self, settings: CarmaSettings, monitor: GpuSource | None = None, store: Store | None = None) -> None:
        """Read configuration once and build the monitor, store and placer (tests pass fakes)."""
        from carma_airflow.monitor.sampler import Monitor, make_probe
        from carma_airflow.store.store import Store

        self.settings = settings
        state = Path(settings.state_dir)
        (state / "results").mkdir(parents=True, exist_ok=True)
        self.ledger_path = state / "simulated-gpus.json"
        if store is None:
            store = Store(settings.store_url)
            store.migrate()
        self.store = store
        self.writer = StoreWriter(store, background=self.background_writes)
        if settings.dispatch != "celery":
            # a fresh interpreter (exec'd, not forked): the threads of this process do not matter
            self.local_launcher = LauncherProcess()
            self.launcher: Launcher = self.local_launcher
        else:
            # GPUs of every host come from their agents through the store; tries go to the
            # chosen host's Celery queue (carma_airflow.distributed)
            from carma_airflow.distributed.dispatch import celery_backend

            self.launcher, cluster_monitor = celery_backend(settings, store)
            monitor = monitor or cluster_monitor
        if monitor is None:
            probe = make_probe(settings.gpu_backend, settings.simulated_gpus, self.ledger_path, host=settings.host)
            local = Monitor(probe, period_s=settings.sample_period)
            local.sample_once()  # fail fast with the probe's own message (no driver, bad spec)
            local.start()
            monitor = local
        self.monitor = monitor
        policy = make_policy(settings.policy)
        if isinstance(policy, InterferenceAware):
            policy.max_tenants = settings.max_tenants
        self.placer = Placer(
            policy,
            PlacementSettings(
                reserve_mib=settings.reserve_mib,
                headroom_mib=settings.headroom_mib,
                floor_mib=settings.floor_mib,
                lock_s=settings.lock_seconds,
            ),
        )
        self.queue = make_queue(settings.queue)
        if isinstance(self.queue, Backfill):
            self.queue.starvation_s = settings.starvation_seconds
        self.estimator = make_estimator(settings.estimator, settings.floor_mib)
        self.recovery = RecoverySettings(max_oom_retries=settings.oom_retries, headroom_mib=settings.headroom_mib)
        self.log.info(
            "CarmaExecutor started: %s backend, policy %s, queue %s, store %s",
            settings.gpu_backend,
            policy.name,
            self.queue.name,
            store.masked_url,
        )
        self._reconcile()

    def end(self) -> None:
        while self.active or self.bare:
            self.sync()
            time.sleep(0.5)
        self._close()

    def _close(self, timeout_s: float | None = None) -> None:
        if self.local_launcher is not None:
            self.local_launcher.close()
        if self.writer is not None:
            self.writer.close() if timeout_s is None else self.writer.close(timeout_s=timeout_s)
        if self.monitor is not None:
            self.monitor.stop()

    def terminate(self) -> None:
        handles = [a.handle for a in self.active.values()] + list(self.bare.values())
        for handle in handles:
            handle.kill()
        deadline = time.monotonic() + KILL_GRACE_S + 5.0  # polls send SIGKILL after the grace time
        while time.monotonic() < deadline and any(h.poll() is None for h in handles):
            time.sleep(0.2)
        self._close(timeout_s=5.0)

    # -- intake ----------------------------------------------------------------------------
    def _process_workloads(self, workload_items: Any) -> None:
        for workload in workload_items:
            key = workload.key
            self.queued_tasks.pop(key, None)
            if key in self.waiting or key in self.active or key in self.bare or key in self.deferred:
                self.log.warning("Task %s handed over twice; keeping the first", key)
                continue
            if self._previous_try_active(key):
                self.running.add(key)
                self.deferred[key] = workload
                continue
            self.running.add(key)  # waiting tasks count against parallelism too
            self._take(key, workload)
        self._schedule()

    def _take(self, key: TaskInstanceKey, workload: ExecuteTask) -> None:
        try:
            self._accept(workload)
        except ConfigError as exc:
            # Run it without GPUs: in the task process the cluster policy makes it fail with
            # this message in its log; the rest of the DAG is untouched.
            self.log.error("Task %s has an invalid executor_config: %s", key, exc)
            message = " ".join(str(exc).split())[:4000]
            env = {"CUDA_VISIBLE_DEVICES": "", "CARMA_CONFIG_ERROR": message, **self._kill_env(workload.ti, 0)}
            assert self.settings is not None
            self.bare[key] = self._start_process(workload, env, self._result_path(workload), self.settings.host)
        except Exception as exc:  # never the scheduler: this task fails, with the reason
            self.log.exception("Task %s could not be taken", key)
            self._refuse(key, workload, f"CarmaExecutor could not take the task: {exc}")

    def _refuse(self, key: TaskInstanceKey, workload: ExecuteTask, reason: str, prior_ooms: int = 0) -> None:
        """Run the try without GPUs as a process that fails at once with ``reason`` in its own log.

        Failing it here instead (``self.fail``) would leave the Airflow UI with no log for the
        try and let the scheduler retry it by the raised ``max_tries``; in the task process the
        author's retries apply (retry.py) and the reason is where the user looks.
        """
        assert self.settings is not None
        ti = workload.ti
        env = {**refusal_env(ti.dag_id, ti.task_id, reason), **self._kill_env(ti, prior_ooms)}
        try:
            self.bare[key] = self._start_process(workload, env, self._result_path(workload), self.settings.host)
        except Exception:  # not even a process: the scheduler's own failure handling is what is left
            self.log.exception("Task %s: the refusing process could not start", key)
            self.fail(key, info=reason)

    @staticmethod
    def _kill_env(ti: Any, prior_ooms: int) -> dict[str, str]:
        """Whether a try that dies of a signal may be retried: only within the author's retries."""
        author = author_retries_of(getattr(ti, "executor_config", None))
        if author is None:  # parsed without our cluster policy: Airflow's max_tries is the author's
            return {}
        return retry_on_kill_env(author_retry_left(ti.try_number, prior_ooms, author))

    def _previous_try_active(self, key: TaskInstanceKey) -> bool:
        return any(
            (k.dag_id, k.task_id, k.run_id, k.map_index) == (key.dag_id, key.task_id, key.run_id, key.map_index)
            and k.try_number < key.try_number
            for k in self.active
        )

    def _accept_deferred(self) -> None:
        for key, workload in list(self.deferred.items()):
            if self._previous_try_active(key):
                continue
            del self.deferred[key]
            self._take(key, workload)

    def _accept(self, workload: ExecuteTask) -> None:
        assert self.store is not None
        ti = workload.ti
        config = parse_task_config(
            ti.executor_config, where=f"task {ti.task_id!r}: executor_config", mapped=ti.map_index >= 0
        )
        try:
            history, history_of = self._learned(ti)
        except CarmaError as exc:  # the store is down: place from what was declared
            self.log.warning("carma store unreachable (%s): no learned memory for %s", exc, ti.task_id)
            history, history_of = (), None
        need = self.estimator.estimate(
            TaskMemoryInfo(declared_mib=config.memory_for(ti.map_index), history_mib=history, history_of=history_of)
        )
        assert need is not None  # the estimator chain ends with the floor
        request = TaskRequest(
            key=request_key(ti.key),
            label=f"{ti.dag_id}.{ti.task_id}" + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""),
            memory=need,
            gpus=config.gpus,
            exclusive=config.exclusive,
            gpu_model=config.gpu_model,
            priority=config.priority,
            submitted_at=time.time(),
            try_number=ti.try_number,
        )
        request, prior_ooms = self._recover(ti, request)
        self.waiting[ti.key] = _Waiting(workload, config, request, prior_ooms)
        self._by_request[request.key] = ti.key
        self._record(ti, request, outcome="waiting", summary="waiting for a scheduling pass")

    def _learned(self, ti: Any) -> tuple[tuple[int, ...], str | None]:
        """Peaks to learn from: a mapped instance's own runs if it has any, else the whole task's."""
        assert self.store is not None
        if ti.map_index >= 0:
            own = self.store.peaks(ti.dag_id, ti.task_id, map_index=ti.map_index)
            if own:
                return tuple(own), f"map index {ti.map_index}"
        return tuple(self.store.peaks(ti.dag_id, ti.task_id)), None

    def _recover(self, ti: Any, request: TaskRequest) -> tuple[TaskRequest, int]:
        """After CUDA OOM tries of the same run, plan this try with the recovery planner."""
        if ti.try_number <= 1:
            return request, 0
        earlier = [t for t in self._recent.get(_try_family(ti), []) if t[0] < ti.try_number]
        if not earlier:  # tries of an earlier executor: from the store
            try:
                assert self.store is not None
                earlier = [
                    (p.try_number, str(p.outcome), p.peak_mib, p.estimate_mib or 0, tuple(p.gpu_uuids))
                    for p in self.store.latest_for(ti.dag_id, ti.task_id, run_id=ti.run_id)
                    if p.run_id == ti.run_id and p.map_index == ti.map_index and p.try_number < ti.try_number
                ]
            except CarmaError as exc:
                self.log.warning("carma store unreachable (%s): try %s planned afresh", exc, ti.try_number)
        ooms = [t for t in earlier if t[1] == "oom"]
        last = max(earlier, key=lambda t: t[0], default=None)
        if last is None or last[1] != "oom":
            return request, len(ooms)
        last_try, _, peak_mib, estimate_mib, gpus = last
        previous = replace(request, try_number=last_try)
        if estimate_mib:
            previous = replace(previous, memory=replace(request.memory, mib=max(request.memory.mib, estimate_mib)))
        plan = plan_recovery(
            previous,
            Failure(FailureKind.CUDA_OOM, "recorded by CarmaExecutor"),
            oom_retries_done=len(ooms) - 1,
            peak_mib=peak_mib,
            crashed_gpus=gpus,
            now=time.time(),
            settings=self.recovery,
        )
        if isinstance(plan, RetryPlan):
            metrics.recovery("retried")
            return replace(plan.request, key=request.key, try_number=ti.try_number), len(ooms)
        return request, len(ooms)

    # -- scheduling ------------------------------------------------------------------------
    def _view(self, now: float) -> ClusterView:
        """The GPUs as the placer sees them now: samples, windows, health, reservations."""
        assert self.monitor is not None and self.settings is not None
        samples = list(self.monitor.latest().values())
        self._host_of.update((s.uuid, s.host) for s in samples)
        return build_view(
            now,
            samples,
            {s.uuid: self.monitor.window(s.uuid) for s in samples},
            self._tenants_now(now),
            self.last_placed,
            {s.uuid: self.monitor.age(s.uuid) for s in samples},
            self.settings.stale_seconds,
        )

    def _schedule(self) -> None:
        if not self.waiting or self.monitor is None or self.settings is None:
            return
        now = time.time()
        view = self._view(now)
        plan = self.queue.plan([w.request for w in self.waiting.values()], now)
        result = self.placer.schedule(plan.ordered, view, blocking=plan.blocking, protected=plan.protected)
        for decision in result.placed:
            self._launch(self._by_request[decision.request_key], decision)
        for rkey, decision in result.by_key.items():
            ti_key = self._by_request.get(rkey)
            if ti_key is None or ti_key not in self.waiting:
                continue
            waiting = self.waiting[ti_key]
            if decision.outcome is Outcome.NEVER_FITS:
                self.log.error("Task %s can never be placed: %s", ti_key, decision.summary)
                metrics.never_fits(ti_key.dag_id, ti_key.task_id)
                self._record(waiting.workload.ti, waiting.request, outcome="failed", summary=decision.summary)
                del self.waiting[ti_key]
                self._refuse(ti_key, waiting.workload, decision.summary, waiting.prior_ooms)
            elif decision.summary != waiting.last_summary:
                # the live reason (snapshot, UI) changes with every count in it; the store and the
                # log get it when its kind changes, or once a minute: with thousands waiting, one
                # write per task per pass would stall the scheduler loop
                waiting.last_summary = decision.summary
                if not _worth_recording(waiting, decision.summary, now):
                    continue
                self.log.info("Task %s %s", ti_key, decision.summary)
                self._record(
                    waiting.workload.ti,
                    waiting.request,
                    outcome="waiting",
                    summary=decision.summary,
                    reasons=[str(v) for v in decision.rejected[:16]],
                )

    def _tenants_now(self, now: float) -> dict[str, list[Tenant]]:
        assert self.settings is not None
        return tenants_seen(self.tenants, now, self.settings.lock_seconds)

    def _launch(self, ti_key: TaskInstanceKey, decision: Decision) -> None:
        assert self.settings is not None
        waiting = self.waiting.pop(ti_key)
        workload = waiting.workload
        # the token is issued anew in _start_process: a task may have waited longer than it lives
        result_path = self._result_path(workload)
        result_path.unlink(missing_ok=True)
        env = gpu_task_env(
            decision.gpu_uuids,
            result_path=str(result_path),
            placement=decision.summary,
            prior_ooms=waiting.prior_ooms,
            guards=self.settings.framework_guards,
            sim_ledger=str(self.ledger_path) if self.settings.gpu_backend == "simulated" else None,
        )
        env.update(self._kill_env(workload.ti, waiting.prior_ooms))
        host = (
            self._host_of.get(decision.gpu_uuids[0], self.settings.host) if decision.gpu_uuids else self.settings.host
        )
        try:
            env = check_task_env(env)
        except ConfigError as exc:  # a GPU UUID or path that must not reach a process environment
            self.log.error("Task %s not started: %s", ti_key, exc)
            self._record(workload.ti, waiting.request, outcome="failed", summary=f"not started: {exc}")
            self._refuse(ti_key, workload, f"not started: {exc}", waiting.prior_ooms)
            return
        handle = self._start_process(workload, env, result_path, host)
        now = time.time()
        self.active[ti_key] = _Active(workload.ti, waiting.request, decision.gpu_uuids, handle, now, waiting.prior_ooms)
        self._reserve(waiting.request, decision.gpu_uuids, now)
        self.log.info("Task %s %s", ti_key, decision.summary)
        metrics.placed(self.placer.policy.name, decision.collocated)
        metrics.wait_seconds(now - waiting.request.submitted_at)
        self._record(
            workload.ti,
            waiting.request,
            outcome="running",
            summary=decision.summary,
            gpu_uuids=list(decision.gpu_uuids),
            started_at=now,
            reasons=[str(v) for v in decision.chosen + decision.rejected[:8]],
            host=host,
            pid=(handle.pid, handle.pid_start),
        )

    def _reserve(self, request: TaskRequest, gpu_uuids: Sequence[str], now: float) -> None:
        for uuid in gpu_uuids:
            self.tenants.setdefault(uuid, []).append(
                Tenant(
                    key=request.key,
                    label=request.label,
                    reserved_mib=request.memory.mib,
                    placed_at=now,
                    exclusive=self.placer.needs_idle(request),
                )
            )
            self.last_placed[uuid] = now

    def _result_path(self, workload: ExecuteTask) -> Path:
        return self._result_file(str(workload.ti.id))

    def _result_file(self, ti_id: str) -> Path:
        """Where the try of task instance ``ti_id`` leaves its result (outcome.py)."""
        assert self.settings is not None
        return Path(self.settings.state_dir) / "results" / f"{ti_id}.json"

    def _start_process(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        from airflow.executors.workloads import ExecuteTask as _ExecuteTask

        workload.token = _ExecuteTask.generate_token(str(workload.ti.id), self.jwt_generator)
        return self.launcher.launch(workload, env, result_path, host)

    # -- completion ------------------------------------------------------------------------
    def sync(self) -> None:
        if self.writer is not None:
            self.writer.retry()  # inline mode only: the writes an outage held
        self._record_samples()
        for ti_key, handle in list(self.bare.items()):
            ended = handle.poll()
            if ended is not None:
                del self.bare[ti_key]
                state = TaskInstanceState.SUCCESS if ended.exitcode == 0 else TaskInstanceState.FAILED
                self.change_state(ti_key, state)
        self._stop_tries_on_failed_gpus()
        for ti_key, active in list(self.active.items()):
            ended = active.handle.poll()
            if ended is not None:
                self._finish(ti_key, active, ended)
        for rkey, orphan in list(self.orphans.items()):
            ended = orphan.handle.poll()
            if ended is not None:
                del self.orphans[rkey]
                self._release(orphan)
                self._end_try(orphan, ended)
        self._accept_deferred()
        if self.waiting:
            started = time.perf_counter()
            self._schedule()
            took_ms = (time.perf_counter() - started) * 1000
            self._pass_ms.append(took_ms)
            metrics.decision_time(took_ms)
        metrics.waiting(len(self.waiting))
        metrics.running(len(self.active))
        metrics.pending_writes(self._pending_writes)
        self._publish_snapshot()

    def _release(self, active: _Active) -> None:
        for uuid in active.gpu_uuids:
            self.tenants[uuid] = [t for t in self.tenants.get(uuid, []) if t.key != active.request.key]

    def _finish(self, ti_key: TaskInstanceKey, active: _Active, ended: Ended) -> None:
        del self.active[ti_key]
        self._release(active)
        self._end_try(active, ended)
        self.change_state(ti_key, TaskInstanceState.SUCCESS if _exit_ok(ended) else TaskInstanceState.FAILED)

    def _end_try(self, active: _Active, ended: Ended) -> None:
        """Record how a try ended: outcome, peak, OOM event, learned memory, the final word."""
        assert self.settings is not None
        result = ended.result
        exitcode = ended.exitcode
        ti = active.ti
        now = time.time()
        if result is None:
            kind = "killed" if exitcode in (-9, 137) else "no result"
            result = TryResult(
                state="failed",
                failure_kind="killed" if kind == "killed" else "other",
                message=ended.lost or f"task process ended with exit code {exitcode} ({kind})",
            )
        outcome = "success" if result.state == "success" else ("oom" if result.is_oom else "failed")
        summary = None
        if active.fault:
            summary = f"stopped: {active.fault}; the retry goes to a healthy GPU"
        elif outcome == "oom":
            summary = self._oom_summary(active, result)
        elif outcome == "failed":
            summary = f"failed: {result.failure_kind or 'other'}: {(result.message or '')[:300]}"
        key = active.request.key
        self._write("mark_ended", key, now, outcome, result.peak_mib, summary)
        self._recent[_try_family(ti)] = [
            *self._recent.get(_try_family(ti), [])[-7:],
            (ti.try_number, outcome, result.peak_mib, active.request.memory.mib, active.gpu_uuids),
        ]
        if result.is_oom:
            from carma_airflow.store.records import OomRecord

            self._write(
                "record_oom",
                OomRecord(
                    placement_key=key,
                    dag_id=ti.dag_id,
                    task_id=ti.task_id,
                    try_number=ti.try_number,
                    gpu_uuid=",".join(active.gpu_uuids),
                    peak_mib=result.peak_mib,
                    message=(result.message or "")[:2000],
                    at=_utc(now),
                ),
            )
            self.log.warning("Task %s %s", active.request.label, summary)
            metrics.oom(ti.dag_id, ti.task_id)
            if active.prior_ooms + 1 > self.settings.oom_retries:
                metrics.recovery("gave_up")
        elif outcome == "success":
            if result.peak_mib:
                self._write("add_peak", ti.dag_id, ti.task_id, result.peak_mib, _utc(now), ti.run_id, ti.map_index)
            if active.prior_ooms:
                metrics.recovery("recovered")

    def _oom_summary(self, active: _Active, result: TryResult) -> str:
        """What an OOM try says; on the last allowed OOM try, what to declare instead."""
        assert self.settings is not None
        reached = result.peak_mib or active.request.memory.mib
        where = ",".join(active.gpu_uuids)
        if active.prior_ooms + 1 <= self.settings.oom_retries:
            return f"CUDA OOM at {reached} MiB on {where}; retried on a GPU with more free memory"
        suggest = advised_memory_gib(reached, self.recovery)
        return (
            f"CUDA OOM on {active.prior_ooms + 1} tries, the last at {reached} MiB on {where}; no more OOM retries. "
            f"Declare executor_config={{'carma': {{'memory': '{suggest}GiB'}}}} (or exclusive=True, or a larger "
            f"gpu_model) for this task"
        )

    # -- GPU faults ------------------------------------------------------------------------
    def _stop_tries_on_failed_gpus(self) -> None:
        """A GPU NVML reports failed for ``fault_kill_seconds``: stop the tries that use it.

        Usually such a try fails on its own first (CUDA reports the lost device); this ends one
        that hangs instead, so its retry can go to a healthy GPU.
        """
        if self.monitor is None or self.settings is None:
            return
        now = time.time()
        failed: dict[str, str] = {}
        for sample in self.monitor.latest().values():
            if sample.error:
                since = self._faulted_since.setdefault(sample.uuid, now)
                if now - since >= self.settings.fault_kill_seconds:
                    failed[sample.uuid] = sample.error
            else:
                self._faulted_since.pop(sample.uuid, None)
        for active in self.active.values():
            hit = next((u for u in active.gpu_uuids if u in failed), None)
            if hit is not None and active.fault is None:
                active.fault = f"GPU {hit} failed ({failed[hit]})"
                self.log.error("Task %s: %s; stopping it", active.request.label, active.fault)
                active.handle.kill()

    # -- restart: adoption and reconciliation -----------------------------------------------
    def _reconcile(self) -> None:
        """After a restart: tries an earlier executor on this host left behind in the store.

        A try whose process still runs keeps its GPUs reserved (until the scheduler hands it
        over through ``try_adopt_task_instances``, or until it ends); one whose process is gone
        is ended from its result file; one that never started is closed (the scheduler queues
        its task again).
        """
        assert self.store is not None and self.settings is not None

        try:
            left = self.store.running()
        except CarmaError:
            self.log.exception("carma store unreachable at start: no reconciliation of earlier tries")
            return
        now = time.time()
        for rec in left:
            handle = self._reattach(rec) if rec.outcome == "running" else None
            if handle is None:
                self._write(
                    "mark_ended", rec.key, now, "failed", None, "not running when the executor restarted; requeued"
                )
                continue
            orphan = _Active(
                ti=_StoredTi(rec.dag_id, rec.task_id, rec.run_id, rec.map_index, rec.try_number),
                request=self._request_of(rec),
                gpu_uuids=tuple(rec.gpu_uuids),
                handle=handle,
                started_at=rec.started_at.timestamp() if rec.started_at else now,
            )
            ended = handle.poll()
            if ended is not None:
                self._end_try(orphan, ended)
                continue
            self.orphans[rec.key] = orphan
            self._reserve(orphan.request, orphan.gpu_uuids, orphan.started_at)
            self.log.info("Try %s on %s outlived the previous executor; its GPUs stay reserved", rec.key, rec.host)

    def _reattach(self, rec: Any) -> TaskHandle | None:
        """A handle on a try an earlier executor started: its process here, or its dispatch elsewhere."""
        assert self.settings is not None
        from carma_airflow.executor.launch import PidHandle

        if rec.host in (self.settings.host, None) and rec.pid is not None and rec.ti_id is not None:
            return PidHandle(rec.pid, rec.pid_start, self._result_file(rec.ti_id))
        reattach = getattr(self.launcher, "reattach", None)
        return reattach(rec) if reattach is not None else None

    def _request_of(self, rec: Any) -> TaskRequest:
        from carma_airflow.core.task import MemoryNeed

        return TaskRequest(
            key=rec.key,
            label=rec.label or f"{rec.dag_id}.{rec.task_id}",
            memory=MemoryNeed(rec.estimate_mib or 0, rec.estimate_source or "store"),
            gpus=max(1, len(rec.gpu_uuids)),
            submitted_at=rec.decided_at.timestamp(),
            try_number=rec.try_number,
        )

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Take over tries of a dead scheduler whose processes still run here; the rest are reset."""
        not_adopted = []
        for ti in tis:
            orphan = self.orphans.pop(request_key(ti.key), None)
            if orphan is None or orphan.handle.poll() is not None:
                if orphan is not None:  # ended meanwhile: the next sync would have closed it
                    self.orphans[orphan.request.key] = orphan
                not_adopted.append(ti)
                continue
            orphan.ti = ti
            self.active[ti.key] = orphan
            self._by_request[orphan.request.key] = ti.key
            self.running.add(ti.key)
            self.log.info("Adopted %s (pid %s) on %s", ti.key, orphan.handle.pid, ",".join(orphan.gpu_uuids))
        return not_adopted

    # -- store -----------------------------------------------------------------------------
    @property
    def _pending_writes(self) -> int:
        return self.writer.pending if self.writer is not None else 0

    def _write(self, method: str, *args: Any) -> None:
        """A store write, made in order by the writer (held while the store is unreachable)."""
        assert self.writer is not None
        self.writer.put(method, *args)

    def _record_samples(self, every_s: float = 30.0) -> None:
        """Keep a downsampled history of GPU telemetry (one row per GPU per ``every_s``)."""
        if self.monitor is None or self.store is None or time.time() - self._samples_at < every_s:
            return
        from carma_airflow.store.records import SampleRecord

        self._samples_at = time.time()
        records = [
            SampleRecord(
                host=s.host,
                gpu_uuid=s.uuid,
                gpu_index=s.index,
                name=s.name,
                at=_utc(s.at),
                memory_total_mib=s.memory_total_mib,
                memory_used_mib=s.memory_used_mib,
                smact=s.smact,
                smocc=s.smocc,
                drama=s.drama,
                power_w=s.power_w,
                energy_j=s.energy_j,
                error=s.error,
            )
            for s in self.monitor.latest().values()
        ]
        try:
            self.store.record_samples(records, min_interval_s=every_s)
        except CarmaError as exc:  # telemetry history may have gaps; nothing is owed to anyone
            self.log.warning("carma store: GPU samples not recorded (%s)", exc)

    def _publish_snapshot(self) -> None:
        """The live view for the UI page: GPUs, tenants, waiting tasks with their reasons."""
        if self.store is None or self.settings is None or self.monitor is None:
            return
        now = time.time()
        if now - self._snapshot_at < self.settings.snapshot_period:
            return
        self._snapshot_at = now
        from carma_airflow.executor.snapshot import build_snapshot

        view = self._view(now)
        metrics.gpu_gauges(self.placer.facts(view))
        body = build_snapshot(
            now=now,
            settings=self.settings,
            policy=self.placer.policy.name,
            queue=self.queue.name,
            view=view,
            waiting=[(w.request, w.last_summary) for w in self.waiting.values()],
            running=len(self.active),
            pass_ms=list(self._pass_ms),
            pending_writes=self._pending_writes,
            errors={s.uuid: s.error for s in self.monitor.latest().values() if s.error},
        )
        try:
            self.store.put_snapshot(f"executor:{self.settings.host}", now, body)
        except CarmaError as exc:
            self.log.debug("carma store: snapshot not written (%s)", exc)

    def _record(
        self,
        ti: Any,
        request: TaskRequest,
        *,
        outcome: str,
        summary: str,
        gpu_uuids: list[str] | None = None,
        started_at: float | None = None,
        reasons: list[str] | None = None,
        host: str | None = None,
        pid: tuple[int | None, int | None] = (None, None),
    ) -> None:
        assert self.settings is not None
        from carma_airflow.store.records import PlacementRecord, TryOutcome

        record = PlacementRecord(
            key=request.key,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
            try_number=ti.try_number,
            label=request.label,
            decided_at=_utc(request.submitted_at),  # when the executor took the try
            started_at=_utc(started_at) if started_at else None,
            outcome=TryOutcome(outcome),
            gpu_uuids=tuple(gpu_uuids or ()),
            host=host or self.settings.host,
            estimate_mib=request.memory.mib,
            estimate_source=request.memory.source,
            summary=summary,
            reasons=tuple(reasons or ()),
            policy=self.placer.policy.name,
            pid=pid[0],
            pid_start=pid[1],
            ti_id=str(ti.id) if getattr(ti, "id", None) else None,
        )
        self._write("upsert_placement", record)

    # -- scheduler contract ----------------------------------------------------------------
    def revoke_task(self, *, ti: TaskInstance) -> None:
        if ti.key in self.waiting or ti.key in self.active or ti.key in self.bare or ti.key in self.deferred:
            # Waiting for a GPU is not being stuck, and a task just launched is still "queued"
            # until its process reports: keep it (the scheduler skips executors that decline).
            # A waiting task's token is issued anew at launch.
            raise NotImplementedError("CarmaExecutor keeps tasks that wait for a GPU or are starting")
        self.queued_tasks.pop(ti.key, None)
        self.running.discard(ti.key)

    @staticmethod
    def get_cli_commands() -> list[Any]:
        from carma_airflow.executor.cli import carma_cli_commands

        return carma_cli_commands()


@dataclass(frozen=True, slots=True)
class _StoredTi:
    """The identity of a try known only from the store (an orphan not handed over yet)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    id: None = None


def _worth_recording(waiting: _Waiting, summary: str, now: float) -> bool:
    """Whether a waiting task's new reason goes to the store and log: its kind changed (the
    headline, numbers left out: which GPUs said no, and why, changes with every placement on a
    busy cluster), or the last write is ``WAIT_RECORD_S`` old.  Remembers the write when it does."""
    shape = _NUMBERS.sub("#", summary.split(" (", 1)[0])
    if shape == waiting.recorded_shape and now - waiting.recorded_at < WAIT_RECORD_S:
        return False
    waiting.recorded_shape, waiting.recorded_at = shape, now
    return True


def _try_family(ti: Any) -> tuple[str, str, str, int]:
    return (ti.dag_id, ti.task_id, ti.run_id, ti.map_index)


def _exit_ok(ended: Ended) -> bool:
    """What the scheduler is told: the process's exit code, or, unknown, what the try reported."""
    if ended.exitcode is not None:
        return ended.exitcode == 0
    return ended.result is not None and ended.result.state == "success"


def _utc(ts: float) -> Any:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


__all__ = ["CarmaExecutor"]
