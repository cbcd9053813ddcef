"""CarmaExecutor: collocation-aware GPU dispatch for Airflow 3.

Flow per try (see docs): the scheduler hands a workload over -> its ``executor_config`` is
validated and turned into a TaskRequest (memory: declared, else learned from earlier runs, else
the floor; after a CUDA OOM: the recovery planner) -> it waits in the executor's own queue
(counted in ``running`` so parallelism holds) -> each heartbeat the placer decides over the
live GPU view -> a placed try runs in its own process, started by the launcher process, whose
environment carries CUDA_VISIBLE_DEVICES -> when the process ends, the try's result file says
success / OOM / other, the GPUs are released and the store learns.

Each try is one :class:`~carma_airflow.executor.tries.Try` with a state machine; the heartbeat
does no store or network I/O (learned memory is held in memory, store writes go through the
writer thread, remote tries are fetched in bulk by their launcher).

Waiting longer than ``[scheduler] task_queued_timeout`` is safe: ``revoke_task`` declines for
tasks that wait for a GPU (the scheduler then leaves them queued), and the task's token is
issued anew at launch.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor
from airflow.utils.state import TaskInstanceState

from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.decision import Decision
from carma_airflow.core.errors import CarmaError, ConfigError
from carma_airflow.core.gpu import ClusterView, GpuState, Tenant
from carma_airflow.core.recovery import author_retry_left
from carma_airflow.dagparse.cluster_policy import author_retries_of, refusal_env
from carma_airflow.executor import metrics
from carma_airflow.executor.bookkeeping import placement_record, sample_records
from carma_airflow.executor.ending import conclude, end_writes
from carma_airflow.executor.envcheck import check_task_env
from carma_airflow.executor.faults import FaultWatch
from carma_airflow.executor.intake import family_of, first_request, recovered
from carma_airflow.executor.launch import KILL_GRACE_S, Ended, Launcher, LauncherError, LauncherProcess, TaskHandle
from carma_airflow.executor.learned import EndedTry, Learned
from carma_airflow.executor.parts import build_parts
from carma_airflow.executor.restart import orphan_of, reattach, remember_tries
from carma_airflow.executor.snapshot import build_snapshot
from carma_airflow.executor.taskenv import gpu_task_env
from carma_airflow.executor.tries import Try, TryBook, TryState
from carma_airflow.executor.view import build_view
from carma_airflow.executor.writer import StoreWriter
from carma_airflow.executor.writes import PutSnapshot, RecordSamples, StoreWrite
from carma_airflow.keys import request_key
from carma_airflow.settings import CarmaSettings
from carma_airflow.store.records import TryOutcome
from carma_airflow.task_config import parse_task_config
from carma_airflow.taskrun.killguard import retry_on_kill_env

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey

    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store


WAIT_RECORD_S = 60.0  # a waiting task's unchanged kind of reason is written at most this often
SAMPLES_EVERY_S = 30.0  # one row of GPU telemetry history per GPU this often
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


class CarmaExecutor(BaseExecutor):
    """Places GPU tasks on GPUs they can share safely; see the module docstring."""

    is_local = True
    serve_logs = True
    supports_callbacks = False
    background_writes = True  # False: every store write inside the heartbeat (bench/pass_cost.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings: CarmaSettings | None = None
        self.tries = TryBook()
        self.learned = Learned()
        self._by_request: dict[str, TaskInstanceKey] = {}
        self.monitor: GpuSource | None = None
        self._host_of: dict[str, str] = {}  # GPU UUID -> its host
        self.store: Store | None = None
        self.writer: StoreWriter | None = None  # store writes, off the scheduler loop (writer.py)
        self.local_launcher: LauncherProcess | None = None
        self.launcher: Launcher | None = None
        self._samples_at = 0.0
        self._pass_ms: deque[float] = deque(maxlen=256)
        self._snapshot_at = 0.0

    # -- what tests and the UI read: the tries by state -------------------------------------
    @property
    def waiting(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.WAITING)

    @property
    def active(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.RUNNING)

    @property
    def bare(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.REFUSED)

    @property
    def deferred(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.DEFERRED)

    @property
    def orphans(self) -> Mapping[str, Try]:
        return self.tries.in_state(TryState.ORPHAN)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.configure(CarmaSettings.from_airflow())

    def configure(self, settings: CarmaSettings, monitor: GpuSource | None = None, store: Store | None = None) -> None:
        """Read configuration once and build the monitor, store and placer (tests pass fakes)."""
        self.settings = settings
        parts = build_parts(settings, background_writes=self.background_writes, monitor=monitor, store=store)
        self.store, self.writer, self.launcher, self.local_launcher = (
            parts.store,
            parts.writer,
            parts.launcher,
            parts.local_launcher,
        )
        self.monitor, self.placer, self.queue, self.estimator = (
            parts.monitor,
            parts.placer,
            parts.queue,
            parts.estimator,
        )
        self.recovery, self.ledger_path = parts.recovery, parts.ledger_path
        self.faults = FaultWatch(settings.fault_kill_seconds)
        self.cycle = SchedulingCycle(self.placer, self.queue, recovery=self.recovery)
        self.log.info(
            "CarmaExecutor started: %s backend, policy %s, queue %s, store %s",
            settings.gpu_backend,
            self.placer.policy.name,
            self.queue.name,
            parts.store.masked_url,
        )
        self._load_learned()
        self._reconcile()

    def end(self) -> None:
        while self.active or self.bare:
            self.sync()
            time.sleep(0.5)
        self._close()

    def terminate(self) -> None:
        handles = [t.handle for t in (*self.active.values(), *self.bare.values()) if t.handle is not None]
        for handle in handles:
            handle.kill()
        deadline = time.monotonic() + KILL_GRACE_S + 5.0  # polls send SIGKILL after the grace time
        while time.monotonic() < deadline and any(h.poll() is None for h in handles):
            time.sleep(0.2)
        self._close(timeout_s=5.0)

    def _close(self, timeout_s: float = 10.0) -> None:
        if self.local_launcher is not None:
            self.local_launcher.close()
        if self.writer is not None:
            self.writer.close(timeout_s=timeout_s)
        if self.monitor is not None:
            self.monitor.stop()

    def _load_learned(self) -> None:
        """What earlier runs taught, read once here so that intake never reads the store."""
        assert self.store is not None
        try:
            for dag_id, task_id, map_index, peak in self.store.recent_peaks():
                self.learned.add_peak(dag_id, task_id, map_index, peak)
            remember_tries(self.learned, self.store.placements(limit=5000))
        except CarmaError as exc:  # the store is down: place from what is declared
            self.log.warning("carma store unreachable at start (%s): no learned memory until it is back", exc)

    # -- intake ----------------------------------------------------------------------------
    def _process_workloads(self, workload_items: Any) -> None:
        for workload in workload_items:
            key = workload.key
            self.queued_tasks.pop(key, None)
            if key in self.tries:
                self.log.warning("Task %s handed over twice; keeping the first", key)
                continue
            self.running.add(key)  # waiting tasks count against parallelism too
            attempt = self.tries.add(Try(key, request_key(key), workload.ti, TryState.DEFERRED, workload))
            if not self._previous_try_active(key):
                self._take(attempt)
        self._schedule()

    def _take(self, attempt: Try) -> None:
        """A DEFERRED try whose previous try has ended: plan it (WAITING), or refuse it."""
        ti = attempt.ti
        try:
            config = parse_task_config(
                ti.executor_config, where=f"task {ti.task_id!r}: executor_config", mapped=ti.map_index >= 0
            )
        except ConfigError as exc:
            # Run it without GPUs: in the task process the cluster policy makes it fail with
            # this message in its log; the rest of the DAG is untouched.
            self.log.error("Task %s has an invalid executor_config: %s", attempt.key, exc)
            message = " ".join(str(exc).split())[:4000]
            self._start_refused(attempt, {"CUDA_VISIBLE_DEVICES": "", "CARMA_CONFIG_ERROR": message}, message)
            return
        try:
            now = time.time()
            request = first_request(ti, config, self.estimator, self.learned, now)
            request, attempt.prior_ooms, replanned = recovered(ti, request, self.learned, self.cycle.plan_retry, now)
        except Exception as exc:  # never the scheduler: this task fails, with the reason
            self.log.exception("Task %s could not be taken", attempt.key)
            self._refuse(attempt, f"CarmaExecutor could not take the task: {exc}")
            return
        if replanned:
            metrics.recovery("retried")
        attempt.config, attempt.request = config, request
        self.tries.move(attempt, TryState.WAITING)
        self.cycle.submit(request, now, prior_ooms=attempt.prior_ooms)
        self._by_request[request.key] = attempt.key
        self._record(attempt, outcome=TryOutcome.WAITING, summary="waiting for a scheduling pass")

    def _refuse(self, attempt: Try, reason: str) -> None:
        """Run the try without GPUs as a process that fails at once with ``reason`` in its own log.

        Failing it here instead (``self.fail``) would leave the Airflow UI with no log for the
        try and let the scheduler retry it by the raised ``max_tries``; in the task process the
        author's retries apply (retry.py) and the reason is where the user looks.
        """
        self._start_refused(attempt, refusal_env(attempt.ti.dag_id, attempt.ti.task_id, reason), reason)

    def _start_refused(self, attempt: Try, env: dict[str, str], reason: str) -> None:
        assert self.settings is not None
        env = {**env, **self._kill_env(attempt.ti, attempt.prior_ooms)}
        self.tries.move(attempt, TryState.REFUSED)
        try:
            attempt.handle = self._start_process(attempt.workload, env, self._result_file(attempt), self.settings.host)
        except Exception:  # not even a process: the scheduler's own failure handling is what is left
            self.log.exception("Task %s: the refusing process could not start", attempt.key)
            self.tries.move(attempt, TryState.ENDED)
            self.fail(attempt.key, info=reason)

    @staticmethod
    def _kill_env(ti: Any, prior_ooms: int) -> dict[str, str]:
        """Whether a try that dies of a signal may be retried: only within the author's retries."""
        author = author_retries_of(getattr(ti, "executor_config", None))
        if author is None:  # parsed without our cluster policy: Airflow's max_tries is the author's
            return {}
        return retry_on_kill_env(author_retry_left(ti.try_number, prior_ooms, author))

    def _previous_try_active(self, key: TaskInstanceKey) -> bool:
        family = (key.dag_id, key.task_id, key.run_id, key.map_index)
        return any(
            family_of(t.ti) == family and t.ti.try_number < key.try_number
            for t in (*self.active.values(), *self.orphans.values())
        )

    def _take_deferred(self) -> None:
        for attempt in list(self.deferred.values()):
            if not self._previous_try_active(attempt.key):
                self._take(attempt)

    # -- scheduling: one pass of the core cycle (core/cycle.py) ------------------------------
    def _gpus(self, now: float) -> tuple[GpuState, ...]:
        """The GPUs as the monitor sees them now (the cycle lays the reservations over them)."""
        assert self.monitor is not None and self.settings is not None
        samples = list(self.monitor.latest().values())
        self._host_of.update((s.uuid, s.host) for s in samples)
        windows = {s.uuid: self.monitor.window(s.uuid) for s in samples}
        ages = {s.uuid: self.monitor.age(s.uuid) for s in samples}
        return build_view(now, samples, windows, {}, {}, ages, self.settings.stale_seconds).gpus

    def _view(self, now: float) -> ClusterView:
        return self.cycle.view(now, self._gpus(now))

    @property
    def tenants(self) -> dict[str, list[Tenant]]:
        """Each GPU's tenants as the placer counts them now (the cycle's reservations)."""
        now = time.time()
        uuids = set(self._host_of) | {u for r in self.cycle.reservations for u in r.gpu_uuids}
        return {u: list(self.cycle.reservations.tenants_on(u, now)) for u in uuids}

    def _schedule(self) -> None:
        if not self.waiting or self.monitor is None:
            return
        now = time.time()
        result = self.cycle.run(now, self._gpus(now))
        for placed in result.placed:
            self._launch(self.tries.get(self._by_request[placed.request.key]), placed.decision)
        for never in result.never_fits:
            attempt = self.tries.get(self._by_request[never.request.key])
            assert attempt is not None
            self.log.error("Task %s can never be placed: %s", attempt.key, never.decision.summary)
            metrics.never_fits(attempt.ti.dag_id, attempt.ti.task_id)
            self._record(attempt, outcome=TryOutcome.FAILED, summary=never.decision.summary)
            self._refuse(attempt, never.decision.summary)
        for rkey, decision in result.waiting.items():
            attempt = self.tries.get(self._by_request.get(rkey))
            if attempt is None or decision.summary == attempt.last_summary:
                continue
            # the live reason (snapshot, UI) changes with every count in it; the store and the log
            # get it when its kind changes, or once a minute: with thousands waiting, one write per
            # task per pass would stall the scheduler loop
            attempt.last_summary = decision.summary
            if _worth_recording(attempt, decision.summary, now):
                self.log.info("Task %s %s", attempt.key, decision.summary)
                reasons = [str(v) for v in decision.rejected[:16]]
                self._record(attempt, outcome=TryOutcome.WAITING, summary=decision.summary, reasons=reasons)

    def _launch(self, attempt: Try | None, decision: Decision) -> None:
        """Start a try the pass placed (its GPUs are reserved); if it cannot start, free them."""
        assert self.settings is not None and attempt is not None and attempt.request is not None
        result_path = self._result_file(attempt)
        result_path.unlink(missing_ok=True)
        env = gpu_task_env(
            decision.gpu_uuids,
            result_path=str(result_path),
            placement=decision.summary,
            prior_ooms=attempt.prior_ooms,
            guards=self.settings.framework_guards,
            sim_ledger=str(self.ledger_path) if self.settings.gpu_backend == "simulated" else None,
        )
        env.update(self._kill_env(attempt.ti, attempt.prior_ooms))
        first = decision.gpu_uuids[0] if decision.gpu_uuids else None
        host = self._host_of.get(first, self.settings.host) if first else self.settings.host
        try:
            env = check_task_env(env)
        except ConfigError as exc:  # a GPU UUID or path that must not reach a process environment
            self.log.error("Task %s not started: %s", attempt.key, exc)
            self.cycle.release(attempt.rkey)
            self._record(attempt, outcome=TryOutcome.FAILED, summary=f"not started: {exc}")
            self._refuse(attempt, f"not started: {exc}")
            return
        try:  # the token is issued anew in _start_process: a try may have waited longer than it lives
            handle = self._start_process(attempt.workload, env, result_path, host)
        except LauncherError as exc:  # its GPUs go back; it waits for the next pass
            self.log.error("Task %s not started, tried again at the next pass: %s", attempt.key, exc)
            self.cycle.release(attempt.rkey)
            self.cycle.submit(attempt.request, time.time(), prior_ooms=attempt.prior_ooms)
            return
        now = time.time()
        attempt.handle, attempt.gpu_uuids, attempt.started_at = handle, decision.gpu_uuids, now
        self.tries.move(attempt, TryState.RUNNING)
        self.log.info("Task %s %s", attempt.key, decision.summary)
        metrics.placed(self.placer.policy.name, decision.collocated)
        metrics.wait_seconds(now - attempt.request.submitted_at)
        reasons = [str(v) for v in decision.chosen + decision.rejected[:8]]
        self._record(
            attempt, outcome=TryOutcome.RUNNING, summary=decision.summary, started_at=now, reasons=reasons, host=host
        )

    def _result_file(self, attempt: Try | str) -> Path:
        """Where the try of a task instance leaves its result (taskrun/outcome.py)."""
        assert self.settings is not None
        ti_id = attempt if isinstance(attempt, str) else str(attempt.ti.id)
        return Path(self.settings.state_dir) / "results" / f"{ti_id}.json"

    def _start_process(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        from airflow.executors.workloads import ExecuteTask as _ExecuteTask

        workload.token = _ExecuteTask.generate_token(str(workload.ti.id), self.jwt_generator)
        assert self.launcher is not None
        return self.launcher.launch(workload, env, result_path, host)

    # -- completion ------------------------------------------------------------------------
    def sync(self) -> None:
        if self.writer is not None:
            self.writer.retry()  # inline mode only: the writes an outage held
        refresh = getattr(self.launcher, "refresh", None)
        if refresh is not None:
            refresh()  # remote tries: their states in one round trip (or from a fetcher thread)
        self._record_samples()
        for attempt in list(self.bare.values()):
            ended = attempt.handle.poll() if attempt.handle is not None else Ended(1, None)
            if ended is not None:
                self.tries.move(attempt, TryState.ENDED)
                self.change_state(
                    attempt.key, TaskInstanceState.SUCCESS if ended.exitcode == 0 else TaskInstanceState.FAILED
                )
        self._stop_tries_on_failed_gpus()
        for attempt in list(self.tries.holding_gpus()):
            ended = attempt.handle.poll() if attempt.handle is not None else None
            if ended is not None:
                self._finish(attempt, ended)
        self._take_deferred()
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

    def _finish(self, attempt: Try, ended: Ended) -> None:
        """Record how a try ended: outcome, peak, OOM event, learned memory; tell the scheduler."""
        adopted = attempt.state is TryState.RUNNING
        self.tries.move(attempt, TryState.ENDED)
        self.cycle.release(attempt.rkey)
        now = time.time()
        end = conclude(attempt, ended, self.recovery)
        for write in end_writes(attempt, end, now):
            self._write(write)
        ti = attempt.ti
        estimate = attempt.request.memory.mib if attempt.request else 0
        self.learned.add_try(
            family_of(ti), EndedTry(ti.try_number, end.outcome.value, end.result.peak_mib, estimate, attempt.gpu_uuids)
        )
        if end.outcome is TryOutcome.OOM:
            self.log.warning("Task %s %s", attempt.request.label if attempt.request else attempt.rkey, end.summary)
            metrics.oom(ti.dag_id, ti.task_id)
            if end.gave_up:
                metrics.recovery("gave_up")
        elif end.outcome is TryOutcome.SUCCESS:
            if end.result.peak_mib:
                self.learned.add_peak(ti.dag_id, ti.task_id, ti.map_index, end.result.peak_mib)
            if attempt.prior_ooms:
                metrics.recovery("recovered")
        if adopted:
            self.change_state(attempt.key, TaskInstanceState.SUCCESS if _exit_ok(ended) else TaskInstanceState.FAILED)

    # -- GPU faults ------------------------------------------------------------------------
    def _stop_tries_on_failed_gpus(self) -> None:
        """A GPU NVML reports failed for ``fault_kill_seconds``: stop the tries that use it (faults.py)."""
        if self.monitor is None:
            return
        for attempt, fault in self.faults.to_stop(self.monitor.latest().values(), self.active.values(), time.time()):
            attempt.fault = fault
            self.log.error("Task %s: %s; stopping it", attempt.rkey, fault)
            if attempt.handle is not None:
                attempt.handle.kill()

    # -- restart: adoption and reconciliation -----------------------------------------------
    def _reconcile(self) -> None:
        """After a restart: tries an earlier executor on this host left behind (restart.py)."""
        assert self.store is not None and self.settings is not None
        try:
            left = self.store.running()
        except CarmaError:
            self.log.exception("carma store unreachable at start: no reconciliation of earlier tries")
            return
        from carma_airflow.executor.writes import MarkEnded

        now = time.time()
        for rec in left:
            handle = None
            if rec.outcome == TryOutcome.RUNNING:
                handle = reattach(rec, self.settings.host, self._result_file(rec.ti_id or ""), self.launcher)
            if handle is None:
                self._write(
                    MarkEnded(
                        rec.key, now, TryOutcome.FAILED, None, "not running when the executor restarted; requeued"
                    )
                )
                continue
            orphan = self.tries.add(orphan_of(rec, handle, now))
            ended = handle.poll()
            if ended is not None:
                self._finish(orphan, ended)
                continue
            assert orphan.request is not None
            self.cycle.hold(orphan.request, orphan.gpu_uuids, orphan.started_at)
            self.log.info("Try %s on %s outlived the previous executor; its GPUs stay reserved", rec.key, rec.host)

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Take over tries of a dead scheduler whose processes still run here; the rest are reset."""
        not_adopted = []
        for ti in tis:
            orphan = self.tries.orphan(request_key(ti.key))
            if orphan is None or orphan.handle is None or orphan.handle.poll() is not None:
                not_adopted.append(ti)  # ended meanwhile: the next sync closes it
                continue
            orphan.ti, orphan.key = ti, ti.key
            self.tries.move(orphan, TryState.RUNNING)
            self._by_request[orphan.rkey] = ti.key
            self.running.add(ti.key)
            self.log.info("Adopted %s (pid %s) on %s", ti.key, orphan.handle.pid, ",".join(orphan.gpu_uuids))
        return not_adopted

    # -- store and live view ---------------------------------------------------------------
    @property
    def _pending_writes(self) -> int:
        return self.writer.pending if self.writer is not None else 0

    def _write(self, write: StoreWrite) -> None:
        """A store write, made in order by the writer (held while the store is unreachable)."""
        assert self.writer is not None
        self.writer.put(write)

    def _record_samples(self) -> None:
        """Keep a downsampled history of GPU telemetry (one row per GPU per SAMPLES_EVERY_S)."""
        if self.monitor is None or time.time() - self._samples_at < SAMPLES_EVERY_S:
            return
        self._samples_at = time.time()
        self._write(RecordSamples(sample_records(self.monitor.latest().values()), SAMPLES_EVERY_S))

    def _publish_snapshot(self) -> None:
        """The live view for the UI page (snapshot.py), at most every ``snapshot_period``."""
        now = time.time()
        if self.settings is None or self.monitor is None or now - self._snapshot_at < self.settings.snapshot_period:
            return
        self._snapshot_at = now
        view = self._view(now)
        metrics.gpu_gauges(self.placer.facts(view))
        waiting = [(t.request, t.last_summary) for t in self.waiting.values() if t.request is not None]
        errors = {s.uuid: s.error for s in self.monitor.latest().values() if s.error}
        body = build_snapshot(
            now=now,
            settings=self.settings,
            policy=self.placer.policy.name,
            queue=self.queue.name,
            view=view,
            waiting=waiting,
            running=len(self.active),
            pass_ms=list(self._pass_ms),
            pending_writes=self._pending_writes,
            errors=errors,
        )
        self._write(PutSnapshot(f"executor:{self.settings.host}", now, body))

    def _record(
        self,
        attempt: Try,
        *,
        outcome: TryOutcome,
        summary: str,
        started_at: float | None = None,
        reasons: list[str] | None = None,
        host: str | None = None,
    ) -> None:
        assert self.settings is not None and attempt.request is not None
        self._write(
            placement_record(
                attempt,
                outcome=outcome,
                summary=summary,
                policy=self.placer.policy.name,
                host=host or self.settings.host,
                started_at=started_at,
                reasons=reasons,
            )
        )

    # -- scheduler contract ----------------------------------------------------------------
    def revoke_task(self, *, ti: TaskInstance) -> None:
        if ti.key in self.tries:
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


def _worth_recording(attempt: Try, summary: str, now: float) -> bool:
    """Whether a waiting try's new reason goes to the store and log: its kind changed (the
    headline, numbers left out: which GPUs said no, and why, changes with every placement on a
    busy cluster), or the last write is ``WAIT_RECORD_S`` old.  Remembers the write when it does."""
    shape = _NUMBERS.sub("#", summary.split(" (", 1)[0])
    if shape == attempt.recorded_shape and now - attempt.recorded_at < WAIT_RECORD_S:
        return False
    attempt.recorded_shape, attempt.recorded_at = shape, now
    return True


def _exit_ok(ended: Ended) -> bool:
    """What the scheduler is told: the process's exit code, or, unknown, what the try reported."""
    if ended.exitcode is not None:
        return ended.exitcode == 0
    return ended.result is not None and ended.result.succeeded


__all__ = ["CarmaExecutor", "request_key"]
