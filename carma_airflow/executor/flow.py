"""The life of every try of one executor, Airflow-free: intake, the scheduling pass over the
core cycle, launching, ends, GPU faults and restart reconciliation.

The executor (executor.py) is the Airflow adapter around it: it hands tries over, calls
:meth:`TryFlow.sync` once per heartbeat and passes on what :meth:`report` is told.  Nothing here
does store or network I/O in the caller's thread: writes go to the writer thread, learned memory
is held in memory, remote tries are fetched in bulk by their launcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.decision import Decision
from carma_airflow.core.errors import CarmaError, ConfigError
from carma_airflow.core.gpu import ClusterView, GpuState, Tenant
from carma_airflow.dagparse.cluster_policy import refusal_env
from carma_airflow.executor import metrics
from carma_airflow.executor.bookkeeping import placement_record
from carma_airflow.executor.ending import conclude, count_end, end_writes
from carma_airflow.executor.faults import FaultWatch
from carma_airflow.executor.intake import family_of, first_request, recovered
from carma_airflow.executor.launch import Ended, LauncherError, confirm
from carma_airflow.executor.learned import Learned, use_model
from carma_airflow.executor.learning import remember_end, tell_while_running
from carma_airflow.executor.liveview import LiveView
from carma_airflow.executor.mps_guard import MpsGuard
from carma_airflow.executor.parts import Parts
from carma_airflow.executor.peers import Peers
from carma_airflow.executor.restart import adopt_from_store, reconcile
from carma_airflow.executor.starter import Launch, TryStarter
from carma_airflow.executor.takeback import SUPERSEDED_GRACE_S, TakeBack
from carma_airflow.executor.telemetry import Attribution
from carma_airflow.executor.tries import Try, TryBook, TryState
from carma_airflow.executor.view import build_view
from carma_airflow.executor.writes import StoreWrite
from carma_airflow.keys import request_key
from carma_airflow.settings import CarmaSettings
from carma_airflow.store.records import TryOutcome
from carma_airflow.task_config import parse_task_config

log = logging.getLogger("carma_airflow.executor")


Report = Callable[[Any, bool], None]  # (TaskInstanceKey, the process ended well) -> tell the scheduler
ReportFailure = Callable[[Any, str], None]  # (TaskInstanceKey, why) -> the scheduler fails the try
Tell = Callable[[Any, str], None]  # (TaskInstanceKey, why it waits) -> Airflow's audit log of the try


class TryFlow(TakeBack):
    """Every try of one executor from hand-over to end; see the module docstring."""

    def __init__(
        self,
        settings: CarmaSettings,
        parts: Parts,
        *,
        token_for: Callable[[str], str],
        report: Report,
        report_failure: ReportFailure,
        tell: Tell | None = None,
    ) -> None:
        self.settings = settings
        self.store, self.writer, self.monitor = parts.store, parts.writer, parts.monitor
        self.launcher, self.placer, self.queue = parts.launcher, parts.placer, parts.queue
        self.estimator, self.recovery = parts.estimator, parts.recovery
        self.report, self.report_failure = report, report_failure
        self.tell: Tell = tell or (lambda key, why: None)
        self.budget: int | None = None  # how many more tries may start now ([core] parallelism); None: any
        self.tries = TryBook()
        self.learned = Learned()
        self.peers = Peers(settings, parts.store)  # other schedulers' executors (peers.py)
        self.cycle = SchedulingCycle(self.placer, self.queue, recovery=self.recovery, reservations=self.peers.ledger)
        self.starter = TryStarter(settings, parts.launcher, token_for, parts.ledger_path)
        # what a try's co-tenants were promised: protective and live caps (core/fencing.py)
        self.starter.co_tenants = lambda uuid, key: [
            t.reserved_mib for t in self.cycle.reservations.tenants_on(uuid, time.time()) if t.key != key
        ]
        self.faults = FaultWatch(settings.fault_kill_seconds)
        self.mps = MpsGuard()  # a faulted MPS server: quarantined, its other clients retried (mps_guard.py)
        self.live = LiveView(settings, self.placer.policy.name, self.queue.name)
        self._by_request: dict[str, Any] = {}  # request key -> TaskInstanceKey
        self._host_of: dict[str, str] = {}  # GPU UUID -> its host
        self._spec_of: dict[str, str] = {}  # GPU UUID -> its model (the interference fit's key)
        self.telemetry = Attribution()

    def start(self) -> None:
        """What earlier runs taught (read once: intake never reads the store), then the tries an
        earlier executor left."""
        try:
            self.learned.load(self.store)
        except CarmaError as exc:  # the store is down: place from what is declared
            log.warning("carma store unreachable at start (%s): no learned memory until it is back", exc)
        use_model(self.placer.policy, self.learned.model)
        self.peers.start()
        self._reconcile()

    # -- hand-over -----------------------------------------------------------------------------
    def take_over(self, key: Any, workload: Any) -> bool:
        """A workload the scheduler handed over; False if this try is known already."""
        if key in self.tries:
            log.warning("Task %s handed over twice; keeping the first", key)
            return False
        attempt = self.tries.add(Try(key, request_key(key), workload.ti, TryState.DEFERRED, workload))
        attempt.taken_at = time.time()
        if not self._previous_try_active(key):
            self._take(attempt)
        return True

    def adopt(self, ti: Any) -> bool:
        """Take over a try of a dead scheduler whose process still runs here."""
        orphan = self.tries.orphan(request_key(ti.key)) or adopt_from_store(self, ti)  # a peer died later
        if orphan is None or orphan.handle is None or orphan.handle.poll() is not None:
            return False  # ended meanwhile: the next sync closes it
        orphan.ti, orphan.key = ti, ti.key
        self.tries.move(orphan, TryState.RUNNING)
        self._by_request[orphan.rkey] = ti.key
        log.info("Adopted %s (pid %s) on %s", ti.key, orphan.handle.pid, ",".join(orphan.gpu_uuids))
        return True

    # -- once per heartbeat ------------------------------------------------------------------
    def sync(self) -> None:
        self.writer.retry()  # inline mode only: the writes an outage held
        refresh = getattr(self.launcher, "refresh", None)
        if refresh is not None:
            refresh()  # remote tries: their states in one round trip (or from a fetcher thread)
        for attempt in list(self.bare.values()):
            ended = attempt.handle.poll() if attempt.handle is not None else Ended(1, None)
            if ended is not None:
                self.tries.move(attempt, TryState.ENDED)
                self.report(attempt.key, ended.exitcode == 0)
        self.faults.stop_tries(self.monitor.latest().values(), self.active.values(), time.time())
        now = time.time()
        self.telemetry.observe(
            self.monitor.latest(), self.active.values(), lambda u: self.cycle.reservations.tenants_on(u, now)
        )
        tell_while_running(self.cycle, self.learned, self.telemetry, self.active.values(), self.waiting.values())
        self.starter.refresh_caps(a.rkey for a in self.active.values())  # live caps follow the tenants
        for attempt in list(self.tries.holding_gpus()):
            ended = attempt.handle.poll() if attempt.handle is not None else None
            if ended is not None:
                self._finish(attempt, ended)
        self._take_deferred()
        if self.waiting:
            started = time.perf_counter()
            self.schedule()
            took_ms = (time.perf_counter() - started) * 1000
            self.live.pass_ms.append(took_ms)
            metrics.decision_time(took_ms)
        metrics.waiting(len(self.waiting))
        metrics.running(len(self.active))
        metrics.pending_writes(self._pending_writes)
        self._publish()

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
            log.error("Task %s has an invalid executor_config: %s", attempt.key, exc)
            message = " ".join(str(exc).split())[:4000]
            self._start_refused(attempt, {"CUDA_VISIBLE_DEVICES": "", "CARMA_CONFIG_ERROR": message}, message)
            return
        try:
            now = time.time()
            request = first_request(ti, config, self.estimator, self.learned, now)
            request, attempt.prior_ooms, replanned = recovered(ti, request, self.learned, self.cycle.plan_retry, now)
        except Exception as exc:  # never the scheduler: this task fails, with the reason
            log.exception("Task %s could not be taken", attempt.key)
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
        self.tries.move(attempt, TryState.REFUSED)
        try:
            attempt.handle = self.starter.start(attempt, env)
        except Exception:  # not even a process: the scheduler's own failure handling is what is left
            log.exception("Task %s: the refusing process could not start", attempt.key)
            self.tries.move(attempt, TryState.ENDED)
            self.report_failure(attempt.key, reason)

    def _previous_try_active(self, key: Any) -> bool:
        family = (key.dag_id, key.task_id, key.run_id, key.map_index)
        return any(
            family_of(t.ti) == family and t.ti.try_number < key.try_number
            for t in (*self.active.values(), *self.orphans.values())
        )

    def _take_deferred(self) -> None:
        now = time.time()
        for attempt in list(self.deferred.values()):
            if not self._previous_try_active(attempt.key):
                self._take(attempt)
            elif now - attempt.taken_at > SUPERSEDED_GRACE_S:
                self._stop_superseded(attempt)

    def _gpus(self, now: float) -> tuple[GpuState, ...]:
        """The GPUs as the monitor sees them now (the cycle lays the reservations over them)."""
        samples = list(self.monitor.latest().values())
        self._host_of.update((s.uuid, s.host) for s in samples)
        windows = {s.uuid: self.monitor.window(s.uuid) for s in samples}
        ages = {s.uuid: self.monitor.age(s.uuid) for s in samples}
        gpus = self.mps.apply(build_view(now, samples, windows, ages, self.settings.stale_seconds).gpus, now)
        self._spec_of.update((g.uuid, g.spec.name) for g in gpus)
        return gpus

    def _view(self, now: float) -> ClusterView:
        return self.cycle.view(now, self._gpus(now))

    @property
    def tenants(self) -> dict[str, list[Tenant]]:
        """Each GPU's tenants as the placer counts them now (the cycle's reservations)."""
        now = time.time()
        uuids = set(self._host_of) | {u for r in self.cycle.reservations for u in r.gpu_uuids}
        return {u: list(self.cycle.reservations.tenants_on(u, now)) for u in uuids}

    def schedule(self) -> None:
        if not self.waiting:
            return
        now = time.time()
        if self.budget is not None and self.budget <= 0:
            return  # [core] parallelism: as many tries run as may; they wait, with their last reason
        why = self.live.reasons_due(now, len(self.waiting))  # deep queues: once a second (liveview.py)
        result = self.peers.run_pass(self.cycle, now, self._gpus(now), why)  # peers' reservations counted
        placed = result.placed
        if self.budget is not None and len(placed) > self.budget:
            for extra in placed[self.budget :]:  # placed past the slots left: back in the queue
                self.cycle.release(extra.request.key)
                self.cycle.submit(extra.request, now, prior_ooms=extra.prior_ooms)
            placed = placed[: self.budget]
        # every placed try is sent before any is waited for: the launcher forks them back to back
        sent = [self._launch(self.tries.get(self._by_request[p.request.key]), p.decision) for p in placed]
        for launch in sent:
            if launch is not None:
                self._confirm(launch)

        for never in result.never_fits:
            attempt = self.tries.get(self._by_request[never.request.key])
            assert attempt is not None
            log.error("Task %s can never be placed: %s", attempt.key, never.decision.summary)
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
            if attempt.worth_recording(decision.summary, now):
                log.info("Task %s %s", attempt.key, decision.summary)
                self.tell(attempt.key, decision.summary)
                reasons = [str(v) for v in decision.rejected[:16]]
                self._record(attempt, outcome=TryOutcome.WAITING, summary=decision.summary, reasons=reasons)

    def _launch(self, attempt: Try | None, decision: Decision) -> Launch | None:
        """Send a placed try (GPUs reserved) to its launcher, else free them; see :meth:`_confirm`."""
        assert attempt is not None and attempt.request is not None
        host = self.starter.host_of(decision, self._host_of)
        try:
            env = self.starter.placed_env(attempt, decision)
        except ConfigError as exc:  # a GPU UUID or path that must not reach a process environment
            log.error("Task %s not started: %s", attempt.key, exc)
            self.cycle.release(attempt.rkey)
            self._record(attempt, outcome=TryOutcome.FAILED, summary=f"not started: {exc}")
            self._refuse(attempt, f"not started: {exc}")
            return None
        try:
            return Launch(attempt, decision, host, self.starter.start(attempt, env, host))
        except LauncherError as exc:
            self._not_started(attempt, exc)
            return None

    def _not_started(self, attempt: Try, exc: LauncherError) -> None:
        """Its GPUs go back; it waits for the next pass."""
        assert attempt.request is not None
        log.error("Task %s not started, tried again at the next pass: %s", attempt.key, exc)
        self.cycle.release(attempt.rkey)
        self.cycle.submit(attempt.request, time.time(), prior_ooms=attempt.prior_ooms)

    def _confirm(self, launch: Launch) -> None:
        attempt, decision = launch.attempt, launch.decision
        try:
            confirm(launch.handle)
        except LauncherError as exc:
            self._not_started(attempt, exc)
            return
        now = attempt.started_at = time.time()
        attempt.handle, attempt.gpu_uuids = launch.handle, decision.gpu_uuids
        self.tries.move(attempt, TryState.RUNNING)
        log.info("Task %s %s", attempt.key, decision.summary)
        metrics.placed(self.placer.policy.name, decision.collocated)
        metrics.wait_seconds(now - attempt.request.submitted_at if attempt.request else 0.0)
        reasons = [str(v) for v in decision.chosen + decision.rejected[:8]]
        summary, host = decision.summary, launch.host
        self._record(attempt, outcome=TryOutcome.RUNNING, summary=summary, started_at=now, reasons=reasons, host=host)

    def _finish(self, attempt: Try, ended: Ended) -> None:
        """Record how a try ended and what it taught (memory, activity, interference); tell the scheduler."""
        adopted = attempt.state is TryState.RUNNING
        self.tries.move(attempt, TryState.ENDED)
        self.cycle.release(attempt.rkey)
        now = time.time()
        end = conclude(attempt, ended, self.recovery)
        self.mps.after_end(attempt, end.result, self.active.values(), now)
        seen = self.telemetry.conclude(attempt.rkey)
        gpu_model = self._spec_of.get(attempt.gpu_uuids[0]) if attempt.gpu_uuids else None
        for write in end_writes(attempt, end, now) + remember_end(self.learned, attempt, end, seen, now, gpu_model):
            self._write(write)
        if end.outcome is TryOutcome.OOM:
            log.warning("Task %s %s", attempt.request.label if attempt.request else attempt.rkey, end.summary)
        count_end(attempt, end)
        use_model(self.placer.policy, self.learned.model)
        if adopted and not attempt.revoked:
            self.report(attempt.key, ended.ok)

    def _reconcile(self) -> None:
        """After a restart: tries whose owner is gone (this host's earlier executor, a dead peer; restart.py)."""
        reconcile(self)

    @property
    def _pending_writes(self) -> int:
        return self.writer.pending

    def _write(self, write: StoreWrite) -> None:
        """A store write, made in order by the writer (held while the store is unreachable)."""
        self.writer.put(write)

    def _publish(self) -> None:
        """The UI page's live snapshot and the telemetry history, when they are due (liveview.py)."""
        now = time.time()
        samples = list(self.monitor.latest().values())
        due = self.live.samples_due(now, samples)
        if due is not None:
            self._write(due)
        if not self.live.snapshot_due(now):
            return
        view = self._view(now)
        metrics.gpu_gauges(self.placer.facts(view))
        waiting = [(t.request, t.last_summary) for t in self.waiting.values() if t.request is not None]
        mps = {u: f.why for u, f in self.mps.faulted.items()}
        self._write(self.live.snapshot(now, view, waiting, len(self.active), self._pending_writes, samples, mps))

    def _record(
        self, attempt: Try, *, outcome: TryOutcome, summary: str, host: str | None = None, **extra: Any
    ) -> None:
        """The try's placement record as it stands now (bookkeeping.py), written by the writer."""
        policy, host = self.placer.policy.name, host or self.settings.host
        self._write(placement_record(attempt, outcome=outcome, summary=summary, policy=policy, host=host, **extra))


__all__ = ["TryFlow"]
