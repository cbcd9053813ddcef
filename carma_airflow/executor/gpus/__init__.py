"""What the executor makes of its GPUs' readings: the placer's view of them (view.py), the GPU
faults that stop running tries (faults.py), and MPS servers a client's fault took down (mps_guard.py).
Airflow-free (the GPU kit's light mode builds its view here)."""

from __future__ import annotations

from carma_airflow.executor.gpus.faults import FaultWatch
from carma_airflow.executor.gpus.mps_guard import MpsGuard, control_pipe_id, mps_fault_of
from carma_airflow.executor.gpus.view import GpuSight, build_view

__all__ = ["FaultWatch", "GpuSight", "MpsGuard", "build_view", "control_pipe_id", "mps_fault_of"]
