"""How a try becomes a process: its environment (its GPUs, its retry plan, or the refusal), a
fresh token, and the launcher of the host it goes to."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.checkpoint import CheckpointFolders
from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.cuda_context import cuda_context_mib
from carma_airflow.core.decision import Decision
from carma_airflow.core.errors import ConfigError, UnknownGpuSpecError
from carma_airflow.core.estimators import outgrew_declaration
from carma_airflow.core.fencing import FENCE_REASON, CapRule, Fence, FenceModel, IsolationMode, Tenant
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.recovery import EndPlan, plan_try_end
from carma_airflow.dagparse.cluster_policy import author_retries_of
from carma_airflow.executor.starting.sim_driver import SimulatedDriverCaps
from carma_airflow.executor.tries import Try
from carma_airflow.launching import Launcher, TaskHandle, check_task_env, gpu_task_env
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.taskrun.driver_cap import (
    CGROUP_LEAF_ENV,
    DriverCapError,
    DriverCaps,
    MemoryLimitOwner,
    fall_back,
    nvml_set_limit,
)
from carma_airflow.taskrun.fence_env import CONTEXT_ENV, RULE_ENV, SIM_LEAF_ENV, describe_try_fence, fence_from_env
from carma_airflow.taskrun.isolation import (
    HostIsolation,
    Resolved,
    fence_for,
    host_isolation,
    mechanism_cap_mib,
    resolve,
)
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, read_caps, write_caps
from carma_airflow.taskrun.outcome import end_plan_env

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask

log = logging.getLogger("carma_airflow.executor")


def end_plan(ti: Any, prior_ooms: int, oom_retries: int) -> EndPlan | None:
    """The try's retry for each way it can end (core/recovery.plan_try_end), decided here once when
    it is launched: ``prior_ooms`` is the book's count of the run's earlier OOM tries (from the
    store, executor/learning/learned.py ``tries_for``).  Airflow's ``max_tries`` is not in the
    workload: the round is counted from try 1, and the try recounts it with the ``max_tries`` it
    learns (taskrun/retry.py, killguard.py).  None where the DAG was parsed without our cluster
    policy: Airflow's own retries are the author's, and the try gets no plan."""
    author = author_retries_of(getattr(ti, "executor_config", None))
    if author is None:
        return None
    return plan_try_end(ti.try_number, None, author, oom_retries, prior_ooms)


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
    memory = attempt.request.memory.source if attempt.request is not None else None
    said = f"{decision.summary}; memory {memory}" if outgrew_declaration(memory) else decision.summary
    if waited < 1.0 or not attempt.last_summary:
        return said
    return f"{said}; waited {waited:.0f} s for it, last {attempt.last_summary}"


class TryStarter:
    def __init__(
        self,
        settings: CarmaSettings,
        launcher: Launcher,
        token_for: Callable[[str], str],
        ledger_path: Path,
        *,
        co_tenants: Callable[[str, str], Sequence[int]] | None = None,
        driver_owner: str | None = None,
        nvml: MemoryLimitOwner | None = None,
        host_gpus: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.settings = settings
        self.launcher = launcher
        self.token_for = token_for  # ti id -> a fresh JWT for the Execution API
        self.ledger_path = ledger_path
        # (gpu uuid, the try's request key) -> the reservations of its co-tenants there, for
        # [carma] isolation_cap = protective; None: caps fall back to the promise
        self.co_tenants = co_tenants
        self._host: HostIsolation | None = None
        self._resolved: dict[IsolationMode, Resolved] = {}
        # isolation_cap = live: request key -> what its cap follows, and its cap file
        self._followed: dict[str, tuple[Followed, Path]] = {}
        # isolation = driver: each try's cgroup leaf and its NVML limits (made on the first such try);
        # on simulated GPUs the ledger keeps them (executor/starting/sim_driver.py)
        self.driver: DriverCaps | None = None
        self.sim_driver: SimulatedDriverCaps | None = None
        # whose cgroup leaves they are (the executor's peer id, executor/peers/peers.py) and the NVML
        # owner that sets their limits (the monitor's probe, monitor/nvml.py)
        self.driver_owner = driver_owner
        self.nvml = nvml
        # every GPU of this host: a gone executor's leaves get their soft limits cleared on each
        self.host_gpus = host_gpus
        self.checkpoints = CheckpointFolders(settings.checkpoint_root, keep=settings.checkpoint_keep)
        self._driven: dict[str, Followed] = {}
        self._said: dict[str, str] = {}  # request key -> the fence its start was set to, in words
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
            self._resolved[requested] = resolve(requested, self._host, CapRule(self.settings.isolation_cap))
        return self._resolved[requested]

    def kept_margin_mib(self, requested: str | None = None) -> int | None:
        """What the placer keeps above a try's reservation for its life under the fence it starts
        under: the mode it asks (its ``executor_config``'s ``isolation``; None: the host's
        configured one) as resolved here, with the host's cap rule (core/fencing.FenceModel.kept_margin_mib,
        the simulator's own rule; it goes on the try's request).  None when unfenced, or when the
        mode cannot start here (the try is refused at its start)."""
        try:
            model = self.isolation(IsolationMode.parse(requested or self.settings.isolation)).model
        except ConfigError:
            return None
        return model.kept_margin_mib(self.settings.isolation_margin_mib)

    def fence(self, attempt: Try, decision: Decision) -> Fence:
        """What the placed try is held to on each of its GPUs (core/fencing.py): each GPU's cap from
        that GPU's co-tenants, every one of them counted from its placement on."""
        resolved = self._resolved_for(attempt)
        request = attempt.request
        reservation = request.memory.mib if request is not None else 0
        rule = resolved.model.rule
        others: list[list[int]] = [[] for _ in decision.gpu_uuids]
        if rule is not CapRule.PROMISE and self.co_tenants is not None:
            others = [self._promises_beside(u, attempt.rkey, resolved.model) for u in decision.gpu_uuids]
        elif rule is not CapRule.PROMISE:  # nobody told us the co-tenants: the safe cap
            rule = CapRule.PROMISE
        return fence_for(
            resolved,
            reservation_mib=reservation,
            totals_mib=self._totals(decision),
            exclusive=request.needs_idle_gpu if request is not None else False,
            margin_mib=self.settings.isolation_margin_mib,
            rule=rule,
            reserve_mib=self.settings.reserve_mib,
            co_tenants_by_gpu=others,
            context_mib=self._contexts(decision),
        )

    def _resolved_for(self, attempt: Try) -> Resolved:
        own = attempt.config.isolation if attempt.config is not None else None
        return self.isolation(IsolationMode.parse(own or self.settings.isolation))

    @staticmethod
    def _totals(decision: Decision) -> list[int]:
        return [_total_mib(v.spec) for v in decision.chosen] or [0] * len(decision.gpu_uuids)

    def _contexts(self, decision: Decision) -> list[int]:
        """The CUDA context counted on each of the try's GPUs (core/cuda_context.py)."""
        simulated = self.settings.gpu_backend == "simulated"
        specs = [v.spec for v in decision.chosen] or [""] * len(decision.gpu_uuids)
        return [cuda_context_mib(spec, simulated=simulated) for spec in specs]

    def _promises_beside(self, uuid: str, key: str, model: FenceModel) -> list[int]:
        """The promises of the co-tenants of ``key`` on ``uuid``: each reservation plus the margin
        ``model`` gives a promise (core.fencing.FenceModel.margin_mib: none under a live cap), the
        rule the simulator plays too."""
        assert self.co_tenants is not None
        margin = model.margin_mib(self.settings.isolation_margin_mib)
        return [r + margin for r in self.co_tenants(uuid, key)]

    def _caps_now(self, key: str, followed: Followed) -> tuple[int, ...]:
        """A live try's cap on each GPU now, as the GPU counts it: the GPU less the reserve and every
        co-tenant placed there (core.fencing.FenceModel.may_hold_mib), never below its promise."""
        uuids, totals, promises, _ = followed
        model = FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE)  # any re-settable mechanism: the same cap
        caps = []
        for uuid, total, promise in zip(uuids, totals, promises, strict=True):
            held = model.may_hold_mib(
                start_cap_mib=None,
                promise_mib=promise,
                total_mib=total,
                reserve_mib=self.settings.reserve_mib,
                co_tenants=[Tenant(p) for p in self._promises_beside(uuid, key, model)],
            )
            caps.append(total if held is None else held)
        return tuple(caps)

    def _followed_of(self, decision: Decision, fence: Fence) -> Followed:
        return (tuple(decision.gpu_uuids), fence.total_mib, fence.promise_mib, tuple(self._contexts(decision)))

    def _follow(self, attempt: Try, decision: Decision, fence: Fence) -> dict[str, str]:
        """``isolation_cap = live``: the try's cap file, which :meth:`refresh_caps` keeps current."""
        request = attempt.request
        if (
            not fence.live
            or self.co_tenants is None
            # driver and mps: PyTorch's cap moves too (under mps beneath the pinned limit fixed at start)
            or fence.mode not in (IsolationMode.FRAMEWORK, IsolationMode.DRIVER, IsolationMode.MPS)
            or request is None
            or request.needs_idle_gpu
            or not all(t > 0 for t in fence.total_mib)
        ):
            return {}
        path = Path(self.settings.state_dir) / "caps" / f"{attempt.ti.id}.cap"
        followed = self._followed_of(decision, fence)
        write_caps(path, self._file_caps(self._caps_now(attempt.rkey, followed), followed))
        self._followed[attempt.rkey] = (followed, path)
        return {CAP_FILE_ENV: str(path)}

    @staticmethod
    def _file_caps(caps: tuple[int, ...], followed: Followed) -> tuple[int, ...]:
        """A cap file's caps: what PyTorch's allocator is set to, the CUDA context taken out."""
        return tuple(mechanism_cap_mib(IsolationMode.FRAMEWORK, c, x) for c, x in zip(caps, followed[3], strict=True))

    def _drive(self, attempt: Try, decision: Decision, fence: Fence, env: dict[str, str]) -> None:
        """``isolation = driver``: the try's cgroup leaf with its limits set, named in ``env`` for the
        try to move into; where NVML or the cgroup refuses, framework caps (the try's log says why).
        On simulated GPUs the ledger keeps the leaf's limits (executor/starting/sim_driver.py)."""
        if fence.mode is not IsolationMode.DRIVER:
            return
        simulated = self.settings.gpu_backend == "simulated"
        if self.settings.dispatch != "local" and not simulated:  # the leaf would be made on this host, not the try's
            fall_back(env, "dispatch = celery: the executor makes cgroup leaves on its own host only")
            return
        try:
            driver = self._driver()
            if driver is None and simulated:
                driver = self.sim_driver = SimulatedDriverCaps(Ledger(self.ledger_path))
            elif driver is None:
                driver = self.driver = DriverCaps(
                    nvml_set_limit(self.nvml), owner=self.driver_owner, host_gpus=self.host_gpus
                )
            leaf = driver.open(attempt.rkey, str(attempt.ti.id), decision.gpu_uuids, fence.promise_mib, fence.cap_mib)
        except DriverCapError as exc:
            log.warning("%s: driver caps not set, framework caps instead: %s", attempt.rkey, exc)
            fall_back(env, str(exc))
            return
        env[SIM_LEAF_ENV if simulated else CGROUP_LEAF_ENV] = str(leaf)
        request = attempt.request
        if fence.live and request is not None and not request.needs_idle_gpu and all(t > 0 for t in fence.total_mib):
            self._driven[attempt.rkey] = self._followed_of(decision, fence)

    def _driver(self) -> DriverCaps | SimulatedDriverCaps | None:
        """What holds this host's driver-capped tries: cgroup leaves, or on simulated GPUs the ledger."""
        return self.sim_driver if self.settings.gpu_backend == "simulated" else self.driver

    def _refresh(self, keep: set[str] | None, on: set[str] | None = None) -> None:
        """Re-set each live try's cap (those on the GPUs ``on``, or all) to its GPU less its
        co-tenants now; with ``keep``, the tries not in it have ended: their files and leaves go."""
        driver = self._driver()
        for key, followed in list(self._driven.items()):
            if (keep is not None and key not in keep) or self.co_tenants is None:
                del self._driven[key]
                continue
            if driver is None or (on is not None and on.isdisjoint(followed[0])):
                continue
            caps = self._caps_now(key, followed)
            try:
                driver.update(key, caps)
            except DriverCapError as exc:  # the leaf keeps its last limits
                log.warning("%s: driver caps not moved to %s MiB: %s", key, caps, exc)
        if keep is not None and driver is not None:
            driver.keep(keep)  # the leaves of ended tries go
        for key, (followed, path) in list(self._followed.items()):
            if (keep is not None and key not in keep) or self.co_tenants is None:
                path.unlink(missing_ok=True)
                del self._followed[key]
                continue
            if on is not None and on.isdisjoint(followed[0]):
                continue
            caps = self._file_caps(self._caps_now(key, followed), followed)
            if read_caps(path) != caps:
                write_caps(path, caps)

    def refresh_caps(self, running: Iterable[str]) -> None:
        """Re-set the cap of each running ``live`` try to its GPU less its co-tenants now (call it
        once a loop with the request keys of the running tries); ended tries' files and cgroup
        leaves go."""
        self._refresh(set(running))

    def result_file(self, ti_id: str) -> Path:
        """Where the try of task instance ``ti_id`` leaves its result (taskrun/outcome.py)."""
        return Path(self.settings.state_dir) / "results" / f"{ti_id}.json"

    def progress_file(self, ti_id: str) -> Path:
        """Where the try of task instance ``ti_id`` may report its progress (taskrun/progress.py)."""
        return self.result_file(ti_id).with_suffix(".progress")

    def placed_env(self, attempt: Try, decision: Decision) -> dict[str, str]:
        """The environment of a placed try; ConfigError if a value must not reach a process."""
        result_path = self.result_file(str(attempt.ti.id))
        result_path.unlink(missing_ok=True)
        progress_path = self.progress_file(str(attempt.ti.id))
        progress_path.unlink(missing_ok=True)  # an earlier try's reports are not this one's
        checkpoint, resume = self.checkpoints.for_try(attempt.rkey, attempt.ti)  # the same for all its tries
        env = gpu_task_env(
            decision.gpu_uuids,
            result_path=str(result_path),
            placement=placement_note(attempt, decision, time.time()) + (f"; {resume}" if resume else ""),
            guards=self.settings.framework_guards,
            sim_ledger=str(self.ledger_path) if self.settings.gpu_backend == "simulated" else None,
            fence=(fence := self.fence(attempt, decision)),
            checkpoint_dir=str(checkpoint) if checkpoint is not None else None,
            try_number=getattr(attempt.ti, "try_number", None),
            progress_path=str(progress_path),
        )
        if fence.fenced:
            env[RULE_ENV] = self._rule_of(attempt, fence)
            env[CONTEXT_ENV] = ",".join(str(c) for c in self._contexts(decision))
        env.update(self._follow(attempt, decision, fence))
        self._drive(attempt, decision, fence, env)
        # a promise holds from placement: the live caps of the tries already on these GPUs count
        # this one now, before its process has touched the GPU (not only at the next heartbeat)
        self._refresh(None, set(decision.gpu_uuids))
        said = fence_from_env(env, len(decision.gpu_uuids))
        if said is not None:
            words = describe_try_fence(said, env)
            self._said[attempt.rkey] = words
            if len(self._said) > 256:  # tries placed that never started: their lines go, oldest first
                del self._said[next(iter(self._said))]
            log.info("Task %s memory: %s", attempt.key, words)
        return check_task_env(env)

    def fence_reasons(self, key: str) -> list[str]:
        """The placement reason that records the fence try ``key`` started under, per GPU
        (core.fencing.FENCE_REASON: ``carma why`` and the UI show it); asked once, when it starts."""
        words = self._said.pop(key, None)
        return [] if words is None else [f"{FENCE_REASON}{words}"]

    def _rule_of(self, attempt: Try, fence: Fence) -> str:
        """The rule the try's cap was set by, for its log: exclusive (its whole GPU), live, or the
        fixed rule (protective falls back to promise where nobody tells the co-tenants)."""
        if attempt.request is not None and attempt.request.needs_idle_gpu:
            return "exclusive"
        if fence.live:
            return CapRule.LIVE.value
        rule = self._resolved_for(attempt).model.rule
        if rule is CapRule.PROMISE or self.co_tenants is None:
            return CapRule.PROMISE.value
        return CapRule.PROTECTIVE.value

    def host_of(self, decision: Decision, hosts: Mapping[str, str]) -> str:
        first = decision.gpu_uuids[0] if decision.gpu_uuids else None
        return hosts.get(first, self.settings.host) if first else self.settings.host

    def start(self, attempt: Try, env: dict[str, str], host: str | None = None) -> TaskHandle:
        """Start the try's process on ``host`` (this one by default) with its retry plan
        (:func:`end_plan`, kept on the try for its end and its record); the token is issued anew:
        the try may have waited longer than the one it was handed over with lives."""
        workload: ExecuteTask = attempt.workload
        workload.token = self.token_for(str(workload.ti.id))
        if attempt.plan is None:  # once per try (a try not started at once is started again, same plan)
            attempt.plan = end_plan(attempt.ti, attempt.prior_ooms, self.settings.oom_retries)
        if attempt.plan is not None:
            env = {**env, **end_plan_env(attempt.plan)}
        return self.launcher.launch(workload, env, self.result_file(str(workload.ti.id)), host or self.settings.host)


# a live try's GPUs, their sizes, its promise and CUDA context on each
Followed = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _total_mib(spec: str) -> int:
    """A GPU's memory from its catalogue name (0 where the catalogue does not know it)."""
    try:
        return gpu_spec(spec).memory_mib
    except UnknownGpuSpecError:
        return 0


__all__ = ["Launch", "TryStarter", "end_plan"]
