"""How a placed try gets a process: the launcher interface, this host's launcher, the try's environment.

- :mod:`.interface`: what the executor asks of a launcher (:class:`Launcher`, :class:`TaskHandle`,
  :class:`Ended`, :class:`LauncherError`); the Celery launcher (``distributed/dispatch.py``)
  implements it too, and neither launcher knows the other nor the executor;
- :mod:`.local`: this host's launcher process (:class:`LauncherProcess`, ``[carma] dispatch =
  local``) and :class:`PidHandle` for a try an earlier executor started;
- :mod:`.taskenv`: the environment a placed GPU try runs with, and :mod:`.envcheck`, its checks.

Airflow-free: the GPU kit's light mode and the task side import it.
"""

from __future__ import annotations

from carma_airflow.launching.envcheck import check_cuda_visible_devices, check_task_env
from carma_airflow.launching.interface import Ended, Launcher, LauncherError, TaskHandle
from carma_airflow.launching.local import (
    KILL_GRACE_S,
    MPS_KILL_GRACE_S,
    LaunchedHandle,
    LauncherProcess,
    PidHandle,
    confirm,
    kill_grace_s,
)
from carma_airflow.launching.taskenv import GUARDS, gpu_task_env

__all__ = [
    "GUARDS",
    "KILL_GRACE_S",
    "MPS_KILL_GRACE_S",
    "Ended",
    "LaunchedHandle",
    "Launcher",
    "LauncherError",
    "LauncherProcess",
    "PidHandle",
    "TaskHandle",
    "check_cuda_visible_devices",
    "check_task_env",
    "confirm",
    "gpu_task_env",
    "kill_grace_s",
]
