"""carma-airflow: collocation-aware GPU placement for Apache Airflow.

The placement brains live in :mod:`carma_airflow.core` (pure, no I/O) and the trace
simulator in :mod:`carma_airflow.sim`.  Importing this package loads neither Airflow,
NVML nor SQLAlchemy.
"""

__version__ = "0.1.0"

from typing import Any

__all__ = ["GpuTaskConfig", "__version__", "gpu_task", "parse_task_config"]


def __getattr__(name: str) -> Any:
    # Lazy: importing carma_airflow.core must not pull in pydantic (or anything else).
    if name in ("GpuTaskConfig", "gpu_task", "parse_task_config"):
        from carma_airflow import task_config

        return getattr(task_config, name)
    raise AttributeError(f"module 'carma_airflow' has no attribute {name!r}")
