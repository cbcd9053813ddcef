"""The Airflow-facing executor.  ``carma_airflow.executor.CarmaExecutor`` is the path for airflow.cfg.

The class is loaded on first use, so the Airflow-free modules of this package (``outcome``,
``view``, ``launch``, ``snapshot``) import without Airflow (the GPU kit's light mode uses them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from carma_airflow.executor.airflow import CarmaExecutor

__all__ = ["CarmaExecutor"]


def __getattr__(name: str) -> Any:
    if name == "CarmaExecutor":
        from carma_airflow.executor.airflow import CarmaExecutor

        return CarmaExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
