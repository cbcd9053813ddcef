"""GPU telemetry: the probe protocol, the NVML probe, simulated GPUs and the sampling monitor.

This is the only package that touches NVML (in :mod:`carma_airflow.monitor.nvml`, lazily, at
the first sample).  It imports neither Airflow nor SQLAlchemy.
"""

from carma_airflow.monitor.base import GpuSample, NoGpuDriverError, Probe, ProcessUsage
from carma_airflow.monitor.ledger import (
    Allocation,
    Ledger,
    LedgerError,
    LedgerGpu,
    LedgerState,
    SimulatedCudaOOM,
    sim_uuid,
)
from carma_airflow.monitor.nvml import NvmlProbe
from carma_airflow.monitor.sampler import BACKENDS, Monitor, make_probe
from carma_airflow.monitor.simulated import SimulatedProbe, gpu_telemetry

__all__ = [
    "BACKENDS",
    "Allocation",
    "GpuSample",
    "Ledger",
    "LedgerError",
    "LedgerGpu",
    "LedgerState",
    "Monitor",
    "NoGpuDriverError",
    "NvmlProbe",
    "Probe",
    "ProcessUsage",
    "SimulatedCudaOOM",
    "SimulatedProbe",
    "gpu_telemetry",
    "make_probe",
    "sim_uuid",
]
