"""How a try becomes a process: its environment (its GPUs, the kill rule, or the refusal), a
fresh token, and the launcher of the host it goes to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.core.decision import Decision
from carma_airflow.core.recovery import author_retry_left
from carma_airflow.dagparse.cluster_policy import author_retries_of
from carma_airflow.executor.envcheck import check_task_env
from carma_airflow.executor.launch import Launcher, TaskHandle
from carma_airflow.executor.taskenv import gpu_task_env
from carma_airflow.executor.tries import Try
from carma_airflow.settings import CarmaSettings
from carma_airflow.taskrun.killguard import retry_on_kill_env

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask


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


class TryStarter:
    def __init__(
        self, settings: CarmaSettings, launcher: Launcher, token_for: Callable[[str], str], ledger_path: Path
    ) -> None:
        self.settings = settings
        self.launcher = launcher
        self.token_for = token_for  # ti id -> a fresh JWT for the Execution API
        self.ledger_path = ledger_path

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
            placement=decision.summary,
            prior_ooms=attempt.prior_ooms,
            guards=self.settings.framework_guards,
            sim_ledger=str(self.ledger_path) if self.settings.gpu_backend == "simulated" else None,
        )
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


__all__ = ["Launch", "TryStarter", "kill_env"]
