"""The launcher seam: what the executor asks of whatever starts a placed try's process.

The executor decides *where* a try runs; a :class:`Launcher` makes it run there and hands back a
:class:`TaskHandle`, which tells when the try has ended and how (:class:`Ended`).  Two launchers
implement this interface side by side, and neither knows the other:

- this host's launcher process, :class:`~carma_airflow.launching.local.LauncherProcess`
  (``[carma] dispatch = local``, the default), with
  :class:`~carma_airflow.launching.local.PidHandle` for a try an earlier executor started;
- the Celery launcher, :class:`~carma_airflow.distributed.dispatch.CeleryLauncher`
  (``[carma] dispatch = celery``): a try goes to its host's queue.

A new launcher (another queue, a container runtime) implements these two protocols and is
chosen in ``executor/flow/parts.py``; nothing else in the executor changes (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from carma_airflow.core.errors import CarmaError
from carma_airflow.taskrun.outcome import TryResult

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask


class LauncherError(CarmaError):
    """A launcher could not start a try (this host's launcher process is started again at the next launch)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """How a try's process ended.  ``exitcode`` None: not known (a process this executor did not start)."""

    exitcode: int | None
    result: TryResult | None
    lost: str | None = None  # the process ended without a word (killed while the executor was away, host lost)

    @property
    def ok(self) -> bool:
        """What the scheduler is told: the process's exit code, or, unknown, what the try reported."""
        if self.exitcode is not None:
            return self.exitcode == 0
        return self.result is not None and self.result.succeeded


class TaskHandle(Protocol):
    @property
    def pid(self) -> int | None: ...

    @property
    def pid_start(self) -> int | None: ...

    def poll(self) -> Ended | None:
        """None while the try runs; how it ended once it has."""
        ...

    def kill(self) -> None:
        """Start ending the try's process and everything it started; returns at once (the next
        polls finish the job and report the end)."""
        ...


class Launcher(Protocol):
    def launch(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        """Start the try on ``host`` (the host of its GPUs) with ``env`` added to its environment."""
        ...


__all__ = ["Ended", "Launcher", "LauncherError", "TaskHandle"]
