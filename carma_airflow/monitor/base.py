"""What a GPU probe reports, and the protocol every probe follows.

A probe turns the GPUs of one host into frozen :class:`GpuSample` snapshots.  Two probes
exist: :class:`~carma_airflow.monitor.nvml.NvmlProbe` (real GPUs through NVML, the only code
that touches NVML) and :class:`~carma_airflow.monitor.simulated.SimulatedProbe` (GPUs that
exist only in a ledger file, driven by the core's sharing model).

Missing readings are ``None``, never a sentinel.  A GPU that NVML cannot read (lost, fallen off
the bus, Xid) comes back as a sample whose ``error`` says why; the caller quarantines it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.risk import MetricWindow


def percent_share(percent: float) -> float:
    """A percent a GPU reports (NVML's utilisation and GPM metrics) as the 0..1 share a sample
    carries, clamped."""
    return min(1.0, max(0.0, float(percent) / 100.0))


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process holding memory on a GPU (host PID).

    ``sm_util``: the share of SM time its kernels had over the last sampling period (0..1), what
    NVML's per-process utilisation reports; None where the GPU cannot tell (MIG, older drivers).
    On a shared GPU it is what the process got, not what it would have used alone.
    """

    pid: int
    used_mib: int
    sm_util: float | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG instance) at one moment."""

    uuid: str
    index: int  # NVML index; a MIG instance carries its parent's index
    name: str
    host: str
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    at: float  # time.time() of the reading
    busy: float | None = None  # share of time some kernel ran (NVML utilization.gpu / 100)
    smact: float | None = None  # SM activity, 0..1
    smocc: float | None = None  # SM occupancy, 0..1
    drama: float | None = None  # DRAM bandwidth activity, 0..1
    activity_source: str = "none"  # "gpm" | "utilization" | "simulated" | "none": where smact came from
    power_w: float | None = None
    energy_j: float | None = None  # total since the driver (or the simulated GPU) started; take differences
    processes: tuple[ProcessUsage, ...] = ()
    error: str | None = None  # the GPU could not be read: the caller quarantines it

    @property
    def ok(self) -> bool:
        return self.error is None


class Probe(Protocol):
    """Reads every GPU of one host."""

    backend: str

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoGpuDriverError(CarmaError):
    """NVML could not start on this machine (no driver, driver not loaded, no nvidia-ml-py)."""


class Reading(dict[str, "GpuSample"]):
    """One consistent look at a GPU source: the newest sample of every GPU, by UUID (a dict, as
    ``latest()`` gives), with each GPU's activity window and age taken under the same lock, so a
    placement pass never mixes a sample with a window or an age newer than it."""

    def __init__(self, samples: dict[str, GpuSample], windows: dict[str, MetricWindow], ages: dict[str, float]) -> None:
        super().__init__(samples)
        self.windows = windows
        self.ages = ages  # seconds since each GPU's newest good sample, at the reading (inf: none)


class GpuSource(Protocol):
    """What the executor reads GPUs from: this host's :class:`~carma_airflow.monitor.sampler.Monitor`,
    or (celery dispatch) a view over every host's agent samples in the store."""

    def latest(self) -> dict[str, GpuSample]:
        """The newest sample of every GPU, by UUID."""
        ...

    def reading(self) -> Reading:
        """``latest()`` with every GPU's window and age, all of one moment (a heartbeat's view)."""
        ...

    def window(self, uuid: str) -> MetricWindow:
        """The recent activity of one GPU (for the risk analysis)."""
        ...

    def age(self, uuid: str, now: float | None = None) -> float:
        """Seconds since the GPU's newest sample (infinite when never sampled)."""
        ...

    def stop(self) -> None: ...
