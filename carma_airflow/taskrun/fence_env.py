"""A fenced try's cap as its environment carries it: written by the executor, read in the try.

Standard library and core only: the simulated training task (carma_airflow/testing.py), the
framework import hook and the GPU kit read it in processes that must not import Airflow.

Per GPU lists follow the try's CUDA_VISIBLE_DEVICES order::

    CARMA_ISOLATION=framework            # the mode in force (core.fencing.IsolationMode)
    CARMA_MEMORY_PROMISE_MIB=14336       # what it was placed with, plus the margin
    CARMA_MEMORY_CAP_MIB=14336           # the most it may hold
    CARMA_MEMORY_CAP_LIVE=1              # the mechanism tightens the cap to its co-tenants' promises
    CARMA_GPU_TOTAL_MIB=40960            # each GPU's memory, where the executor knows it (0: unknown)

and, by mode, what the mechanism itself reads: ``XLA_CLIENT_MEM_FRACTION`` (JAX, with its
deprecated name ``XLA_PYTHON_CLIENT_MEM_FRACTION``) for framework, and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for mps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from carma_airflow.core.fencing import Fence, IsolationMode

ISOLATION_ENV = "CARMA_ISOLATION"
PROMISE_ENV = "CARMA_MEMORY_PROMISE_MIB"
CAP_ENV = "CARMA_MEMORY_CAP_MIB"
LIVE_ENV = "CARMA_MEMORY_CAP_LIVE"
TOTAL_ENV = "CARMA_GPU_TOTAL_MIB"
JAX_FRACTION_ENVS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
UNKNOWN_SIZE_MIB = 1 << 30  # the size of a GPU the executor does not know (its mechanism bounds it)


def _join(values: tuple[int, ...]) -> str:
    return ",".join(str(int(v)) for v in values)


def fence_env(fence: Fence) -> dict[str, str]:
    """The variables a try with this fence starts with (an unfenced try: only its mode)."""
    env = {ISOLATION_ENV: fence.mode.value}
    if not fence.fenced:
        return env
    env.update(
        {
            PROMISE_ENV: _join(fence.promise_mib),
            CAP_ENV: _join(fence.cap_mib),
            LIVE_ENV: "1" if fence.live else "0",
            TOTAL_ENV: _join(fence.total_mib),
        }
    )
    capped = [c < t for c, t in zip(fence.cap_mib, fence.total_mib, strict=True) if t > 0]
    if capped and any(capped) and all(t > 0 for t in fence.total_mib):
        # one process-wide fraction: the tightest of its GPUs (JAX has no per-device form)
        fraction = f"{min(fence.fractions()):.4f}"
        env.update(dict.fromkeys(JAX_FRACTION_ENVS, fraction))
    whole = [t > 0 and c >= t for c, t in zip(fence.cap_mib, fence.total_mib, strict=True)]
    if fence.mode is IsolationMode.MPS and not any(whole) and max(fence.cap_mib) < UNKNOWN_SIZE_MIB:
        env[MPS_LIMIT_ENV] = ",".join(f"{i}={cap}M" for i, cap in enumerate(fence.cap_mib))
    return env


@dataclass(frozen=True, slots=True)
class TryFence:
    """The fence a try's own process reads from its environment."""

    mode: IsolationMode
    promise_mib: tuple[int, ...]
    cap_mib: tuple[int, ...]
    live: bool


def _ints(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        return None
    return values if all(v >= 0 for v in values) else None


def fence_from_env(environ: Mapping[str, str], gpus: int | None = None) -> TryFence | None:
    """The try's fence, or None where it has none (unfenced, outside CarmaExecutor, or a value
    that does not parse: a cap that cannot be read is not enforced, and the mode says so)."""
    try:
        mode = IsolationMode(environ.get(ISOLATION_ENV, "none"))
    except ValueError:
        return None
    if mode is IsolationMode.NONE:
        return None
    promise, cap = _ints(environ.get(PROMISE_ENV)), _ints(environ.get(CAP_ENV))
    if promise is None or cap is None or len(promise) != len(cap):
        return None
    if gpus is not None and len(cap) != gpus:
        return None
    return TryFence(mode, promise, cap, environ.get(LIVE_ENV) == "1")


__all__ = [
    "CAP_ENV",
    "ISOLATION_ENV",
    "JAX_FRACTION_ENVS",
    "LIVE_ENV",
    "MPS_LIMIT_ENV",
    "PROMISE_ENV",
    "TOTAL_ENV",
    "TryFence",
    "fence_env",
    "fence_from_env",
]
