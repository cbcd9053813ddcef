"""How a placed try gets a process: the launcher seam of the executor.

The executor decides *where* a try runs; a :class:`Launcher` makes it run there and a
:class:`TaskHandle` tells when it has ended and how.  :class:`LocalLauncher` forks one process
per try on this host (its own session, so an executor restart does not take the task with it);
:class:`PidHandle` follows a process started by an earlier executor (restart reconciliation).
Remote launchers (Celery) implement the same two protocols.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from carma_airflow.executor.outcome import TryResult, read_result

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask


@dataclass(frozen=True, slots=True)
class Ended:
    """How a try's process ended.  ``exitcode`` None: not known (a process this executor did not start)."""

    exitcode: int | None
    result: TryResult | None
    lost: str | None = None  # the process ended without a word (killed while the executor was away, host lost)


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


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        if fields[0] == "Z":  # a zombie has ended
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


KILL_GRACE_S = 5.0  # SIGTERM first; what still runs this long after gets SIGKILL


class _GroupStop:
    """Stops a try's process group without blocking the scheduler loop: ``start`` sends SIGTERM,
    ``escalate`` (called from each poll) sends SIGKILL once the grace time has passed."""

    def __init__(self) -> None:
        self._kill_at: float | None = None

    def start(self, pid: int) -> None:
        if self._kill_at is None:
            _signal_group(pid, signal.SIGTERM)
            self._kill_at = time.monotonic() + KILL_GRACE_S

    def escalate(self, pid: int) -> None:
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _run_in_child(workload: ExecuteTask, env: dict[str, str], server: str) -> None:
    """Body of the per-task process: own session, this try's devices, then run it like LocalExecutor."""
    from airflow.executors.base_executor import BaseExecutor

    from carma_airflow.executor.killguard import install_kill_guard

    os.setsid()  # survives an executor restart; killed as a group
    os.environ.update(env)
    install_kill_guard()
    code = BaseExecutor.run_workload(
        workload,
        server=server,
        proctitle=f"airflow worker -- CarmaExecutor: {workload.display_name}",
        subprocess_logs_to_stdout=True,
    )
    os._exit(code if isinstance(code, int) else 0)


class ForkHandle:
    """A try running in a child process of this executor."""

    def __init__(self, process: Any, result_path: Path) -> None:
        self.process = process
        self.result_path = result_path
        self._pid_start = process_start_ticks(process.pid) if process.pid else None
        self._stop = _GroupStop()

    @property
    def pid(self) -> int | None:
        return int(self.process.pid) if self.process.pid else None

    @property
    def pid_start(self) -> int | None:
        return self._pid_start

    def poll(self) -> Ended | None:
        if self.process.is_alive():
            self._stop.escalate(self.process.pid)
            return None
        self.process.join(timeout=0)
        return Ended(self.process.exitcode, read_result(self.result_path))

    def kill(self) -> None:
        if self.process.is_alive() and self.process.pid:
            self._stop.start(self.process.pid)


class PidHandle:
    """A try whose process an earlier executor started (found again after a restart).

    The process is not our child: it is alive while /proc shows it with the recorded start
    time (a reused PID has another), and its exit code is not known, only its result file.
    """

    def __init__(self, pid: int, pid_start: int | None, result_path: Path) -> None:
        self._pid = pid
        self._pid_start = pid_start
        self.result_path = result_path
        self._stop = _GroupStop()

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def pid_start(self) -> int | None:
        return self._pid_start

    def alive(self) -> bool:
        ticks = process_start_ticks(self._pid)
        return ticks is not None and (self._pid_start is None or ticks == self._pid_start)

    def poll(self) -> Ended | None:
        if self.alive():
            self._stop.escalate(self._pid)
            return None
        result = read_result(self.result_path)
        if result is None:
            return Ended(None, None, lost="the task process ended without a result while the executor was away")
        return Ended(0 if result.state == "success" else 1, result)

    def kill(self) -> None:
        if self.alive():
            self._stop.start(self._pid)


class LocalLauncher:
    """One forked process per try on this host."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("fork")

    def launch(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        from airflow.executors.base_executor import get_execution_api_server_url

        process = self._ctx.Process(
            target=_run_in_child, args=(workload, env, get_execution_api_server_url()), daemon=False
        )
        process.start()
        return ForkHandle(process, result_path)


__all__ = [
    "KILL_GRACE_S",
    "Ended",
    "ForkHandle",
    "Launcher",
    "LocalLauncher",
    "PidHandle",
    "TaskHandle",
    "process_start_ticks",
]
