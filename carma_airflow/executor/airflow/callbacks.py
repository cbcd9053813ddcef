"""Airflow's executor callbacks (deadline alerts' ``SyncCallback``) as CPU processes.

The scheduler hands ``ExecuteCallback`` workloads to the default executor, or to the one a
callback names, without looking at ``supports_callbacks``: an executor that may be the default
must run them.  CarmaExecutor runs each one as LocalExecutor does (Airflow's ``run_workload``),
in a process of its own started by the same launcher as the GPU tries, with no GPU visible
(``CUDA_VISIBLE_DEVICES=""``): a callback never takes a GPU nor waits for one.

Airflow-free apart from the states it reports (the caller passes them in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.launching import Launcher, LauncherError, TaskHandle, confirm

log = logging.getLogger("carma_airflow.executor")

CPU_ONLY_ENV = {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}


@dataclass(slots=True)
class _Running:
    workload: Any
    handle: TaskHandle


class CallbackRunner:
    """Starts callbacks through a launcher and reports how each ended.

    ``report(key, ok)``: the callback's process ended (0 = success).  ``launcher``: returns the
    launcher to use (built lazily: with Celery dispatch, or while the executor is on standby, it
    has no local one until a callback arrives).  It lives as long as the executor: callbacks
    started on standby are reported after the start too.  ``results``: the folder of the
    callbacks' result files (the executor's state folder); ``host``: where they run.
    """

    def __init__(self, launcher: Callable[[], Launcher], results: Path, host: str) -> None:
        self._launcher = launcher
        self.results = results
        self.host = host
        self.running: dict[Any, _Running] = {}
        self.waiting: dict[Any, Any] = {}  # could not start yet (no launcher): tried every sync

    def start(self, workload: Any) -> bool:
        """Start one callback; False if it could not start now (it is tried again at each sync)."""
        key = workload.key
        try:
            launcher = self._launcher()
            path = self.results / f"callback-{workload.callback.id}.json"
            handle = launcher.launch(workload, dict(CPU_ONLY_ENV), path, self.host)
            confirm(handle)
        except (LauncherError, OSError) as exc:
            if key not in self.waiting:
                log.error("Callback %s could not start (%s); tried again at the next heartbeat", key, exc)
            self.waiting[key] = workload
            return False
        self.waiting.pop(key, None)
        self.running[key] = _Running(workload, handle)
        log.info("Callback %s (%s) started as a CPU process", key, workload.display_name)
        return True

    def poll(self, report: Callable[[Any, bool], None]) -> None:
        """Retry what could not start; report each callback whose process ended."""
        for workload in list(self.waiting.values()):
            self.start(workload)
        for key, run in list(self.running.items()):
            ended = run.handle.poll()
            if ended is None:
                continue
            del self.running[key]
            ok = ended.exitcode == 0
            (log.info if ok else log.error)("Callback %s ended with exit code %s", key, ended.exitcode)
            report(key, ok)

    def __len__(self) -> int:
        return len(self.running) + len(self.waiting)

    def __contains__(self, key: object) -> bool:
        return key in self.running or key in self.waiting

    def keys(self) -> set[Any]:
        """The callbacks started or waiting to start."""
        return {*self.running, *self.waiting}


__all__ = ["CPU_ONLY_ENV", "CallbackRunner"]
