"""Which isolation mode holds a host's tries to their memory, and the fence of one placed try.

Airflow-free: the executor and the GPU kit both call it.  The mode is resolved once per host
(``[carma] isolation``, or a task's ``executor_config={"carma": {"isolation": ...}}``) by
core/fence_host.py :func:`~carma_airflow.core.fence_host.resolve` (pure: the simulator resolves its
``--host`` profiles with it), from what :func:`host_isolation` detects here:

* ``auto``: the strongest mechanism the host has: NVML per-cgroup limits (taskrun/driver_cap.py)
  -> ``driver``, else an MPS control daemon serving the GPUs -> ``mps``, else ``framework``.
  Simulated GPUs are a host without an MPS daemon or driver limits, as most real hosts are:
  ``auto`` is ``framework`` there too.
* ``framework``/``mps``/``driver``: that mechanism; one the host lacks is a ConfigError that
  says what to start or to choose.  Simulated GPUs play each one as the real one holds a try
  (core/fencing.py ``FenceModel``): framework and MPS caps set once at the try's start (a
  framework cap under ``isolation_cap = live`` re-set from its cap file by the try's follower
  thread, as PyTorch's is; under MPS ``live`` that framework cap moves beneath the MPS limit
  fixed at the start), the driver's hard limit kept in the ledger (re-set by the executor
  under ``live``).  The ledger never re-reads the co-tenants on an allocation: no real
  mechanism does.
* ``none``: unfenced.

Counted in every promise and cap: the per-process CUDA context (core/cuda_context.py).  Promises
and caps are what the GPU counts for the try's process (as NVML reports it, and as learned peaks
are measured), context included.  A framework's allocator (and an MPS client's limit, assumed
alike) sees only its own allocations, so it is set to the cap less the context; a driver's
cgroup limit counts every allocation of the process, context included, so it is set to the cap.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from carma_airflow.core.fence_host import MPS_DEFAULT_PIPE_DIR, MPS_PIPE_ENV, HostIsolation, Resolved, resolve
from carma_airflow.core.fencing import (
    CapRule,
    Fence,
    FenceModel,
    IsolationMode,
    Tenant,
)
from carma_airflow.taskrun.fence_env import UNKNOWN_SIZE_MIB

# the mechanisms whose limit a framework's allocator (or an MPS client) sees: the CUDA context is outside it
ALLOCATOR_LIMITED = frozenset({IsolationMode.FRAMEWORK, IsolationMode.MPS})


def mps_daemon_running(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether an MPS control daemon listens where this host's CUDA clients would look."""
    pipe_dir = Path(environ.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE_DIR)
    return (pipe_dir / "control").exists()


def host_isolation(backend: str, environ: Mapping[str, str] = os.environ) -> HostIsolation:
    """Detect what this host has (NVML is asked only on the nvml backend)."""
    if backend != "nvml":
        return HostIsolation(backend)
    from carma_airflow.monitor.nvml import driver_memory_limits

    support = driver_memory_limits()
    return HostIsolation(backend, mps_daemon_running(environ), support.supported, support.why)


def mechanism_cap_mib(mode: IsolationMode, cap_mib: int, context_mib: int) -> int:
    """What the mechanism itself is set to for a cap (as the GPU counts the process): a framework
    allocator or MPS limit less the CUDA context it cannot see, a driver limit the cap itself."""
    if mode in ALLOCATOR_LIMITED:
        return max(0, cap_mib - max(0, context_mib))
    return cap_mib


def fence_for(
    resolved: Resolved,
    *,
    reservation_mib: int,
    totals_mib: Iterable[int],
    exclusive: bool,
    margin_mib: int,
    rule: CapRule | None = None,
    reserve_mib: int = 0,
    co_tenant_promises: Iterable[int] = (),
    co_tenants_by_gpu: Sequence[Iterable[int]] | None = None,
    context_mib: Sequence[int] | None = None,
) -> Fence:
    """The fence of one placed try, per GPU (``totals_mib``: each GPU's memory, 0 if unknown).

    ``co_tenants_by_gpu``: on each GPU (same order), the promises of the tries placed there, whether
    or not they allocated yet (a promise holds from placement); ``co_tenant_promises`` is the same
    list for every GPU.  ``rule`` overrides the resolved one.  ``context_mib``: each GPU's CUDA
    context (core/cuda_context.py), taken out of a framework or MPS limit.  The fence's promises are
    what the GPU counts for the process; its caps are what the mechanism is set to.
    """
    totals = tuple(int(t) for t in totals_mib)
    if resolved.mode is IsolationMode.NONE:
        return Fence(IsolationMode.NONE, (0,) * len(totals), (0,) * len(totals), totals)
    model = FenceModel.of(resolved.mode, rule if rule is not None else resolved.rule)
    flat = tuple(co_tenant_promises)
    by_gpu = [tuple(o) for o in co_tenants_by_gpu] if co_tenants_by_gpu is not None else [flat] * len(totals)
    if len(by_gpu) != len(totals):
        raise ValueError(f"co_tenants_by_gpu has {len(by_gpu)} lists for {len(totals)} GPUs")
    contexts = tuple(context_mib) if context_mib is not None else (0,) * len(totals)
    unknown = UNKNOWN_SIZE_MIB  # a GPU whose size the executor does not know: the mechanism bounds it
    promises, caps, fixed = [], [], []
    for total, others, context in zip(totals, by_gpu, contexts, strict=True):
        size = total if total > 0 else unknown
        promise = model.promise_mib(reservation_mib, margin_mib, size)
        promises.append(promise)
        tenants = [Tenant(p) for p in others]
        start = model.start_cap_mib(
            promise_mib=promise,
            total_mib=size,
            reserve_mib=reserve_mib,
            co_tenants=tenants,
            exclusive=exclusive,
            margin_mib=margin_mib,
        )
        cap = min(size if start is None else start, size)
        fixed.append(mechanism_cap_mib(model.mode, cap, context))
        if model.start_bound and not exclusive:  # MPS live: PyTorch's fraction starts beneath the fixed limit
            held = model.may_hold_mib(
                start_cap_mib=cap, promise_mib=promise, total_mib=size, reserve_mib=reserve_mib, co_tenants=tenants
            )
            cap = cap if held is None else min(cap, held)
        caps.append(mechanism_cap_mib(model.mode, cap, context))
    bound = model.start_bound and not exclusive
    return Fence(
        model.mode, tuple(promises), tuple(caps), totals, live=model.live and not exclusive,
        fixed_mib=tuple(fixed) if bound else (),
    )  # fmt: skip


__all__ = [
    "ALLOCATOR_LIMITED",
    "MPS_DEFAULT_PIPE_DIR",
    "MPS_PIPE_ENV",
    "HostIsolation",
    "Resolved",
    "fence_for",
    "host_isolation",
    "mechanism_cap_mib",
    "mps_daemon_running",
    "resolve",
]
