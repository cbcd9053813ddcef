"""The Airflow-facing executor.  ``carma_airflow.executor.CarmaExecutor`` is the path for airflow.cfg."""

from carma_airflow.executor.executor import CarmaExecutor

__all__ = ["CarmaExecutor"]
