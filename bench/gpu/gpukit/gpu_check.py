"""Is there an NVIDIA GPU here?  One line that says why not, shared by run.sh and the pytest marker."""

from __future__ import annotations

NO_GPU_PREFIX = "no NVIDIA GPU here"
_HINT = " On a machine without a GPU set [carma] gpu_backend = simulated."
_TAIL = "real-GPU kit skipped; bench/gpu/run.sh --dry-run runs it on simulated GPUs"


def no_gpu_reason() -> str | None:
    """None when NVML sees at least one GPU, else the one line to print (and skip with)."""
    from carma_airflow.monitor.base import NoGpuDriverError
    from carma_airflow.monitor.nvml import NvmlProbe

    probe = NvmlProbe()
    try:
        samples = probe.sample()
    except NoGpuDriverError as exc:
        why = str(exc).replace(_HINT, "").strip().rstrip(".")
        return f"{NO_GPU_PREFIX} ({why}): {_TAIL}"
    except Exception as exc:  # NVML started but could not read: still no usable GPU
        why = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        return f"{NO_GPU_PREFIX} ({why}): {_TAIL}"
    finally:
        probe.close()
    if not any(s.ok for s in samples):
        return f"{NO_GPU_PREFIX} (NVML sees no readable GPU): {_TAIL}"
    return None
