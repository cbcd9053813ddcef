"""The environment a placed GPU try runs with.

Airflow-free (the GPU kit's light mode drives the same code without an Airflow): the executor
and the kit both build a try's environment here, so what a task sees is defined once.
"""

from __future__ import annotations

from collections.abc import Sequence

from carma_airflow.checkpoint import CHECKPOINT_ENV, TRY_NUMBER_ENV
from carma_airflow.core.fencing import Fence
from carma_airflow.taskrun.fence_env import fence_env
from carma_airflow.taskrun.outcome import PLACEMENT_ENV, RESULT_ENV, SIM_LEDGER_ENV
from carma_airflow.taskrun.progress import PROGRESS_ENV

# Frameworks otherwise take the whole card (TensorFlow, JAX) or fragment it (PyTorch).
GUARDS: dict[str, str] = {
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}


def gpu_task_env(
    gpu_uuids: Sequence[str],
    *,
    result_path: str,
    placement: str,
    guards: bool = True,
    sim_ledger: str | None = None,
    fence: Fence | None = None,
    checkpoint_dir: str | None = None,
    try_number: int | None = None,
    progress_path: str | None = None,
) -> dict[str, str]:
    """What CarmaExecutor adds to a placed try's environment: only its GPUs, by UUID, in PCI order,
    and the cap it is held to (``fence``, carma_airflow/taskrun/fence_env.py).  Its retry plan is
    the executor's to add (executor/starting/starter.py, taskrun/outcome.py ``END_PLAN_ENV``)."""
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        RESULT_ENV: result_path,
        PLACEMENT_ENV: placement,
    }
    if guards:
        env.update(GUARDS)
    if sim_ledger:
        env[SIM_LEDGER_ENV] = sim_ledger
    if fence is not None:
        env.update(fence_env(fence))
    if checkpoint_dir is not None:  # the task instance's, the same for all its tries (carma_airflow/checkpoint.py)
        env[CHECKPOINT_ENV] = checkpoint_dir
    if try_number is not None:
        env[TRY_NUMBER_ENV] = str(try_number)
    if progress_path is not None:  # where the task may report its progress (taskrun/progress.py)
        env[PROGRESS_ENV] = progress_path
    return env


__all__ = ["GUARDS", "PLACEMENT_ENV", "SIM_LEDGER_ENV", "gpu_task_env"]
