"""Typed errors.  Every message says what to do about it."""

from __future__ import annotations


class CarmaError(Exception):
    """Base class of every error raised on purpose by carma-airflow."""


class ConfigError(CarmaError, ValueError):
    """A setting, a policy name or an executor_config value is invalid."""


class UnknownGpuSpecError(ConfigError):
    """A GPU spec name is not in the catalogue."""


class UnknownPolicyError(ConfigError):
    """A placement policy, estimator or queue name is not known."""


class WorkloadError(CarmaError, ValueError):
    """A trace or task catalogue is missing, malformed or inconsistent."""


class NeverFitsError(CarmaError):
    """A task can never be placed on the given GPUs (too many GPUs or too much memory)."""
