"""carma-airflow: collocation-aware GPU placement for Apache Airflow.

The placement brains live in :mod:`carma_airflow.core` (pure, no I/O) and the trace
simulator in :mod:`carma_airflow.sim`.  Importing this package loads neither Airflow,
NVML nor SQLAlchemy.
"""

__version__ = "0.1.0"

from typing import Any

__all__ = [
    "GpuTaskConfig",
    "__version__",
    "atomic_path",
    "checkpoint_dir",
    "gpu_task",
    "last_checkpoint",
    "parse_task_config",
    "record_checkpoint",
    "record_resume",
    "report_progress",
]

_CHECKPOINT = ("atomic_path", "checkpoint_dir", "last_checkpoint", "record_checkpoint", "record_resume")


def __getattr__(name: str) -> Any:
    # Lazy: importing carma_airflow.core must not pull in pydantic (or anything else).
    if name in ("GpuTaskConfig", "gpu_task", "parse_task_config"):
        from carma_airflow.config import task_config

        return getattr(task_config, name)
    if name in _CHECKPOINT:  # a task's checkpoint folder (docs/checkpoints.md)
        from carma_airflow import checkpoint

        return getattr(checkpoint, name)
    if name == "report_progress":  # a try's progress, read by the executor (taskrun/progress.py)
        from carma_airflow.taskrun import progress

        return progress.report_progress
    raise AttributeError(f"module 'carma_airflow' has no attribute {name!r}")
