"""The life of every try of one executor, Airflow-free: intake, the scheduling pass over the
core cycle, launching, ends, GPU faults, tries the scheduler takes back, restart reconciliation.

The executor (executor.py) is the Airflow adapter around it: it hands tries over, calls
:meth:`TryFlow.sync` once per heartbeat and passes on what :meth:`report` is told.  The try book
(tries/book.py) owns every try's state; every end goes through :meth:`TryFlow.end`.  Nothing here
does store or network I/O in the caller's thread: writes go to the writer thread, learned memory
is held in memory, remote tries are fetched in bulk by their launcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.config.task_config import parse_task_config
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.decision import Decision
from carma_airflow.core.errors import CarmaError, ConfigError
from carma_airflow.core.gpu import GpuState, Tenant
from carma_airflow.dagparse.cluster_policy import refusal_env
from carma_airflow.executor.bookkeeping import LiveView, StoreWrite, metrics
from carma_airflow.executor.flow.parts import Parts
from carma_airflow.executor.flow.restart import Restart
from carma_airflow.executor.gpus import FaultWatch, GpuSight, MpsGuard
from carma_airflow.executor.learning import Attribution, Learned, remember_end, tell_while_running
from carma_airflow.executor.peers import Peers, peer_id
from carma_airflow.executor.starting import Launch, TryStarter
from carma_airflow.executor.tries import (
    STARTED,
    SUPERSEDED_GRACE_S,
    TakeBack,
    Try,
    TryBook,
    TryState,
    close_checkpoint,
    conclude,
    count_end,
    end_writes,
    first_request,
    placement_record,
    recovered,
    refused_write,
)
from carma_airflow.keys import request_key
from carma_airflow.launching import Ended, LauncherError, confirm
from carma_airflow.monitor.base import Reading
from carma_airflow.store.records import TryOutcome
from carma_airflow.taskrun.driver_cap import nvml_owner
from carma_airflow.taskrun.progress import read_progress

log = logging.getLogger("carma_airflow.executor")

Report = Callable[[Any, bool], None]  # (TaskInstanceKey, the process ended well) -> tell the scheduler
ReportFailure = Callable[[Any, str], None]  # (TaskInstanceKey, why) -> the scheduler fails the try
Tell = Callable[[Any, str], None]  # (TaskInstanceKey, why it waits) -> Airflow's audit log of the try


class TryFlow:
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
        room: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self.store, self.writer, self.monitor = parts.store, parts.writer, parts.monitor
        self.launcher, self.placer, self.queue = parts.launcher, parts.placer, parts.queue
        self.estimator, self.recovery = parts.estimator, parts.recovery
        self.report, self.report_failure = report, report_failure
        self.tell: Tell = tell or (lambda key, why: None)
        self.room = room  # how many more tries may start now ([core] parallelism); None: any
        self.tries = TryBook()
        # the book's tries by state: live read-only views (STOPPING and ORPHAN by request key)
        self.waiting, self.active = self.tries.in_state(TryState.WAITING), self.tries.in_state(TryState.RUNNING)
        self.bare, self.deferred = self.tries.in_state(TryState.REFUSED), self.tries.in_state(TryState.DEFERRED)
        self.orphans, self.stopping = self.tries.in_state(TryState.ORPHAN), self.tries.in_state(TryState.STOPPING)
        self.takeback = TakeBack(
            self.tries, self.end, lambda t, why: self._record(t, outcome=TryOutcome.FAILED, summary=why)
        )
        self.learned = Learned()
        me = peer_id(settings.host)  # this executor among the schedulers' (peers.py)
        self.starter = TryStarter(
            settings,
            parts.launcher,
            token_for,
            parts.ledger_path,
            # what a try's co-tenants were promised: protective and live caps (core/fencing.py)
            co_tenants=self._co_tenants,
            driver_owner=me,  # driver caps: its cgroup leaves, under its own id
            nvml=nvml_owner(parts.monitor),  # and the monitor's NVML owner sets their limits
            host_gpus=self._host_gpus,  # a gone executor's leaves: soft limits cleared on every GPU of this host
        )
        # other schedulers' executors (peers.py); a peer's tenant is counted by this host's configured fence
        self.peers = Peers(settings, parts.store, me=me, foreign_kept_margin_mib=self.starter.kept_margin_mib())
        self.cycle = SchedulingCycle(self.placer, self.queue, recovery=self.recovery, reservations=self.peers.ledger)
        self.faults = FaultWatch(settings.fault_kill_seconds)
        self.mps = MpsGuard()  # a faulted MPS server: quarantined, its other clients retried (mps_guard.py)
        self.live = LiveView(settings, self.placer.policy.name, self.queue.name, self.peers.me)
        self.sight = GpuSight(settings.stale_seconds)  # and each GPU's host and model
        # a running try's progress reports, where it makes them (taskrun/progress.py): read each sample
        self.telemetry = Attribution(progress=lambda t: read_progress(self.starter.progress_file(str(t.ti.id))))
        self.restart = Restart(  # the tries earlier executors left (restart.py)
            parts.store,
            self.peers,
            host=settings.host,
            launcher=parts.launcher,
            result_file=self.starter.result_file,
            kept_margin_mib=self.starter.kept_margin_mib,
            write=self.write,
            keep=self.keep_orphan,
        )

    def _co_tenants(self, uuid: str, key: str) -> list[int]:
        """What the other tenants of GPU ``uuid`` than try ``key`` were promised (their reservations)."""
        return [t.reserved_mib for t in self.cycle.reservations.tenants_on(uuid, time.time()) if t.key != key]

    def _host_gpus(self) -> list[str]:
        """Every GPU of this host the monitor has seen."""
        return [u for u, h in self.sight.host_of.items() if h == self.settings.host]

    def start(self) -> None:
        """What earlier runs taught (read once: intake never reads the store), then the tries an
        earlier executor left.  The runtime (runtime.py) stops the peers' heartbeat it starts."""
        try:
            self.learned.load(self.store)
        except CarmaError as exc:  # the store is down: place from what is declared
            log.warning("carma store unreachable at start (%s): no learned memory until it is back", exc)
        self.learned.hand_over(self.placer.policy, time.time())
        self.peers.start()
        self.restart.reconcile()

    # -- hand-over -----------------------------------------------------------------------------
    def take_over(self, key: Any, workload: Any) -> bool:
        """A workload the scheduler handed over; False if this try is known already.  A key it
        took back (revoked) is not known any more: handed over again, it is a new try, which
        waits until the taken-back one's process has ended."""
        if key in self.tries:
            log.warning("Task %s handed over twice; keeping the first", key)
            return False
        attempt = self.tries.add(Try(key, request_key(key), workload.ti, TryState.DEFERRED, workload))
        attempt.taken_at = time.time()
        if not self.tries.waits_for_earlier(attempt):
            self._take(attempt)
        return True

    def adopt(self, ti: Any) -> bool:
        """Take over a try of a dead scheduler whose process still runs here."""
        orphan = self.tries.orphan(request_key(ti.key)) or self.restart.adopt(ti)  # a peer died later
        if orphan is None or orphan.handle is None or orphan.handle.poll() is not None:
            return False  # ended meanwhile: the next sync closes it
        orphan.ti, orphan.key = ti, ti.key
        self.tries.move(orphan, TryState.RUNNING)
        log.info("Adopted %s (pid %s) on %s", ti.key, orphan.handle.pid, ",".join(orphan.gpu_uuids))
        return True

    def keep_orphan(self, orphan: Try) -> None:
        """A try an earlier executor started, in the book: its GPUs stay reserved until it ends or
        the scheduler hands it over; ended already, it is concluded now (the one end path)."""
        self.tries.add(orphan)
        ended = orphan.handle.poll() if orphan.handle is not None else None
        if ended is not None:
            self.end(orphan, ended)
            return
        assert orphan.request is not None
        self.cycle.hold(orphan.request, orphan.gpu_uuids, orphan.started_at)

    # -- once per heartbeat ------------------------------------------------------------------
    def sync(self) -> None:
        """Once per heartbeat, on one monitor sample: collect the tries that ended, stop those that
        must stop, plan the deferred ones, then one placement pass."""
        self.writer.retry()  # inline mode only: the writes an outage held
        if self.peers.reconcile_due():
            self.restart.reconcile()  # the store was unreachable at start: reconciled once the peers are known
        refresh = getattr(self.launcher, "refresh", None)
        if refresh is not None:
            refresh()  # remote tries: their states in one round trip (or from a fetcher thread)
        samples = self.monitor.reading()  # samples, windows and ages of one moment, for the whole heartbeat
        self._reap(self.bare.values(), Ended(1, None))
        now = time.time()
        self.faults.stop_tries(samples.values(), self.active.values(), now)
        self.telemetry.observe(samples, self.active.values(), lambda u: self.cycle.reservations.tenants_on(u, now))
        tell_while_running(self.cycle, self.learned, self.telemetry, self.active.values(), self.waiting.values())
        self.starter.refresh_caps(a.rkey for a in self.active.values())  # live caps follow the tenants
        self._reap(self.tries.holding_gpus(), None)
        self._take_deferred()
        if self.waiting:
            started = time.perf_counter()
            self.schedule(samples)
            self.live.pass_ms.append(took_ms := (time.perf_counter() - started) * 1000)
            metrics.decision_time(took_ms)
        metrics.heartbeat(len(self.waiting), len(self.active), self.writer.pending)
        self._publish(samples)

    def _reap(self, attempts: Iterable[Try], no_handle: Ended | None) -> None:
        """End each of ``attempts`` whose process has ended (``no_handle``: how one without a handle ends)."""
        for attempt in list(attempts):
            ended = attempt.handle.poll() if attempt.handle is not None else no_handle
            if ended is not None:
                self.end(attempt, ended)

    def _vouched(self) -> bool:
        """Whether the interference fit is learned for every GPU model this executor places on
        (core/vouch.py: learned peaks below the estimate without them wait for it)."""
        model = self.learned.model
        return all(model.fit_for(name).learned for name in set(self.sight.spec_of.values()))

    def _take(self, attempt: Try) -> None:
        """A DEFERRED try whose previous try has ended: plan it (WAITING), or refuse it."""
        ti = attempt.ti
        try:
            where, unknown = f"task {ti.task_id!r}: executor_config", self.settings.allow_unknown_keys
            config = parse_task_config(ti.executor_config, where=where, mapped=ti.map_index >= 0, allow_unknown=unknown)
        except ConfigError as exc:
            # Run it without GPUs: in the task process the cluster policy makes it fail with
            # this message in its log; the rest of the DAG is untouched.
            log.error("Task %s has an invalid executor_config: %s", attempt.key, exc)
            message = " ".join(str(exc).split())[:4000]
            self.write(refused_write(ti, message, self.settings.host, time.time()))  # for `carma why`
            self._start_refused(attempt, {"CUDA_VISIBLE_DEVICES": "", "CARMA_CONFIG_ERROR": message}, message)
            return
        try:
            now = time.time()
            # the placer keeps what the try's own fence promises it for its life (its mode, or the host's)
            kept = self.starter.kept_margin_mib(config.isolation)
            request = first_request(
                ti, config, self.estimator, self.learned, now, kept_margin_mib=kept, vouched=self._vouched()
            )
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
            self.end(attempt, None, failed=reason)

    def _take_deferred(self) -> None:
        now = time.time()
        for attempt in list(self.deferred.values()):
            if not self.tries.waits_for_earlier(attempt):
                self._take(attempt)
            elif now - attempt.taken_at > SUPERSEDED_GRACE_S:
                self.takeback.stop_superseded(attempt)

    def _gpus(self, now: float, latest: Reading) -> tuple[GpuState, ...]:
        """The GPUs as the monitor's sample shows them (the cycle lays the reservations over them)."""
        return self.mps.apply(self.sight.gpus(now, latest), now)

    @property
    def tenants(self) -> dict[str, list[Tenant]]:
        """Each GPU's tenants as the placer counts them now (the cycle's reservations)."""
        now = time.time()
        uuids = set(self.sight.host_of) | {u for r in self.cycle.reservations for u in r.gpu_uuids}
        return {u: list(self.cycle.reservations.tenants_on(u, now)) for u in uuids}

    def schedule(self, samples: Reading) -> None:
        """One placement pass over the waiting tries, on ``samples`` (the heartbeat's)."""
        if not self.waiting:
            return
        now = time.time()
        budget = self.room() if self.room is not None else None
        if budget is not None and budget <= 0:
            return  # [core] parallelism: as many tries run as may; they wait, with their last reason
        if self.writer.full:
            return  # the store writer is at its bound (writer.py): no new placements until it drains
        why = self.live.reasons_due(now, len(self.waiting))  # deep queues: once a second (liveview.py)
        self.learned.hand_over(self.placer.policy, now)  # what ended tries taught, when due
        gpus = self._gpus(now, samples)
        # peers' reservations counted; the pass places no more than the slots left, the tries after
        # that point are decided at a later pass (they keep their place and their last reason)
        result = self.peers.run_pass(self.cycle, now, gpus, why, budget)
        placed = result.placed
        # every placed try is sent before any is waited for: the launcher forks them back to back
        sent = [self._launch(self.tries.handed(p.request.key), p.decision) for p in placed]
        for launch in sent:
            if launch is not None:
                self._confirm(launch)

        for never in result.never_fits:
            attempt = self.tries.handed(never.request.key)
            assert attempt is not None
            log.error("Task %s can never be placed: %s", attempt.key, never.decision.summary)
            metrics.never_fits(attempt.ti.dag_id, attempt.ti.task_id)
            self._record(attempt, outcome=TryOutcome.FAILED, summary=never.decision.summary)
            self._refuse(attempt, never.decision.summary)
        for rkey, decision in result.waiting.items():
            attempt = self.tries.handed(rkey)
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
        host = self.starter.host_of(decision, self.sight.host_of)
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
        reasons += self.starter.checkpoints.resume_reasons(attempt.rkey)  # what it resumes from (checkpoint.py)
        reasons += self.starter.fence_reasons(attempt.rkey)  # the fence it started under, per GPU
        summary, host = decision.summary, launch.host
        self._record(attempt, outcome=TryOutcome.RUNNING, summary=summary, started_at=now, reasons=reasons, host=host)

    # -- ends: one path -----------------------------------------------------------------------
    def end(self, attempt: Try, ended: Ended | None, *, failed: str | None = None) -> None:
        """The one way a try ends.  ``ended``: how its process ended (None: it never had one:
        withdrawn, handed back, or its refusing process could not start, ``failed`` saying why).

        A try that held GPUs frees them and records what it taught; the scheduler hears of the end
        of a try it counts as running here (a stopping or orphaned one's end is not its business).
        """
        told = attempt.state in STARTED
        held = bool(attempt.gpu_uuids) and ended is not None
        if attempt.state in (TryState.WAITING, TryState.DEFERRED):
            self.cycle.withdraw(attempt.rkey)
        self.tries.move(attempt, TryState.ENDED)
        if held:
            assert ended is not None
            self._conclude(attempt, ended)
        if told and ended is not None:
            self.report(attempt.key, ended.ok)
        elif told and failed is not None:
            self.report_failure(attempt.key, failed)

    def _conclude(self, attempt: Try, ended: Ended) -> None:
        """Record how a try on GPUs ended and what it taught (memory, activity, interference)."""
        self.cycle.release(attempt.rkey)
        now = time.time()
        end = conclude(attempt, ended, self.recovery)
        take = getattr(self.placer.policy, "take_slowdown", None)  # completion-time's, before try_ended
        slowdown = take(attempt.rkey) if take is not None else None
        told = getattr(self.placer.policy, "try_ended", None)  # completion-time's track record
        if told is not None:
            told(attempt.rkey, now, end.outcome is TryOutcome.SUCCESS)
        self.mps.after_end(attempt, end.result, self.active.values(), now)
        seen = self.telemetry.conclude(attempt.rkey)
        try:  # its progress reports were read while it ran (taskrun/progress.py): the file goes with it
            self.starter.progress_file(str(attempt.ti.id)).unlink(missing_ok=True)
        except OSError as exc:
            log.debug("Task %s: its progress file stays: %s", attempt.key, exc)
        gpu_model = self.sight.spec_of.get(attempt.gpu_uuids[0]) if attempt.gpu_uuids else None
        writes = end_writes(attempt, end, now)
        try:
            writes += remember_end(self.learned, attempt, end, seen, now, gpu_model, slowdown)
        except Exception:
            # the end is a fact, what it taught a lesson: a fault in learning (the fit raised here in
            # round 40) must not lose the try's record or its report, nor the heartbeat: only the lesson
            log.exception("Task %s: what its end taught was not learned (its end is recorded)", attempt.key)
        for write in writes:
            self.write(write)
        if end.outcome is TryOutcome.OOM:
            log.warning("Task %s %s", attempt.request.label if attempt.request else attempt.rkey, end.summary)
        count_end(attempt, end)
        close_checkpoint(attempt, end, self.starter.checkpoints)  # succeeded: its folder goes (ending.py)

    # -- the store -----------------------------------------------------------------------------
    def write(self, write: StoreWrite) -> None:
        """A store write, made in order by the writer (held while the store is unreachable)."""
        self.writer.put(write)

    def _publish(self, latest: Reading) -> None:
        """The UI page's live snapshot and the telemetry history, when they are due (liveview.py)."""
        now = time.time()
        samples = list(latest.values())
        due = self.live.samples_due(now, samples)
        if due is not None:
            self.write(due)
        if not self.live.snapshot_due(now):
            return
        view = self.cycle.view(now, self._gpus(now, latest))
        metrics.gpu_gauges(self.placer.facts(view))
        waiting = [(t.request, t.last_summary) for t in self.waiting.values() if t.request is not None]
        mps = {u: f.why for u, f in self.mps.faulted.items()}
        self.write(self.live.snapshot(now, view, waiting, len(self.active), self.writer.pending, samples, mps))

    def _record(
        self, attempt: Try, *, outcome: TryOutcome, summary: str, host: str | None = None, **extra: Any
    ) -> None:
        """The try's placement record as it stands now (tries/records.py), written by the writer."""
        policy, host = self.placer.policy.name, host or self.settings.host
        self.write(placement_record(attempt, outcome=outcome, summary=summary, policy=policy, host=host, **extra))


__all__ = ["TryFlow"]
