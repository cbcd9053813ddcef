"""How a placed try is started: its environment (its GPUs, its fence, the kill rule or its refusal),
a fresh token, and the launcher of its host (starter.py); driver caps on simulated GPUs (sim_driver.py)."""

from __future__ import annotations

from carma_airflow.executor.starting.sim_driver import SimulatedDriverCaps
from carma_airflow.executor.starting.starter import Launch, TryStarter

__all__ = ["Launch", "SimulatedDriverCaps", "TryStarter"]
