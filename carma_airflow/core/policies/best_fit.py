"""Best-fit: the qualifying GPU with the least free memory (tightest fit)."""

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest


class BestFit(Policy):
    name = "best-fit"
    aliases = ("bf",)
    description = "idle GPUs first, then the qualifying GPU with the least free memory"

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (float(facts.usable_free_mib), float(facts.index))
