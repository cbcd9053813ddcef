"""Round-robin: naive sharing with no memory or risk checks, a ring over the GPUs."""

from __future__ import annotations

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest


class RoundRobin(Policy):
    name = "round-robin"
    aliases = ("rr",)
    description = "idle GPUs first, then the next GPU in a ring, without memory or risk checks"
    checks_memory = False
    checks_risk = False
    uses_lock = False
    stable_keys = False  # the ring's start moves after every placement

    def __init__(self) -> None:
        self._cursor = 0  # index of the GPU the ring starts at next time

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        return (float((facts.index - self._cursor) % 1_000_000),)

    def rotate(self, chosen: list[GpuFacts], gpu_count: int) -> None:
        if chosen and gpu_count:
            self._cursor = (max(f.index for f in chosen) + 1) % gpu_count
