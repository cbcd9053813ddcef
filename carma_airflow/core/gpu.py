"""GPU specs, the spec catalogue, and GPU state as the placer sees it."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.errors import UnknownGpuSpecError, brief
from carma_airflow.core.risk import MetricWindow


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What a GPU model offers.  Memory is what NVML reports as total, in MiB.

    ``dense_tflops``: dense (no sparsity) BF16/FP16 tensor throughput in TFLOPS; ``memory_gbs``:
    memory bandwidth in GB/s, both from the vendor's spec sheet (0: unknown, as for a GPU the
    catalogue lacks).  They set how fast a task runs on the model relative to another
    (:mod:`carma_airflow.core.speed`): a prior, until run times measured on the model say more.
    """

    name: str
    memory_mib: int
    sm_count: int
    idle_power_w: float
    max_power_w: float
    dense_tflops: float = 0.0
    memory_gbs: float = 0.0


# Memory is NVML's total for the model; power is idle draw as seen by nvidia-smi and board TDP;
# throughput (dense BF16/FP16 tensor TFLOPS, FP16 where the model has no BF16) and memory
# bandwidth (GB/s) as the vendor's data sheets give them for the board whose TDP is listed
# (SXM for A100, H100, H200 and V100).
GPU_CATALOGUE: dict[str, GpuSpec] = {
    spec.name.lower(): spec
    for spec in (
        GpuSpec("A100-40GB", 40960, 108, 55.0, 400.0, 312.0, 1555.0),
        GpuSpec("A100-80GB", 81920, 108, 60.0, 400.0, 312.0, 2039.0),
        GpuSpec("H100-80GB", 81559, 132, 70.0, 700.0, 989.0, 3350.0),
        GpuSpec("H200-141GB", 143771, 132, 75.0, 700.0, 989.0, 4800.0),
        GpuSpec("L4", 23034, 58, 16.0, 72.0, 121.0, 300.0),
        GpuSpec("L40S", 46068, 142, 35.0, 350.0, 362.0, 864.0),
        GpuSpec("V100-32GB", 32768, 80, 40.0, 300.0, 125.0, 900.0),
        GpuSpec("T4", 15360, 40, 10.0, 70.0, 65.0, 320.0),
    )
}


def gpu_spec(name: str) -> GpuSpec:
    """Look a spec up by name, case-insensitively."""
    try:
        return GPU_CATALOGUE[name.strip().lower()]
    except KeyError:
        known = ", ".join(s.name for s in GPU_CATALOGUE.values())
        raise UnknownGpuSpecError(f"unknown GPU spec {brief(name)}; use one of: {known}") from None


# ASCII digits only, at most 9 of them: int() of a 5000-digit count would raise ValueError
_GROUP = re.compile(r"^\s*(?:([0-9]{1,9})\s*[xX]\s*)?([A-Za-z0-9][A-Za-z0-9_.-]*)\s*$", re.ASCII)
MAX_GPUS = 100_000


def parse_gpu_list(text: str) -> list[GpuSpec]:
    """Parse ``4xA100-40GB`` or ``2xA100-40GB,4xH100-80GB`` into one spec per GPU (at most 100000)."""
    if not isinstance(text, str):
        raise UnknownGpuSpecError(f"GPU list must be text such as '4xA100-40GB', not a {type(text).__name__}")
    specs: list[GpuSpec] = []
    for part in text.split(","):
        match = _GROUP.match(part)
        if match is None:
            raise UnknownGpuSpecError(f"cannot read GPU list part {brief(part)}; write NxSPEC such as 4xA100-40GB")
        count = int(match.group(1) or 1)
        if count < 1 or count > MAX_GPUS or len(specs) + count > MAX_GPUS:
            raise UnknownGpuSpecError(
                f"GPU count in {brief(part)} must be between 1 and {MAX_GPUS} (all parts together)"
            )
        try:
            spec = gpu_spec(match.group(2))
        except UnknownGpuSpecError as exc:
            raise UnknownGpuSpecError(f"{exc} (write NxSPEC such as 4xA100-40GB)") from None
        specs.extend([spec] * count)
    return specs


class GpuHealth(enum.Enum):
    """Whether the placer may use a GPU."""

    HEALTHY = "healthy"
    STALE = "stale"  # monitor has no fresh samples: no collocation, idle use only
    QUARANTINED = "quarantined"  # NVML errors: no placements at all


@dataclass(frozen=True, slots=True)
class Tenant:
    """A task holding (part of) a GPU.

    ``reserved_mib`` is what the placer reserved for it (its estimate); ``observed_mib`` is what
    the monitor last saw it use, None until its process appears.  ``activity`` is its expected
    solo SM activity (as on its request), None where unknown.  ``kept_margin_mib``: what its own
    fence lets it grow into above its reservation for its life (as on its request,
    ``TaskRequest.kept_margin_mib``); None: unfenced, counted as the paper counts.
    """

    key: str
    label: str
    reserved_mib: int
    placed_at: float
    observed_mib: int | None = None
    exclusive: bool = False
    activity: ActivityEstimate | None = None
    kept_margin_mib: int | None = None

    @property
    def accounted_mib(self) -> int:
        """Memory the tenant is expected to hold: the larger of reservation and observation."""
        if self.observed_mib is None:
            return self.reserved_mib
        return max(self.reserved_mib, self.observed_mib)


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU at one moment: last readings, the metric window, tenants, health."""

    uuid: str
    index: int
    spec: GpuSpec
    free_mib: int
    used_mib: int
    window: MetricWindow
    tenants: tuple[Tenant, ...] = ()
    health: GpuHealth = GpuHealth.HEALTHY
    host: str = "localhost"
    last_placed_at: float | None = None

    @property
    def total_mib(self) -> int:
        return self.spec.memory_mib


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Everything the placer may look at: the time and the GPUs."""

    now: float
    gpus: tuple[GpuState, ...]
    _by_uuid: dict[str, GpuState] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def by_uuid(self) -> dict[str, GpuState]:
        """The GPUs by UUID, built when first asked (a simulator makes a view of hundreds of GPUs
        on every pass and never asks)."""
        got = self._by_uuid
        if got is None:
            got = {g.uuid: g for g in self.gpus}
            object.__setattr__(self, "_by_uuid", got)
        return got
