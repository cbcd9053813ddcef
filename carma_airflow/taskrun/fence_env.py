"""A fenced try's cap as its environment carries it: written by the executor, read in the try.

Standard library and core only: the simulated training task (taskrun/simulated_training.py), the
framework import hook and the GPU kit read it in processes that must not import Airflow.

Per GPU lists follow the try's CUDA_VISIBLE_DEVICES order::

    CARMA_ISOLATION=framework            # the mode in force (core.fencing.IsolationMode)
    CARMA_MEMORY_PROMISE_MIB=14336       # what it was placed with, plus the margin (as the GPU counts it)
    CARMA_MEMORY_CAP_MIB=13836           # what the mechanism is set to at the start (a framework's:
                                         # the cap less the CUDA context its allocator cannot see)
    CARMA_MEMORY_CAP_LIVE=1              # the cap is re-set as co-tenants come and go (isolation_cap = live;
                                         # under mps the framework's cap, beneath the MPS limit fixed at start)
    CARMA_MEMORY_CAP_RULE=promise        # the cap rule it was set by (core.fencing.CapRule)
    CARMA_CUDA_CONTEXT_MIB=500           # the CUDA context counted per GPU (core/cuda_context.py)
    CARMA_GPU_TOTAL_MIB=40960            # each GPU's memory, where the executor knows it (0: unknown)
    CARMA_SIM_DRIVER_LEAF=<try id>       # simulated GPUs under driver: the ledger's leaf holding the try

and, by mode, what the mechanism itself reads: ``XLA_CLIENT_MEM_FRACTION`` (JAX, with its
deprecated name ``XLA_PYTHON_CLIENT_MEM_FRACTION``) for framework, and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for mps.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from carma_airflow.core.fencing import Fence, IsolationMode
from carma_airflow.taskrun.outcome import SIM_LEDGER_ENV

ISOLATION_ENV = "CARMA_ISOLATION"
PROMISE_ENV = "CARMA_MEMORY_PROMISE_MIB"
CAP_ENV = "CARMA_MEMORY_CAP_MIB"
LIVE_ENV = "CARMA_MEMORY_CAP_LIVE"
RULE_ENV = "CARMA_MEMORY_CAP_RULE"
CONTEXT_ENV = "CARMA_CUDA_CONTEXT_MIB"
SIM_LEAF_ENV = "CARMA_SIM_DRIVER_LEAF"
TOTAL_ENV = "CARMA_GPU_TOTAL_MIB"
JAX_FRACTION_ENVS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
UNKNOWN_SIZE_MIB = 1 << 30  # the size of a GPU the executor does not know (its mechanism bounds it)


def _join(values: tuple[int, ...]) -> str:
    return ",".join(str(int(v)) for v in values)


def jax_fraction(cap_mib: tuple[int, ...], total_mib: tuple[int, ...]) -> str | None:
    """JAX's one process-wide fraction for these caps: the tightest of its GPUs (JAX has no
    per-device form); None where no GPU is capped below its size or a GPU's size is unknown."""
    capped = [c < t for c, t in zip(cap_mib, total_mib, strict=True) if t > 0]
    if not capped or not any(capped) or not all(t > 0 for t in total_mib):
        return None
    return f"{min(min(1.0, c / t) for c, t in zip(cap_mib, total_mib, strict=True)):.4f}"


def lower_to_framework_caps(environ: MutableMapping[str, str]) -> None:
    """Turn a driver-capped try's caps into what a framework-capped try of the same placement
    gets (its driver limits not in force: taskrun/driver_cap.py ``fall_back``).  The driver's cap
    counts the CUDA context within it; a framework's allocator does not see the context, so each
    GPU's cap goes down by its context (``CARMA_CUDA_CONTEXT_MIB``, as ``mechanism_cap_mib`` sets a
    framework try's), and JAX's fraction is recomputed from those caps.  Nothing changes where the
    environment carries no cap that parses."""
    caps = _ints(environ.get(CAP_ENV))
    if caps is None:
        return
    context = _ints(environ.get(CONTEXT_ENV))
    if context is None or len(context) != len(caps):
        context = (0,) * len(caps)
    lowered = tuple(max(0, c - x) for c, x in zip(caps, context, strict=True))
    environ[CAP_ENV] = _join(lowered)
    totals = _ints(environ.get(TOTAL_ENV))
    fraction = jax_fraction(lowered, totals) if totals is not None and len(totals) == len(caps) else None
    for name in JAX_FRACTION_ENVS:
        if fraction is None:
            environ.pop(name, None)
        else:
            environ[name] = fraction


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
    fraction = jax_fraction(fence.cap_mib, fence.total_mib)
    if fraction is not None:
        env.update(dict.fromkeys(JAX_FRACTION_ENVS, fraction))
    limits = fence.fixed_mib or fence.cap_mib  # MPS live: the limit fixed at start, PyTorch's fraction beneath
    whole = [t > 0 and c >= t for c, t in zip(limits, fence.total_mib, strict=True)]
    if fence.mode is IsolationMode.MPS and not any(whole) and max(limits) < UNKNOWN_SIZE_MIB:
        env[MPS_LIMIT_ENV] = ",".join(f"{i}={cap}M" for i, cap in enumerate(limits))
    return env


def mps_limits_from_env(environ: Mapping[str, str], gpus: int) -> tuple[int, ...] | None:
    """The MPS client's pinned memory limit per GPU in MiB, as ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
    says it (``"0=10240M,1=10240M"``, the form :func:`fence_env` writes); None where it is not set
    for each of the try's ``gpus`` or does not parse."""
    text = environ.get(MPS_LIMIT_ENV, "").strip()
    if not text:
        return None
    found: dict[int, int] = {}
    for part in text.split(","):
        index, _, value = part.strip().partition("=")
        if not index.isdigit() or not value.upper().endswith("M") or not value[:-1].isdigit():
            return None
        found[int(index)] = int(value[:-1])
    if sorted(found) != list(range(gpus)):
        return None
    return tuple(found[i] for i in range(gpus))


@dataclass(frozen=True, slots=True)
class TryFence:
    """The fence a try's own process reads from its environment."""

    mode: IsolationMode
    promise_mib: tuple[int, ...]
    cap_mib: tuple[int, ...]
    live: bool
    rule: str = ""  # promise | protective | live, where the executor said
    context_mib: tuple[int, ...] = field(default_factory=tuple)  # per GPU; () where not said


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
    context = _ints(environ.get(CONTEXT_ENV))
    rule = environ.get(RULE_ENV, "")
    return TryFence(
        mode, promise, cap, environ.get(LIVE_ENV) == "1", rule, context if context and len(context) == len(cap) else ()
    )


def _per_gpu(values: tuple[int, ...]) -> str:
    if len(set(values)) == 1:
        return f"{values[0]} MiB per GPU"
    return ", ".join(f"{v} MiB" for v in values) + " per GPU"


def describe_try_fence(fence: TryFence, environ: Mapping[str, str]) -> str:
    """What holds the try, for its log and the scheduler's: ``capped at <cap per GPU> (<the
    mechanism>, <fixed at the try's start | re-set as co-tenants come and go>; <the CUDA context
    counted>)``.  Simulated GPUs say that the ledger plays the mechanism."""
    simulated = bool(environ.get(SIM_LEDGER_ENV))
    if fence.mode is IsolationMode.DRIVER:
        if environ.get(SIM_LEAF_ENV):
            what = "driver: its leaf's hard limit, which the simulated GPUs' ledger plays (no cgroup here)"
        elif simulated:
            what = "framework: simulated GPUs, no driver limit held"
        else:
            what = "driver: its cgroup's NVML limit, hard"
    elif fence.mode is IsolationMode.MPS:
        what = "mps: the client's pinned memory limit" + (", played by the simulated GPUs' ledger" if simulated else "")
    else:
        what = "framework: PyTorch's fraction" + (", played by the simulated GPUs' ledger" if simulated else "")
    follows = "the executor rewrites it, the try re-reads it once a second"
    pinned = mps_limits_from_env(environ, len(fence.cap_mib)) if fence.mode is IsolationMode.MPS else None
    if fence.live and fence.mode is IsolationMode.MPS:
        limit = f"at {_per_gpu(pinned)}" if pinned else "at the whole GPU (not set)"
        how = (
            f"pinned limit fixed at the try's start {limit}; PyTorch's fraction re-set live beneath it as "
            f"co-tenants come and go ({follows})"
        )
    elif fence.live:
        how = f"re-set as co-tenants come and go ({follows})"
    elif fence.rule == "exclusive":
        how = "fixed at the try's start: its whole GPU, which it has to itself"
    elif fence.rule == "protective":
        how = "fixed at the try's start: the GPU less the co-tenants placed by then"
    elif fence.rule == "promise":
        how = f"fixed at the try's start: its promise, {_per_gpu(fence.promise_mib)}"
    else:
        how = "fixed at the try's start"
    context = ""
    if fence.context_mib and any(fence.context_mib):
        where = "within the limit" if fence.mode is IsolationMode.DRIVER else "outside the allocator's cap"
        context = f"; CUDA context {_per_gpu(fence.context_mib)} counted {where}"
    return f"capped at {_per_gpu(fence.cap_mib)} ({what}; {how}{context})"


__all__ = [
    "CAP_ENV",
    "CONTEXT_ENV",
    "ISOLATION_ENV",
    "JAX_FRACTION_ENVS",
    "LIVE_ENV",
    "MPS_LIMIT_ENV",
    "PROMISE_ENV",
    "RULE_ENV",
    "SIM_LEAF_ENV",
    "SIM_LEDGER_ENV",
    "TOTAL_ENV",
    "TryFence",
    "describe_try_fence",
    "fence_env",
    "fence_from_env",
    "jax_fraction",
    "lower_to_framework_caps",
    "mps_limits_from_env",
]
