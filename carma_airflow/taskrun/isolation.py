"""Which isolation mode holds a host's tries to their memory, and the fence of one placed try.

Airflow-free: the executor and the GPU kit both call it.  The mode is resolved once per host
(``[carma] isolation``, or a task's ``executor_config={"carma": {"isolation": ...}}``):

* ``auto``: the strongest mechanism the host has: NVML per-cgroup limits (taskrun/driver_cap.py)
  -> ``driver``, else an MPS control daemon serving the GPUs -> ``mps``, else ``framework``.
  Simulated GPUs are a host without an MPS daemon or driver limits, as most real hosts are:
  ``auto`` is ``framework`` there too.
* ``framework``/``mps``/``driver``: that mechanism; one the host lacks is a ConfigError that
  says what to start or to choose.  Simulated GPUs play each one as the real one holds a try
  (core/fencing.py ``FenceModel``): framework and MPS caps set once at the try's start (a
  framework cap under ``isolation_cap = live`` re-set from its cap file by the try's follower
  thread, as PyTorch's is), the driver's hard limit kept in the ledger (re-set by the executor
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
from dataclasses import dataclass
from pathlib import Path

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import CapRule, Fence, FenceModel, IsolationMode, Tenant
from carma_airflow.taskrun.fence_env import UNKNOWN_SIZE_MIB

MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # NVIDIA's documented default
_DRIVER_FALLBACK = "a try NVML refuses runs with framework caps, its log says so"
# the mechanisms whose limit a framework's allocator (or an MPS client) sees: the CUDA context is outside it
ALLOCATOR_LIMITED = frozenset({IsolationMode.FRAMEWORK, IsolationMode.MPS})


@dataclass(frozen=True, slots=True)
class HostIsolation:
    """What a host offers to fence its tries."""

    backend: str  # nvml | simulated
    mps_daemon: bool = False
    driver_limits: bool = False
    driver_why: str = "not checked"


@dataclass(frozen=True, slots=True)
class Resolved:
    """The mechanism in force, the cap rule it is played with, and why it was chosen."""

    mode: IsolationMode
    why: str
    rule: CapRule = CapRule.PROMISE
    simulated: bool = False  # simulated GPUs: the ledger plays the mechanism

    @property
    def model(self) -> FenceModel:
        """How the mechanism holds a try under the rule (core/fencing.py)."""
        return FenceModel.of(self.mode, self.rule)

    @property
    def live(self) -> bool:
        """The cap follows the co-tenants while the try runs (else it stays where its start set it)."""
        return self.model.live

    def describe(self) -> str:
        if self.mode is IsolationMode.NONE:
            return f"isolation: none (unfenced): {self.why}"
        return f"isolation: {cap_words(self.model)}: {self.why}"


def cap_words(model: FenceModel) -> str:
    """How a mechanism under its rule holds a try, in words (logs, ``carma why``)."""
    mode = model.mode.value
    if not model.fenced:
        return "none (unfenced)"
    if model.live:
        return f"{mode}, cap re-set as co-tenants come and go (within about {model.reset_s:g} s of a change)"
    if model.rule is CapRule.PROTECTIVE:
        return f"{mode}, cap fixed at the try's start (the GPU less its co-tenants then)"
    return f"{mode}, cap fixed at the try's start (its promise: reservation + margin)"


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


def resolve(requested: IsolationMode, host: HostIsolation, rule: CapRule = CapRule.PROMISE) -> Resolved:
    """The mechanism in force for ``requested`` on ``host`` under ``rule`` ([carma] isolation_cap);
    ConfigError for a mechanism the host lacks."""
    if requested is IsolationMode.NONE:
        return Resolved(IsolationMode.NONE, "isolation = none: a try that grows can crash its co-tenants")
    if host.backend == "simulated":
        if requested is IsolationMode.AUTO:
            why = "auto: simulated GPUs, a host without an MPS daemon or driver limits; the ledger plays framework caps"
            return Resolved(IsolationMode.FRAMEWORK, why, rule, simulated=True)
        plays = {
            IsolationMode.FRAMEWORK: "framework caps (PyTorch's fraction, re-read from its cap file if live)",
            IsolationMode.MPS: "MPS's pinned memory limit, read once at the client's start",
            IsolationMode.DRIVER: "the cgroup's NVML hard limit, kept in the ledger (no cgroup here)",
        }[requested]
        return Resolved(requested, f"simulated GPUs: the ledger plays {plays}", rule, simulated=True)
    if requested is IsolationMode.DRIVER:
        if not host.driver_limits:
            raise ConfigError(
                f"[carma] isolation = driver: {host.driver_why}; use isolation = mps (with an MPS control daemon) "
                "or framework"
            )
        return Resolved(
            IsolationMode.DRIVER,
            f"NVML per-cgroup limits, one cgroup leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}",
            rule,
        )
    if requested is IsolationMode.AUTO and host.driver_limits:
        return Resolved(
            IsolationMode.DRIVER,
            f"auto: NVML per-cgroup limits, one leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}",
            rule,
        )
    if requested is IsolationMode.MPS:
        if not host.mps_daemon:
            raise ConfigError(
                "[carma] isolation = mps but no MPS control daemon serves this host's GPUs (no control pipe in "
                f"${MPS_PIPE_ENV} or {MPS_DEFAULT_PIPE_DIR}): start `nvidia-cuda-mps-control -d` as the user the "
                "tasks run as, or use isolation = framework"
            )
        return Resolved(IsolationMode.MPS, "an MPS control daemon serves the GPUs", rule)
    if requested is IsolationMode.AUTO and host.mps_daemon:
        return Resolved(IsolationMode.MPS, "auto: an MPS control daemon serves the GPUs", rule)
    why = "PyTorch / TensorFlow / JAX allocator limits set in the try"
    if requested is IsolationMode.AUTO:
        why = f"auto: no MPS daemon, no driver limits ({host.driver_why}); {why}"
    return Resolved(IsolationMode.FRAMEWORK, why, rule)


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
    promises, caps = [], []
    for total, others, context in zip(totals, by_gpu, contexts, strict=True):
        size = total if total > 0 else unknown
        promise = model.promise_mib(reservation_mib, margin_mib, size)
        promises.append(promise)
        start = model.start_cap_mib(
            promise_mib=promise,
            total_mib=size,
            reserve_mib=reserve_mib,
            co_tenants=[Tenant(p) for p in others],
            exclusive=exclusive,
        )
        cap = min(size if start is None else start, size)
        caps.append(mechanism_cap_mib(model.mode, cap, context))
    return Fence(model.mode, tuple(promises), tuple(caps), totals, live=model.live and not exclusive)


__all__ = [
    "ALLOCATOR_LIMITED",
    "MPS_DEFAULT_PIPE_DIR",
    "MPS_PIPE_ENV",
    "HostIsolation",
    "Resolved",
    "cap_words",
    "fence_for",
    "host_isolation",
    "mechanism_cap_mib",
    "mps_daemon_running",
    "resolve",
]
