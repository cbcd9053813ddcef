"""The paper's risk rule (:func:`carma_airflow.core.risk.is_high_risk`): no sharing of a GPU whose
SMs are busy and whose occupancy or DRAM bandwidth is busy too."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.risk import RiskSettings
from carma_airflow.core.task import TaskRequest


class RiskRule(Filter):
    """Rejects a GPU the facts flag high-risk (:attr:`GpuFacts.high_risk`, from ``risk``'s thresholds)."""

    name = "risk-rule"
    reason = Reason.RISK

    def __init__(self, risk: RiskSettings) -> None:
        self.risk = risk
        # one rejection per (activity, occupancy, DRAM): a GPU's window scores stay while its
        # samples do, and the pool cache classifies it again whenever its state is a new object
        self._by_scores: dict[tuple[float, float, float], Rejection] = {}

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        if not facts.high_risk:
            return None
        scores = (facts.smact, facts.smocc, facts.drama)
        got = self._by_scores.get(scores)
        if got is None:
            if len(self._by_scores) > 4096:
                self._by_scores.clear()
            got = self._by_scores[scores] = self._rejection(facts)
        return got

    def _rejection(self, facts: GpuFacts) -> Rejection:
        r = self.risk
        return Rejection(
            self.name,
            self.reason,
            "SM activity {have:.2f}, occupancy {occupancy:.2f}, DRAM {dram:.2f}",
            "activity",
            have=facts.smact,
            limit=r.smact_threshold,
            more=(
                ("occupancy", facts.smocc),
                ("dram", facts.drama),
                ("occupancy_limit", r.smocc_threshold),
                ("dram_limit", r.drama_threshold),
            ),
        )


__all__ = ["RiskRule"]
