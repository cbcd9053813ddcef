"""A cap on a GPU's projected SM activity: collocate only while the tenants' activity plus the
newcomer's (the prior assumed for a tenant not seen yet) stays under it."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.task import TaskRequest


class UtilisationCap(Filter):
    """Rejects a GPU where ``smact + prior`` would pass ``cap``."""

    name = "utilisation-cap"
    reason = Reason.INTERFERENCE

    def __init__(self, cap: float, prior: float) -> None:
        self.cap = cap
        self.prior = prior

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        if facts.smact + self.prior <= self.cap:
            return None
        return Rejection(
            self.name,
            self.reason,
            "projected SM activity {have:.2f} + newcomer over the cap",
            "activity",
            requested=self.prior,
            have=facts.smact,
            limit=self.cap,
        )


__all__ = ["UtilisationCap"]
