"""Static sharing with K tasks per GPU regardless of memory: what users run today.

Kubernetes time-slicing with K replicas, Ray ``num_gpus=1/K`` and an Airflow pool of K slots
per GPU all behave like this: a GPU is a set of K slots, with no memory or activity checks.
"""

from __future__ import annotations

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest


class StaticShare(Policy):
    aliases = ()
    checks_memory = False
    checks_risk = False
    uses_lock = False

    def __init__(self, slots: int) -> None:
        self.max_tenants = slots
        self.name = f"static-{slots}"
        self.description = f"{slots} slots per GPU regardless of memory (time-slicing, Ray 1/{slots})"

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (float(facts.tenants), float(facts.index))
