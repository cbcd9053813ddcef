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


class DuplicateKeyError(CarmaError, ValueError):
    """A try's key is submitted or reserved while the scheduling cycle already holds it: a driver
    handed the same try over twice (release or withdraw it first)."""


class TaskRefusedError(CarmaError):
    """CarmaExecutor will not run this try (it can never be placed, or its executor_config is
    invalid): raised inside the task process, so the try fails with the reason in its own log and
    Airflow applies the author's ``retries`` to it like to any other failure."""


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for quoting user input in an error message.

    One line whatever the input (repr escapes control characters), and short even for a megabyte
    string or a deeply nested structure.
    """
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
