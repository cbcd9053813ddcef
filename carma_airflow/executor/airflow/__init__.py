"""What Airflow calls: :class:`CarmaExecutor` (executor.py, BaseExecutor's contract), its ``running``
set (running.py), deadline callbacks (callbacks.py), the executor while its parts cannot start
(standby.py), and ``airflow carma ...`` (cli.py)."""

from __future__ import annotations

from carma_airflow.executor.airflow.executor import CarmaExecutor

__all__ = ["CarmaExecutor"]
