"""Airflow plugin: registers the task-process listener (and, later, the UI page)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from carma_airflow.executor import listener


class CarmaPlugin(AirflowPlugin):
    name = "carma"
    listeners = [listener]  # noqa: RUF012  (AirflowPlugin declares these as class attributes)
