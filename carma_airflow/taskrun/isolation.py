"""Which isolation mode holds a host's tries to their memory, and the fence of one placed try.

Airflow-free: the executor and the GPU kit both call it.  The mode is resolved once per host
(``[carma] isolation``, or a task's ``executor_config={"carma": {"isolation": ...}}``):

* ``auto``: the strongest mechanism the host has: NVML per-cgroup limits (taskrun/driver_cap.py)
  -> ``driver``, else an MPS control daemon serving the GPUs -> ``mps``, else ``framework``.
  On simulated GPUs the ledger enforces the cap and tightens it as tenants arrive (live).
* ``framework``/``mps``/``driver``: that mechanism; one the host lacks is a ConfigError that
  says what to start or to choose.  On simulated GPUs the ledger plays the mechanism: a cap
  fixed at the try's start, as the real one is.
* ``none``: unfenced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import CapRule, Fence, IsolationMode, promise_mib, start_cap_mib
from carma_airflow.taskrun.fence_env import UNKNOWN_SIZE_MIB

MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # NVIDIA's documented default
_DRIVER_FALLBACK = "a try NVML refuses runs with framework caps, its log says so"


@dataclass(frozen=True, slots=True)
class HostIsolation:
    """What a host offers to fence its tries."""

    backend: str  # nvml | simulated
    mps_daemon: bool = False
    driver_limits: bool = False
    driver_why: str = "not checked"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The mode in force, whether its cap follows the co-tenants, and why it was chosen."""

    mode: IsolationMode
    live: bool
    why: str

    def describe(self) -> str:
        if self.mode is IsolationMode.NONE:
            return f"isolation: none (unfenced): {self.why}"
        return f"isolation: {self.mode.value}{' (live caps)' if self.live else ''}: {self.why}"


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


def resolve(requested: IsolationMode, host: HostIsolation) -> Resolved:
    """The mode in force for ``requested`` on ``host``; ConfigError for a mechanism it lacks."""
    if requested is IsolationMode.NONE:
        return Resolved(IsolationMode.NONE, False, "isolation = none: a try that grows can crash its co-tenants")
    if host.backend == "simulated":
        if requested is IsolationMode.AUTO:
            return Resolved(IsolationMode.FRAMEWORK, True, "simulated GPUs: the ledger holds each try to its cap")
        return Resolved(requested, False, f"simulated GPUs: the ledger plays {requested.value}'s fixed cap")
    if requested is IsolationMode.DRIVER:
        if not host.driver_limits:
            raise ConfigError(
                f"[carma] isolation = driver: {host.driver_why}; use isolation = mps (with an MPS control daemon) "
                "or framework"
            )
        return Resolved(
            IsolationMode.DRIVER,
            False,
            f"NVML per-cgroup limits, one cgroup leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}",
        )
    if requested is IsolationMode.AUTO and host.driver_limits:
        return Resolved(
            IsolationMode.DRIVER,
            False,
            f"auto: NVML per-cgroup limits, one leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}",
        )
    if requested is IsolationMode.MPS:
        if not host.mps_daemon:
            raise ConfigError(
                "[carma] isolation = mps but no MPS control daemon serves this host's GPUs (no control pipe in "
                f"${MPS_PIPE_ENV} or {MPS_DEFAULT_PIPE_DIR}): start `nvidia-cuda-mps-control -d` as the user the "
                "tasks run as, or use isolation = framework"
            )
        return Resolved(IsolationMode.MPS, False, "an MPS control daemon serves the GPUs")
    if requested is IsolationMode.AUTO and host.mps_daemon:
        return Resolved(IsolationMode.MPS, False, "auto: an MPS control daemon serves the GPUs")
    why = "PyTorch / TensorFlow / JAX allocator limits set in the try"
    if requested is IsolationMode.AUTO:
        why = f"auto: no MPS daemon, no driver limits ({host.driver_why}); {why}"
    return Resolved(IsolationMode.FRAMEWORK, False, why)


def fence_for(
    resolved: Resolved,
    *,
    reservation_mib: int,
    totals_mib: Iterable[int],
    exclusive: bool,
    margin_mib: int,
    rule: CapRule = CapRule.PROMISE,
    reserve_mib: int = 0,
    co_tenant_promises: Iterable[int] = (),
) -> Fence:
    """The fence of one placed try, per GPU (``totals_mib``: each GPU's memory, 0 if unknown)."""
    totals = tuple(int(t) for t in totals_mib)
    others = tuple(co_tenant_promises)
    if resolved.mode is IsolationMode.NONE:
        return Fence(IsolationMode.NONE, (0,) * len(totals), (0,) * len(totals), totals)
    unknown = UNKNOWN_SIZE_MIB  # a GPU whose size the executor does not know: the mechanism bounds it
    promises, caps = [], []
    for total in totals:
        size = total if total > 0 else unknown
        # a live cap lets a try use whatever nobody reserved, so it needs no margin: promises are
        # the reservations, which the placer never lets add up to more than the GPU
        promise = promise_mib(reservation_mib, 0 if resolved.live else margin_mib, size)
        promises.append(promise)
        ceiling = start_cap_mib(
            rule,
            promise=promise,
            total_mib=size,
            reserve_mib=reserve_mib,
            co_tenant_promises=others,
            exclusive=exclusive or resolved.live,
        )
        caps.append(min(ceiling, size))
    return Fence(resolved.mode, tuple(promises), tuple(caps), totals, live=resolved.live and not exclusive)


__all__ = [
    "MPS_DEFAULT_PIPE_DIR",
    "MPS_PIPE_ENV",
    "HostIsolation",
    "Resolved",
    "fence_for",
    "host_isolation",
    "mps_daemon_running",
    "resolve",
]
