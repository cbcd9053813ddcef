"""Errors of multi-host dispatch; messages say what to start or set."""

from __future__ import annotations

from carma_airflow.core.errors import CarmaError, ConfigError


class DistributedError(CarmaError):
    """A GPU host, its agent or its Celery worker did not do what dispatch needs."""


class WrongHostError(DistributedError):
    """A try reached the Celery worker of another host than the one it was placed on."""


class CeleryMissingError(ConfigError):
    """``[carma] dispatch = celery`` without the Celery provider installed."""
