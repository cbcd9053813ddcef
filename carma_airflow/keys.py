"""Names of a try shared by the executor, the store and the GPU hosts (no Airflow import).

A try's *request key* (``dag/task/run/map_index/try``) names its placement in the store, its
dispatch to a GPU host and its request in the placer.
"""

from __future__ import annotations

from typing import Protocol


class TryKey(Protocol):
    """What a request key is made of: Airflow's ``TaskInstanceKey`` has these fields."""

    @property
    def dag_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def map_index(self) -> int: ...

    @property
    def try_number(self) -> int: ...


def request_key(key: TryKey) -> str:
    """``dag_id/task_id/run_id/map_index/try_number`` of one try."""
    return f"{key.dag_id}/{key.task_id}/{key.run_id}/{key.map_index}/{key.try_number}"
