"""Trace-driven simulation over the placement core (pandas allowed here, not in core)."""

from carma_airflow.sim.engine import SimConfig, Simulation, simulate
from carma_airflow.sim.metrics import SimResult, TaskRecord, TimelineEntry
from carma_airflow.sim.workload import Arrival, TaskType, load_catalog, load_trace, packaged, synthetic_trace

__all__ = [
    "Arrival",
    "SimConfig",
    "SimResult",
    "Simulation",
    "TaskRecord",
    "TaskType",
    "TimelineEntry",
    "load_catalog",
    "load_trace",
    "packaged",
    "simulate",
    "synthetic_trace",
]
