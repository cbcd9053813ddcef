"""CarmaExecutor: collocation-aware GPU dispatch for Airflow 3.

Flow per try (see docs): the scheduler hands a workload over -> its ``executor_config`` is
validated and turned into a TaskRequest (memory: declared, else learned from earlier runs, else
the floor; after a CUDA OOM: the recovery planner) -> it waits in the executor's own queue
(counted in ``running`` so parallelism holds) -> each heartbeat the placer decides over the
live GPU view -> a placed try runs in its own process, started by the launcher process, whose
environment carries CUDA_VISIBLE_DEVICES -> when the process ends, the try's result file says
success / OOM / other, the GPUs are released and the store learns.

This class is the Airflow adapter; the life of the tries is :class:`~carma_airflow.executor.flow.TryFlow`.

Waiting longer than ``[scheduler] task_queued_timeout`` is safe: ``revoke_task`` declines for
tasks that wait for a GPU (the scheduler then leaves them queued), and the task's token is
issued anew at launch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor
from airflow.utils.state import TaskInstanceState

from carma_airflow.core.gpu import Tenant
from carma_airflow.executor.flow import TryFlow
from carma_airflow.executor.launch import KILL_GRACE_S
from carma_airflow.executor.parts import build_parts
from carma_airflow.executor.tries import WAIT_RECORD_S, Try
from carma_airflow.keys import request_key
from carma_airflow.settings import CarmaSettings

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store


class CarmaExecutor(BaseExecutor):
    """Places GPU tasks on GPUs they can share safely; see the module docstring."""

    is_local = True
    serve_logs = True
    supports_callbacks = False
    background_writes = True  # False: every store write inside the heartbeat (bench/pass_cost.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings: CarmaSettings | None = None
        self.flow: TryFlow | None = None

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.configure(CarmaSettings.from_airflow())

    def configure(self, settings: CarmaSettings, monitor: GpuSource | None = None, store: Store | None = None) -> None:
        """Read configuration once and build the monitor, store, launcher and placer (tests pass fakes)."""
        self.settings = settings
        parts = build_parts(settings, background_writes=self.background_writes, monitor=monitor, store=store)
        self.parts = parts
        self.flow = TryFlow(
            settings, parts, token_for=self._token_for, report=self._report, report_failure=self._report_failure
        )
        self.log.info(
            "CarmaExecutor started: %s backend, policy %s, queue %s, store %s",
            settings.gpu_backend,
            parts.placer.policy.name,
            parts.queue.name,
            parts.store.masked_url,
        )
        self.flow.start()

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
        if self.flow is None:
            return
        launcher = self.parts.launcher
        if launcher is not self.parts.local_launcher and hasattr(launcher, "close"):
            launcher.close(timeout_s=timeout_s)  # remote tries: pending dispatch-end writes and revokes
        if self.parts.local_launcher is not None:
            self.parts.local_launcher.close()
        self.parts.writer.close(timeout_s=timeout_s)
        self.parts.monitor.stop()

    # -- what the flow tells the scheduler -------------------------------------------------
    def _token_for(self, ti_id: str) -> str:
        from airflow.executors.workloads import ExecuteTask

        return str(ExecuteTask.generate_token(ti_id, self.jwt_generator))

    def _report(self, key: Any, ok: bool) -> None:
        """A try's process ended (the task reported its own state to the Execution API)."""
        self.change_state(key, TaskInstanceState.SUCCESS if ok else TaskInstanceState.FAILED)

    def _report_failure(self, key: Any, why: str) -> None:
        self.fail(key, info=why)

    # -- the scheduler contract ------------------------------------------------------------
    def _process_workloads(self, workload_items: Any) -> None:
        assert self.flow is not None
        for workload in workload_items:
            self.queued_tasks.pop(workload.key, None)
            if self.flow.take_over(workload.key, workload):
                self.running.add(workload.key)  # waiting tries count against parallelism too
        self.flow.schedule()

    def sync(self) -> None:
        if self.flow is not None:
            self.flow.sync()

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Take over tries of a dead scheduler whose processes still run here; the rest are reset."""
        assert self.flow is not None
        not_adopted = []
        for ti in tis:
            if self.flow.adopt(ti):
                self.running.add(ti.key)
            else:
                not_adopted.append(ti)
        return not_adopted

    def revoke_task(self, *, ti: TaskInstance) -> None:
        if self.flow is not None and ti.key in self.flow.tries:
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

    # -- what tests, benchmarks and the UI read ----------------------------------------------
    def __getattr__(self, name: str) -> Any:
        """The flow's and the parts' state (``waiting``, ``active``, ``tries``, ``store``, ...)."""
        flow = self.__dict__.get("flow")
        if flow is not None and name in _FROM_FLOW:
            return getattr(flow, name)
        parts = self.__dict__.get("parts")
        if parts is not None and name in _FROM_PARTS:
            return getattr(parts, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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


_FROM_FLOW = frozenset(
    {"tries", "learned", "cycle", "starter", "live", "deferred", "orphans", "_view", "_pending_writes"}
)
_FROM_PARTS = frozenset(
    {
        "store",
        "writer",
        "monitor",
        "launcher",
        "placer",
        "queue",
        "estimator",
        "recovery",
        "ledger_path",
        "local_launcher",
    }
)

__all__ = ["WAIT_RECORD_S", "CarmaExecutor", "request_key"]
