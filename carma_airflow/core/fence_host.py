"""Which fence mechanism a host gives its tries: ``[carma] isolation`` (``auto`` included)
resolved on what the host offers.

Pure: :class:`HostIsolation` is what taskrun/isolation.host_isolation detected (or what the
simulator's ``--host`` profile says), :func:`resolve` turns the requested mode into the
:class:`Resolved` mechanism in force, with its cap rule and why, or a ConfigError for a mechanism
the host lacks.  ``auto`` takes the strongest the host has: driver per-cgroup limits, else an MPS
control daemon, else framework caps; simulated GPUs are a host with neither.  How the resolved
mechanism then holds a try is core/fencing.py's :class:`~carma_airflow.core.fencing.FenceModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import CapRule, FenceModel, IsolationMode

MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # NVIDIA's documented default
_DRIVER_FALLBACK = "a try NVML refuses runs with framework caps, its log says so"


@dataclass(frozen=True, slots=True)
class HostIsolation:
    """What a host offers to fence its tries (taskrun/isolation.host_isolation detects it)."""

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
        """How the mechanism holds a try under the rule."""
        return FenceModel.of(self.mode, self.rule)

    @property
    def live(self) -> bool:
        """The cap follows the co-tenants while the try runs (else it stays where its start set it)."""
        return self.model.live

    def describe(self) -> str:
        return f"isolation: {self.model.describe()}: {self.why}"


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
            IsolationMode.MPS: "MPS's pinned memory limit, read once at the client's start "
            "(under live, PyTorch's fraction re-read from its cap file beneath it)",
            IsolationMode.DRIVER: "the cgroup's NVML hard limit, kept in the ledger (no cgroup here)",
        }[requested]
        return Resolved(requested, f"simulated GPUs: the ledger plays {plays}", rule, simulated=True)
    if requested is IsolationMode.DRIVER:
        if not host.driver_limits:
            raise ConfigError(
                f"[carma] isolation = driver: {host.driver_why}; use isolation = mps (with an MPS control daemon) "
                "or framework"
            )
        why = f"NVML per-cgroup limits, one cgroup leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}"
        return Resolved(IsolationMode.DRIVER, why, rule)
    if requested is IsolationMode.AUTO and host.driver_limits:
        why = f"auto: NVML per-cgroup limits, one leaf per try ({host.driver_why}); {_DRIVER_FALLBACK}"
        return Resolved(IsolationMode.DRIVER, why, rule)
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


__all__ = ["MPS_DEFAULT_PIPE_DIR", "MPS_PIPE_ENV", "HostIsolation", "Resolved", "resolve"]
