"""Most free memory (the paper's MAGM): the qualifying GPU with the most free memory."""

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest


class MostFreeMemory(Policy):
    name = "most-free-memory"
    aliases = ("magm",)
    description = "idle GPUs first, then the qualifying GPU with the most free memory (paper: MAGM)"

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (-float(facts.usable_free_mib), float(facts.index))
