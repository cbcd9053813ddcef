"""A try's own account of its CUDA OOM: past its cap, or a full GPU (core/recovery.py).

The try's process knows its fence best: the mode and cap per GPU in its environment
(taskrun/fence_env.py), its live cap file as the executor last re-set it (taskrun/live_cap.py),
and what its framework's allocator holds.  The retry policy (taskrun/retry.py) and the listener
(taskrun/listener.py) classify with them, so a PyTorch OOM within its cap is told as the full GPU
it was (PyTorch writes "allowed" in every OOM once a fraction is set), and a TensorFlow or JAX try
stopped by its limit is told past its cap where what it held says so.

Standard library and core only at import (frameworks are read from ``sys.modules``, never imported).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.oom_figures import KnownFence, oom_figures
from carma_airflow.core.recovery import Failure, classify_failure
from carma_airflow.taskrun.fence_env import fence_from_env, mps_limits_from_env
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, read_caps
from carma_airflow.taskrun.outcome import SIM_LEDGER_ENV

_MIB = 1024 * 1024


def fence_in_force(environ: Mapping[str, str] = os.environ) -> KnownFence | None:
    """The try's fence as it holds the try now; None where it has none.

    A live cap file (``isolation_cap = live``) holds what PyTorch's allocator is set to now (the
    cap less the CUDA context): a driver's limit, which the executor re-sets with it, is that
    plus the context; the simulated GPUs' ledger follows it as PyTorch does (under MPS beneath
    the pinned limit).  A real PyTorch OOM
    names its cap at the OOM itself ("... allowed;"); TensorFlow's and JAX's limits and MPS's
    pinned limit are set once, at the start: the environment's caps."""
    gpus = len([u for u in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip()])
    fence = fence_from_env(environ, gpus or None)
    if fence is None:
        return None
    caps = fence.cap_mib
    path = environ.get(CAP_FILE_ENV)
    now = read_caps(path) if path else None
    if now is not None and len(now) == len(caps):
        context = fence.context_mib or (0,) * len(caps)
        if fence.mode is IsolationMode.DRIVER:
            caps = tuple(c + x for c, x in zip(now, context, strict=True))
        elif fence.mode is IsolationMode.FRAMEWORK and environ.get(SIM_LEDGER_ENV):
            caps = now
        elif fence.mode is IsolationMode.MPS and environ.get(SIM_LEDGER_ENV):  # beneath the pinned limit
            pinned = mps_limits_from_env(environ, len(caps)) or now
            caps = tuple(min(c, p) for c, p in zip(now, pinned, strict=True))
    return KnownFence(fence.mode, caps, fence.context_mib)


def _torch_held(torch: Any, gpu: int) -> int | None:
    if not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.memory_reserved(gpu)) // _MIB


def _tensorflow_held(tf: Any, gpu: int) -> int | None:
    return int(tf.config.experimental.get_memory_info(f"GPU:{gpu}")["current"]) // _MIB


def _jax_held(jax: Any, gpu: int) -> int | None:
    stats = jax.local_devices()[gpu].memory_stats() or {}
    return int(stats["bytes_in_use"]) // _MIB if "bytes_in_use" in stats else None


_COUNTERS = (("torch", _torch_held), ("tensorflow", _tensorflow_held), ("jax", _jax_held))


def framework_held_mib(gpu: int = 0) -> int | None:
    """What this process's framework allocator holds on its visible GPU ``gpu`` now, in MiB (the
    first of PyTorch, TensorFlow, JAX loaded that can say); None where none can."""
    for name, held in _COUNTERS:
        module = sys.modules.get(name)
        if module is None:
            continue
        try:
            found = held(module, gpu)
        except Exception:  # a framework in a state where it cannot say: the next one, or none
            continue
        if found is not None:
            return found
    return None


def classify_here(exc_type: str | None, message: str | None, environ: Mapping[str, str] = os.environ) -> Failure:
    """Classify this try's failure with what it knows of its fence and what it holds."""
    fence = fence_in_force(environ)
    held = framework_held_mib(oom_figures(message).gpu or 0) if fence is not None else None
    return classify_failure(exc_type, message, fence=fence, held_mib=held)


__all__ = ["classify_here", "fence_in_force", "framework_held_mib"]
