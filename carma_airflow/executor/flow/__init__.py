"""The life of every try of one executor, Airflow-free: the :class:`TryFlow` (flow.py), the parts
it is built of at start (parts.py), both started all or nothing (runtime.py), and the tries an
earlier executor left (restart.py)."""

from __future__ import annotations

from carma_airflow.executor.flow.flow import TryFlow
from carma_airflow.executor.flow.parts import Parts, build_parts, configured_policy, placement_parts, recovery_settings
from carma_airflow.executor.flow.restart import declined_keeping_retries
from carma_airflow.executor.flow.runtime import NotStartedError, Runtime, start_runtime, state_dir_of

__all__ = [
    "NotStartedError",
    "Parts",
    "Runtime",
    "TryFlow",
    "build_parts",
    "configured_policy",
    "declined_keeping_retries",
    "placement_parts",
    "recovery_settings",
    "start_runtime",
    "state_dir_of",
]
