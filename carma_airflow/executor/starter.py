"""How a try becomes a process: its environment (its GPUs, the kill rule, or the refusal), a
fresh token, and the launcher of the host it goes to."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.core.decision import Decision
from carma_airflow.core.errors import ConfigError, UnknownGpuSpecError
from carma_airflow.core.fencing import CapRule, Fence, IsolationMode
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.recovery import author_retry_left
from carma_airflow.dagparse.cluster_policy import author_retries_of
from carma_airflow.executor.envcheck import check_task_env
from carma_airflow.executor.launch import Launcher, TaskHandle
from carma_airflow.executor.taskenv import gpu_task_env
from carma_airflow.executor.tries import Try
from carma_airflow.settings import CarmaSettings
from carma_airflow.taskrun.driver_cap import CGROUP_LEAF_ENV, DriverCapError, DriverCaps, fall_back
from carma_airflow.taskrun.isolation import HostIsolation, Resolved, fence_for, host_isolation, resolve
from carma_airflow.taskrun.killguard import retry_on_kill_env
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, live_caps, read_caps, write_caps

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask

log = logging.getLogger("carma_airflow.executor")


def kill_env(ti: Any, prior_ooms: int) -> dict[str, str]:
    """Whether a try that dies of a signal may be retried: only within the author's retries."""
    author = author_retries_of(getattr(ti, "executor_config", None))
    if author is None:  # parsed without our cluster policy: Airflow's max_tries is the author's
        return {}
    return retry_on_kill_env(author_retry_left(ti.try_number, prior_ooms, author))


@dataclass(frozen=True, slots=True)
class Launch:
    """A placed try sent to its launcher, its process not confirmed yet."""

    attempt: Try
    decision: Decision
    host: str
    handle: TaskHandle


def placement_note(attempt: Try, decision: Decision, now: float) -> str:
    """What the try's own log says of its placement (the listener prints it): where it runs, and,
    if it waited, for how long and the last reason it was given."""
    waited = now - attempt.taken_at if attempt.taken_at else 0.0
    if waited < 1.0 or not attempt.last_summary:
        return decision.summary
    return f"{decision.summary}; waited {waited:.0f} s for it, last {attempt.last_summary}"


class TryStarter:
    def __init__(
        self, settings: CarmaSettings, launcher: Launcher, token_for: Callable[[str], str], ledger_path: Path
    ) -> None:
        self.settings = settings
        self.launcher = launcher
        self.token_for = token_for  # ti id -> a fresh JWT for the Execution API
        self.ledger_path = ledger_path
        # (gpu uuid, the try's request key) -> the reservations of its co-tenants there, for
        # [carma] isolation_cap = protective; None: caps fall back to the promise
        self.co_tenants: Callable[[str, str], Sequence[int]] | None = None
        self._host: HostIsolation | None = None
        self._resolved: dict[IsolationMode, Resolved] = {}
        # isolation_cap = live: request key -> (its GPUs, their sizes, its reservation, its cap file)
        self._followed: dict[str, tuple[tuple[str, ...], tuple[int, ...], int, Path]] = {}
        # isolation = driver: each try's cgroup leaf and its NVML limits (made on the first such try)
        self.driver: DriverCaps | None = None
        self._driven: dict[str, tuple[tuple[str, ...], tuple[int, ...], int]] = {}
        self.log_isolation()

    def log_isolation(self) -> None:
        """Say in the executor's start log which mode holds this host's tries (docs/isolation.md)."""
        try:
            said = self.isolation(IsolationMode.parse(self.settings.isolation)).describe()
        except ConfigError as exc:  # every GPU try is refused with this message until it is fixed
            log.error("GPU tries cannot start: %s", exc)
            return
        log.info("CarmaExecutor %s", said)

    def isolation(self, requested: IsolationMode) -> Resolved:
        """The mode in force for ``requested`` on this host (detected once); ConfigError if absent."""
        if requested not in self._resolved:
            if self._host is None:
                self._host = host_isolation(self.settings.gpu_backend)
            self._resolved[requested] = resolve(requested, self._host)
        return self._resolved[requested]

    def fence(self, attempt: Try, decision: Decision) -> Fence:
        """What the placed try is held to on each of its GPUs (core/fencing.py)."""
        own = attempt.config.isolation if attempt.config is not None else None
        resolved = self.isolation(IsolationMode.parse(own or self.settings.isolation))
        request = attempt.request
        reservation = request.memory.mib if request is not None else 0
        rule = CapRule(self.settings.isolation_cap)
        others: list[int] = []
        if rule is not CapRule.PROMISE and self.co_tenants is not None:
            uuid = decision.gpu_uuids[0] if decision.gpu_uuids else ""
            others = self._promises_beside(uuid, attempt.rkey)
        elif rule is not CapRule.PROMISE:  # nobody told us the co-tenants: the safe cap
            rule = CapRule.PROMISE
        return fence_for(
            resolved,
            reservation_mib=reservation,
            totals_mib=[_total_mib(v.spec) for v in decision.chosen] or [0] * len(decision.gpu_uuids),
            exclusive=request.needs_idle_gpu if request is not None else False,
            margin_mib=self.settings.isolation_margin_mib,
            rule=rule,
            reserve_mib=self.settings.reserve_mib,
            co_tenant_promises=others,
        )

    def _promises_beside(self, uuid: str, key: str) -> list[int]:
        assert self.co_tenants is not None
        return [r + self.settings.isolation_margin_mib for r in self.co_tenants(uuid, key)]

    def _follow(self, attempt: Try, decision: Decision, fence: Fence) -> dict[str, str]:
        """``isolation_cap = live``: the try's cap file, which :meth:`refresh_caps` keeps current."""
        request = attempt.request
        if (
            CapRule(self.settings.isolation_cap) is not CapRule.LIVE
            or self.co_tenants is None
            or fence.mode not in (IsolationMode.FRAMEWORK, IsolationMode.DRIVER)  # driver: PyTorch's cap moves too
            or fence.live
            or request is None
            or request.needs_idle_gpu
            or not all(t > 0 for t in fence.total_mib)
        ):
            return {}
        path = Path(self.settings.state_dir) / "caps" / f"{attempt.ti.id}.cap"
        write_caps(path, fence.cap_mib)
        self._followed[attempt.rkey] = (decision.gpu_uuids, fence.total_mib, request.memory.mib, path)
        return {CAP_FILE_ENV: str(path)}

    def _drive(self, attempt: Try, decision: Decision, fence: Fence, env: dict[str, str]) -> None:
        """``isolation = driver``: the try's cgroup leaf with its limits set, named in ``env`` for the
        try to move into; where NVML or the cgroup refuses, framework caps (the try's log says why)."""
        if fence.mode is not IsolationMode.DRIVER or self.settings.gpu_backend == "simulated":
            return
        if self.settings.dispatch != "local":  # the leaf would be made on this host, not the try's
            fall_back(env, "dispatch = celery: the executor makes cgroup leaves on its own host only")
            return
        try:
            if self.driver is None:
                self.driver = DriverCaps()
            leaf = self.driver.open(
                attempt.rkey, str(attempt.ti.id), decision.gpu_uuids, fence.promise_mib, fence.cap_mib
            )
        except DriverCapError as exc:
            log.warning("%s: driver caps not set, framework caps instead: %s", attempt.rkey, exc)
            fall_back(env, str(exc))
            return
        env[CGROUP_LEAF_ENV] = str(leaf)
        request = attempt.request
        live = CapRule(self.settings.isolation_cap) is CapRule.LIVE and all(t > 0 for t in fence.total_mib)
        if live and request is not None and not request.needs_idle_gpu:
            self._driven[attempt.rkey] = (decision.gpu_uuids, fence.total_mib, request.memory.mib)

    def _refresh_driven(self, keep: set[str]) -> None:
        if self.driver is None:
            return
        for key, (uuids, totals, reservation) in list(self._driven.items()):
            if key not in keep or self.co_tenants is None:
                del self._driven[key]
                continue
            caps = live_caps(
                totals, reservation, self.settings.reserve_mib, [self._promises_beside(u, key) for u in uuids]
            )
            try:
                self.driver.update(key, caps)
            except DriverCapError as exc:  # the leaf keeps its last limits
                log.warning("%s: driver caps not moved to %s MiB: %s", key, caps, exc)
        self.driver.keep(keep)  # the leaves of ended tries go

    def refresh_caps(self, running: Iterable[str]) -> None:
        """Re-set the cap of each running ``live`` try to its GPU less its co-tenants now (call it
        once a loop with the request keys of the running tries); ended tries' files and cgroup
        leaves go."""
        keep = set(running)
        self._refresh_driven(keep)
        for key, (uuids, totals, reservation, path) in list(self._followed.items()):
            if key not in keep or self.co_tenants is None:
                path.unlink(missing_ok=True)
                del self._followed[key]
                continue
            others = [self._promises_beside(u, key) for u in uuids]
            caps = live_caps(totals, reservation, self.settings.reserve_mib, others)
            if read_caps(path) != caps:
                write_caps(path, caps)

    def result_file(self, ti_id: str) -> Path:
        """Where the try of task instance ``ti_id`` leaves its result (taskrun/outcome.py)."""
        return Path(self.settings.state_dir) / "results" / f"{ti_id}.json"

    def placed_env(self, attempt: Try, decision: Decision) -> dict[str, str]:
        """The environment of a placed try; ConfigError if a value must not reach a process."""
        result_path = self.result_file(str(attempt.ti.id))
        result_path.unlink(missing_ok=True)
        env = gpu_task_env(
            decision.gpu_uuids,
            result_path=str(result_path),
            placement=placement_note(attempt, decision, time.time()),
            prior_ooms=attempt.prior_ooms,
            guards=self.settings.framework_guards,
            sim_ledger=str(self.ledger_path) if self.settings.gpu_backend == "simulated" else None,
            fence=(fence := self.fence(attempt, decision)),
        )
        env.update(self._follow(attempt, decision, fence))
        self._drive(attempt, decision, fence, env)
        env.update(kill_env(attempt.ti, attempt.prior_ooms))
        return check_task_env(env)

    def host_of(self, decision: Decision, hosts: Mapping[str, str]) -> str:
        first = decision.gpu_uuids[0] if decision.gpu_uuids else None
        return hosts.get(first, self.settings.host) if first else self.settings.host

    def start(self, attempt: Try, env: dict[str, str], host: str | None = None) -> TaskHandle:
        """Start the try's process on ``host`` (this one by default); the token is issued anew:
        the try may have waited longer than the one it was handed over with lives."""
        workload: ExecuteTask = attempt.workload
        workload.token = self.token_for(str(workload.ti.id))
        env = {**env, **kill_env(attempt.ti, attempt.prior_ooms)}
        return self.launcher.launch(workload, env, self.result_file(str(workload.ti.id)), host or self.settings.host)


def _total_mib(spec: str) -> int:
    """A GPU's memory from its catalogue name (0 where the catalogue does not know it)."""
    try:
        return gpu_spec(spec).memory_mib
    except UnknownGpuSpecError:
        return 0


__all__ = ["Launch", "TryStarter", "kill_env"]
