"""The CUDA context a try's process holds on each of its GPUs, outside any framework's allocator.

Every process that touches a GPU holds a CUDA context there: the driver's own state, the loaded
kernels (cuBLAS, cuDNN, the framework's), 450-760 MiB per GPU depending on the GPU, the
driver and the libraries loaded.  KAI-Scheduler issue 2212 reports about 450 MiB per GPU on a
T4; ``bench/gpu/run.sh fence`` measured 610 MiB on an H200 after ``torch.cuda.init()``, 676 MiB
with cuBLAS loaded (PyTorch 2.11, CUDA 13, driver 580), and a training transformer there held
about 760 MiB outside PyTorch's allocator (its OOM message: 7.37 GiB in use, 6.63 GiB PyTorch's;
docs/measured.md, 2026-12-04).  NVML counts it in the process's memory (so a learned peak, measured there, includes it);
a framework's allocator does not see it (PyTorch's ``set_per_process_memory_fraction`` limits
only what the caching allocator reserves).

How carma counts it (taskrun/isolation.py): a reservation, a promise and a cap are what the GPU
counts for the process, context included.  A framework (or MPS) limit is set to the cap less
the context, so the process as the GPU counts it stays within its cap; a driver limit (a cgroup,
which counts every allocation of the process) is set to the cap itself.  A declared memory is
read the same way: what ``nvidia-smi`` shows for the task, context included.

The figures below are per GPU model, matched by the catalogue name's family (``A100-40GB`` ->
``A100``); a model without one counts :data:`DEFAULT_CONTEXT_MIB`, the H200's figure: contexts
grow with the CUDA and library stack more than with the chip, and a stack of today is what a new
install runs.  Replace it per model with what ``bench/gpu/run.sh fence`` measures there.
Simulated GPUs hold no context (the simulated training allocates none).
"""

from __future__ import annotations

# what a training process held outside its allocator on the one GPU measured with today's stack
# (an H200, 2026-12-04); a cap too tight by a little beats one too loose
DEFAULT_CONTEXT_MIB = 768

# per GPU family: MiB of CUDA context per process and GPU; (figure, where it comes from)
CONTEXT_MIB: dict[str, tuple[int, str]] = {
    "T4": (450, "reported (KAI-Scheduler issue 2212)"),
    "H200": (768, "measured (bench/gpu/run.sh fence and a training try, 2026-12-04: 610-760 MiB)"),
}


def _family(gpu_name: str) -> str:
    name = gpu_name.strip().upper()
    for prefix in ("NVIDIA ", "TESLA "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.split("-")[0].split(" ")[0]


def cuda_context_mib(gpu_name: str, *, simulated: bool = False) -> int:
    """MiB of CUDA context one process holds on a GPU of this model (0 on simulated GPUs)."""
    if simulated:
        return 0
    found = CONTEXT_MIB.get(_family(gpu_name))
    return found[0] if found is not None else DEFAULT_CONTEXT_MIB


def context_source(gpu_name: str, *, simulated: bool = False) -> str:
    """Where :func:`cuda_context_mib`'s figure comes from, for logs."""
    if simulated:
        return "simulated GPUs hold no CUDA context"
    found = CONTEXT_MIB.get(_family(gpu_name))
    if found is not None:
        return found[1]
    return f"assumed ({DEFAULT_CONTEXT_MIB} MiB, the H200's: not measured on this model yet)"


__all__ = ["CONTEXT_MIB", "DEFAULT_CONTEXT_MIB", "context_source", "cuda_context_mib"]
