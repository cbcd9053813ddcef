"""CarmaExecutor: collocation-aware GPU dispatch for Airflow 3.

Flow per try (see docs): the scheduler hands a workload over -> its ``executor_config`` is
validated and turned into a TaskRequest (memory: declared, else learned from earlier runs, else
the floor; after a CUDA OOM: the recovery planner) -> it waits in the executor's own queue
(not in ``running``: ``[core] parallelism`` counts what runs across all executors, and a GPU
backlog must not starve LocalExecutor; ``[carma] max_waiting`` bounds the queue) -> each
heartbeat the placer decides over the live GPU view -> a placed try runs in its own process,
started by the launcher process, whose environment carries CUDA_VISIBLE_DEVICES -> when the
process ends, the try's result file says success / OOM / other, the GPUs are released and the
store learns.

This class is the Airflow adapter; the life of the tries is :class:`~carma_airflow.executor.flow.flow.TryFlow`,
whose book (tries/book.py) owns every try's state: ``running`` and ``has_task`` are read from it.  The
executor holds either its standby (standby.py) or a fully started runtime (runtime.py), never half.

A try waits as QUEUED in Airflow.  Past ``[scheduler] task_queued_timeout`` the scheduler
revokes it (``revoke_task`` takes it out of the GPU queue) and queues it again, and fails it
after ``num_stuck_in_queued_retries``, as it does for a Kubernetes pod pending for resources:
set the timeout above the longest GPU wait you accept (docs/deployment.md).  The task's token
is issued anew at launch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor
from airflow.utils.state import CallbackState, TaskInstanceState

from carma_airflow.config.options import option_default
from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.gpu import Tenant
from carma_airflow.executor.airflow.callbacks import CallbackRunner
from carma_airflow.executor.airflow.running import Running
from carma_airflow.executor.airflow.standby import Standby
from carma_airflow.executor.bookkeeping import metrics
from carma_airflow.executor.flow import (
    NotStartedError,
    Parts,
    Runtime,
    TryFlow,
    declined_keeping_retries,
    start_runtime,
    state_dir_of,
)
from carma_airflow.executor.tries import WAIT_RECORD_S, Try
from carma_airflow.keys import request_key
from carma_airflow.launching import KILL_GRACE_S, Launcher, LauncherProcess

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

    from carma_airflow.executor.bookkeeping import StoreWriter
    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store

_log = logging.getLogger("carma_airflow.executor")  # the flow's logger: the scheduler log, SIGUSR2 dumps
QUEUED_TIMEOUT_ADVICE_S = 3600.0  # below this, the start log says how waiting meets task_queued_timeout
END_CALLBACKS_S = 5.0  # end(): how long running callbacks get to finish
END_WRITES_S = 5.0  # end(): how long the store writer gets to flush


class CarmaExecutor(BaseExecutor):
    """Places GPU tasks on GPUs they can share safely; see the module docstring."""

    is_local = True
    serve_logs = True
    supports_callbacks = True  # run as CPU processes (callbacks.py): the scheduler sends them regardless
    supports_multi_team = True  # settings are read through the team's ExecutorConf
    background_writes = True  # False: every store write inside the heartbeat (bench/pass_cost.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._running = Running(lambda: self.flow.tries if self.flow is not None else None, lambda: self.callbacks)
        self.runtime: Runtime | None = None
        self.standby = Standby()
        self._own_launcher: LauncherProcess | None = None
        super().__init__(*args, **kwargs)
        self.settings: CarmaSettings | None = None
        # callbacks run from the first heartbeat, started or on standby; their results in the state folder
        self.callbacks = CallbackRunner(self._callback_launcher, state_dir_of(self.conf) / "results", "")
        self._pinned_events: list[Any] = []

    @property  # type: ignore[override]
    def running(self) -> Running:
        return self._running

    @running.setter
    def running(self, keys: set[Any]) -> None:  # BaseExecutor.__init__ starts it empty
        self._running.clear()
        self._running |= keys

    @property
    def flow(self) -> TryFlow | None:
        """The try flow of a fully started runtime; None before (or on standby)."""
        return self.runtime.flow if self.runtime is not None else None

    @property
    def parts(self) -> Parts:
        if self.runtime is None:
            raise NotStartedError(f"CarmaExecutor has not started ({self.standby.reason or 'start() not called'})")
        return self.runtime.parts

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the parts; if they cannot start (no GPU driver, store down, bad [carma] config),
        the scheduler and every other executor run on: GPU tries wait, with the reason, and the
        start is tried again (standby.py)."""
        self._start_or_wait()

    def _start_or_wait(self) -> bool:
        try:
            self.configure(CarmaSettings.from_airflow(self.conf))
        except Exception as exc:  # the scheduler must not die of it; what the start made is closed
            retry_s = self.standby.failed(exc, time.monotonic())
            self.log.error(
                "CarmaExecutor could not start: %s. GPU tasks wait (tried again in %.0f s); other executors run on",
                self.standby.reason,
                retry_s,
            )
            for key in self.standby.held:
                self._tell(key, self.standby.waiting_reason)
            return False
        self.standby.started()
        timeout_s = float(self.conf.get("scheduler", "task_queued_timeout", fallback="600") or 600)
        if timeout_s < QUEUED_TIMEOUT_ADVICE_S:
            self.log.warning(
                "[scheduler] task_queued_timeout = %.0f s: a GPU try that waits longer is revoked and queued again, "
                "and failed after [scheduler] num_stuck_in_queued_retries; set it above the longest GPU wait you "
                "accept (docs/deployment.md)",
                timeout_s,
            )
        self._take_held()
        return True

    def configure(self, settings: CarmaSettings, monitor: GpuSource | None = None, store: Store | None = None) -> None:
        """Read configuration once and start the runtime: monitor, store, writer, launcher, placer
        and the try flow (tests pass fakes).  All or nothing: on an exception nothing it made is
        left running, and the executor stays as it was."""
        runtime = start_runtime(
            settings,
            lambda parts: self._make_flow(settings, parts),
            background_writes=self.background_writes,
            monitor=monitor,
            store=store,
        )
        self.runtime, self.settings = runtime, settings
        self.callbacks.results = Path(settings.state_dir) / "results"
        self.callbacks.host = settings.host
        parts = runtime.parts
        self.log.info(
            "CarmaExecutor started: %s backend, policy %s, queue %s, store %s; up to %d tries wait for GPUs "
            "(outside [core] parallelism = %d)",
            settings.gpu_backend,
            parts.placer.policy.name,
            parts.queue.name,
            parts.store.masked_url,
            settings.max_waiting,
            self.parallelism,
        )

    def _make_flow(self, settings: CarmaSettings, parts: Parts) -> TryFlow:
        return TryFlow(
            settings,
            parts,
            token_for=self._token_for,
            report=self._report,
            report_failure=self.fail,
            tell=self._tell,
            room=lambda: self.parallelism - len(self.running),
        )

    def _take_held(self) -> None:
        """The tries held on standby, to the flow in hand-over order; one that fails stays held
        (tried again at the next heartbeat), the rest go on."""
        for key, exc in self.standby.take_held(self._take):
            self._not_taken(key, exc)

    def _not_taken(self, key: Any, exc: Exception) -> None:
        """A hand-over that raised: logged and counted; the try stays held, tried again at the next heartbeat."""
        _log.error("CarmaExecutor: task %s not taken; held, tried again at the next heartbeat", key, exc_info=exc)
        metrics.executor_error("hand-over")

    def end(self) -> None:
        """Return within seconds: tries that run go on in their own sessions (a later executor
        adopts them); tries that wait are handed back (the next scheduler queues them again);
        callbacks get a few seconds to end."""
        if self.flow is not None:
            handed = self.flow.takeback.hand_back("handed back: the scheduler stopped before a GPU was free")
            if handed:
                self.log.info("CarmaExecutor: %d waiting tries handed back to the scheduler", handed)
        deadline = time.monotonic() + END_CALLBACKS_S
        while len(self.callbacks) and time.monotonic() < deadline:
            self.callbacks.poll(self._report_callback)
            time.sleep(0.2)
        self._close(timeout_s=END_WRITES_S)

    def terminate(self) -> None:
        flow = self.flow
        tries = [*flow.active.values(), *flow.bare.values(), *flow.stopping.values()] if flow is not None else []
        handles = [t.handle for t in tries if t.handle is not None]
        for handle in handles:
            handle.kill()
        deadline = time.monotonic() + KILL_GRACE_S + 5.0  # polls send SIGKILL after the grace time
        while time.monotonic() < deadline and any(h.poll() is None for h in handles):
            time.sleep(0.2)
        self._close(timeout_s=5.0)

    def _close(self, timeout_s: float = 10.0) -> None:
        if self._own_launcher is not None:
            self._own_launcher.close(timeout_s=timeout_s)
        if self.runtime is not None:
            self.runtime.close(timeout_s=timeout_s)

    # -- what the flow tells the scheduler -------------------------------------------------
    def _token_for(self, ti_id: str) -> str:
        from airflow.executors.workloads import ExecuteTask

        return str(ExecuteTask.generate_token(ti_id, self.jwt_generator))

    def _report(self, key: Any, ok: bool) -> None:
        """A try's process ended (the task reported its own state to the Execution API)."""
        self.change_state(key, TaskInstanceState.SUCCESS if ok else TaskInstanceState.FAILED)

    def _report_callback(self, key: Any, ok: bool) -> None:
        self.change_state(key, CallbackState.SUCCESS if ok else CallbackState.FAILED)

    def log_task_event(self, *, event: str, extra: str, ti_key: Any) -> None:
        """Airflow's, keeping each queued event alive until the scheduler has saved it.

        Airflow 3.3.2 saves the queue with ``bulk_save_objects`` over a generator that pops each
        ``Log`` (``_process_task_event_logs``); with ``preserve_order=False`` SQLAlchemy 2.1 keeps
        only the objects' states, which hold them weakly, so an event nobody else references is
        collected first and saved as an empty row (``NOT NULL constraint failed: log.event``).
        """
        super().log_task_event(event=event, extra=extra, ti_key=ti_key)
        self._pinned_events = list(self._task_event_logs)  # the saved ones drop out at the next event

    def _tell(self, key: Any, why: str) -> None:
        """Why a try waits, in Airflow's audit log of the task instance (the UI's Audit Log tab)."""
        self.log_task_event(event="carma: waiting for a GPU", extra=why[:1000], ti_key=key)

    def _callback_launcher(self) -> Launcher:
        if self.runtime is not None and self.runtime.parts.local_launcher is not None:
            local: LauncherProcess = self.runtime.parts.local_launcher
            return local
        if self._own_launcher is None:  # Celery dispatch, or on standby: one of our own
            self._own_launcher = LauncherProcess()
        return self._own_launcher

    # -- the scheduler contract ------------------------------------------------------------
    @property
    def slots_available(self) -> int:
        """What the scheduler may hand over: what may still run, and at most ``[carma]
        max_waiting`` tries waiting for a GPU (they do not count against ``[core] parallelism``)."""
        waiting = self._waiting_count()
        max_waiting = self.settings.max_waiting if self.settings is not None else option_default("max_waiting")
        queued = len(self.queued_tasks) + len(self.queued_callbacks) + len(self.queued_connection_tests)
        return min(self.parallelism - len(self.running), max_waiting - waiting) - queued

    def trigger_tasks(self, open_slots: int) -> None:
        """Take every queued workload at once: the scheduler handed over no more than
        :attr:`slots_available` allowed, and a try left in ``queued_tasks`` would count against
        ``[core] parallelism`` (BaseExecutor offers only ``parallelism - running`` a heartbeat)."""
        super().trigger_tasks(len(self.queued_tasks) + len(self.queued_callbacks))

    def _waiting_count(self) -> int:
        flow = self.flow
        return len(self.standby.held) + (len(flow.waiting) + len(flow.deferred) if flow is not None else 0)

    def has_task(self, task_instance: TaskInstance) -> bool:
        return super().has_task(task_instance) or (
            task_instance.key in self.standby.held or (self.flow is not None and task_instance.key in self.flow.tries)
        )

    def _process_workloads(self, workload_items: Any) -> None:
        """Take the handed-over workloads; the placement pass is the heartbeat's, in :meth:`sync`
        (after the tries that ended are collected), as BaseExecutor's heartbeat hands over, then syncs."""
        from airflow.executors.workloads import ExecuteCallback

        for workload in workload_items:
            if isinstance(workload, ExecuteCallback):
                self.queued_callbacks.pop(workload.key, None)
                if self.callbacks.start(workload):
                    self.change_state(workload.key, CallbackState.RUNNING, remove_running=False)
                continue
            self.queued_tasks.pop(workload.key, None)
            try:
                self._take(workload.key, workload)
            except Exception as exc:  # never the scheduler's loop; never lost: held, tried again
                self._not_taken(workload.key, exc)
                self.standby.hold(workload.key, workload)

    def _take(self, key: Any, workload: Any) -> None:
        if self.flow is None:
            self.standby.hold(key, workload)
            self._tell(key, self.standby.waiting_reason)
            return
        self.flow.take_over(key, workload)

    def sync(self) -> None:
        """Once per heartbeat: callbacks; on standby, the start when it is due; then the flow's
        heartbeat (ends collected, one placement pass)."""
        self.callbacks.poll(self._report_callback)
        if self.flow is None and not (self.standby.due(time.monotonic()) and self._start_or_wait()):
            return
        assert self.flow is not None
        if self.standby.held:  # held on standby, not taken at the start: tried again
            self._take_held()
        self._guarded("heartbeat", self.flow.sync)

    def _guarded(self, what: str, step: Callable[[], None]) -> None:
        """A step of the flow that fails is logged and tried again at the next heartbeat: an
        executor's exception would end the scheduler loop, and every other executor with it."""
        try:
            step()
        except Exception:
            _log.exception("CarmaExecutor: the %s failed; GPU tries wait, the scheduler runs on", what)
            metrics.executor_error(what)

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Take over tries of a dead scheduler whose processes still run here; the rest are reset."""
        if self.flow is not None and tis:  # the executors as they stand now, read once for all of them
            self.flow.peers.refresh()  # (restart.adopt_from_store): one may have stopped since the last beat
        return declined_keeping_retries(tis, None if self.flow is None else self.flow.adopt)

    def revoke_task(self, *, ti: TaskInstance) -> None:
        """The scheduler found ``ti`` queued past ``[scheduler] task_queued_timeout``: take it
        back (Airflow then queues it again, or fails it after ``num_stuck_in_queued_retries``).
        At once the try is no task of this executor any more (``has_task`` false, not in
        ``running``): a waiting try leaves the GPU queue; a started one is stopped, its process
        reaped in the background and its end not reported.  The same key handed over again is a
        new hand-over, which waits for a GPU.  Never raises: the scheduler's loop over stuck tasks
        goes on (raising skips every other one)."""
        why = "revoked: queued longer than [scheduler] task_queued_timeout; raise it above the longest GPU wait"
        try:
            if self.flow is not None and self.flow.takeback.revoke(ti.key, why):
                self.log.warning("Task %s %s", ti.key, why)
        except Exception:  # never raises: the scheduler's loop over stuck tasks goes on
            _log.exception("CarmaExecutor: revoking %s failed", ti.key)
        self.standby.held.pop(ti.key, None)
        self.queued_tasks.pop(ti.key, None)
        self.running.discard(ti.key)

    def debug_dump(self) -> None:
        """SIGUSR2: Airflow's queues, then the GPUs' tenants and why each try waits."""
        super().debug_dump()  # type: ignore[no-untyped-call]
        if self.flow is None:
            held = len(self.standby.held)
            _log.info("CarmaExecutor not started: %s (%d GPU tries held)", self.standby.reason, held)
            return
        _log.info(
            "CarmaExecutor GPUs and their tenants:\n\t%s",
            "\n\t".join(
                f"{uuid}: " + (", ".join(f"{t.label} {t.accounted_mib} MiB" for t in tenants) or "free")
                for uuid, tenants in sorted(self.flow.tenants.items())
            ),
        )
        _log.info(
            "CarmaExecutor waiting tries (%d):\n\t%s",
            len(self.flow.waiting),
            "\n\t".join(f"{t.rkey}: {t.last_summary or 'not decided yet'}" for t in self.flow.waiting.values()),
        )

    @staticmethod
    def get_cli_commands() -> list[Any]:
        from carma_airflow.executor.airflow.cli import carma_cli_commands

        return carma_cli_commands()

    # -- what tests, benchmarks and the UI read (the rest: ``executor.flow``, ``executor.parts``) --
    @property
    def waiting(self) -> Mapping[Any, Try]:
        return self.flow.waiting if self.flow is not None else {}

    @property
    def active(self) -> Mapping[Any, Try]:
        return self.flow.active if self.flow is not None else {}

    @property
    def bare(self) -> Mapping[Any, Try]:
        return self.flow.bare if self.flow is not None else {}

    @property
    def tenants(self) -> dict[str, list[Tenant]]:
        return self.flow.tenants if self.flow is not None else {}

    @property
    def store(self) -> Store:
        return self.parts.store

    @property
    def writer(self) -> StoreWriter:
        return self.parts.writer

    @property
    def monitor(self) -> GpuSource:
        return self.parts.monitor


__all__ = ["WAIT_RECORD_S", "CarmaExecutor", "request_key"]
