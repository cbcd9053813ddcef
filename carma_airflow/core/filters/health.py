"""A GPU's health: quarantined after GPU errors (any GPU), or without fresh telemetry (no sharing)."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.gpu import GpuHealth
from carma_airflow.core.task import TaskRequest


class Healthy(Filter):
    """No try on a GPU quarantined after GPU errors (asked of idle GPUs too)."""

    name = "healthy"
    reason = Reason.UNHEALTHY
    idle_too = True

    def __init__(self) -> None:
        self._rejection = Rejection(self.name, self.reason, "quarantined after GPU errors", have="quarantined")

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return self._rejection if facts.state.health is GpuHealth.QUARANTINED else None


class FreshTelemetry(Filter):
    """No sharing of a GPU whose samples went stale: its tenants' use is not known."""

    name = "fresh-telemetry"
    reason = Reason.STALE

    def __init__(self) -> None:
        self._rejection = Rejection(self.name, self.reason, "no fresh samples: collocation stopped", have="stale")

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return self._rejection if facts.state.health is GpuHealth.STALE else None


__all__ = ["FreshTelemetry", "Healthy"]
