"""Least utilised (the paper's LUG): the qualifying GPU with the lowest SM-activity score."""

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest


class LeastUtilised(Policy):
    name = "least-utilised"
    aliases = ("lug", "least-utilized")
    description = "idle GPUs first, then the qualifying GPU with the lowest SM activity score (paper: LUG)"

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (facts.smact, float(facts.index))
