"""The GPU sharing model, in one place: activity profiles, interference, power, memory.

The simulator and the simulated GPU backend both use it.  It is a *model*: its parameters are
assumptions, stated here, and calibrated once (see ``docs/model.md``) against the CARMA
paper's published figures for one configuration only.

Activity profiles (assumption).  A training task alone on a GPU keeps its SMs busy a fraction
``sm_activity`` of the time, with SM occupancy ``sm_occupancy`` and DRAM activity
``dram_activity``.  The catalogue does not measure these; we derive them from the task's family
and batch size: CIFAR-size CNNs are light (small kernels, input-bound), ImageNet-size CNNs and
transformers heavy, and activity grows with batch size.

Interference.  Tenants of one GPU with solo activities ``a_j`` demand ``D = sum(a_j)``.  Each
tenant's progress is slowed by

    slowdown_i = max(1, D) * (1 + beta * sum_{j != i} a_j)

the first factor is SM time-slicing once demand exceeds the GPU, the second is contention for
caches, memory bandwidth and the scheduler that exists even below saturation (``beta``
calibrated).  A task on several GPUs runs at the pace of its slowest GPU.

Telemetry.  A tenant progressing at rate ``r`` (``1/slowdown``) contributes ``a_j * r`` to the
GPU's SM activity, plus the stalls it suffers from contention that the counters see (warps stay
resident while they wait): ``a_j * r * (1 + stall_visibility * beta * sum_{k != j} a_k)``.
Occupancy likewise; DRAM activity counts transfers only (``d_j * r``).  Each is capped at 1.

Power.  ``P = P_idle + (P_max - P_idle) * (busy_fraction * [GPU has a tenant] +
(1 - busy_fraction) * (0.75 * smact + 0.25 * drama))``: a GPU with a CUDA context runs at
raised clocks whatever its load (``busy_fraction``, calibrated), the rest follows activity.

Memory.  A task holds nothing during its first ``ramp_s`` seconds (start-up, data loading),
then its measured solo peak until it ends.  If at that moment the GPU has less free memory than
the peak, the task crashes with a CUDA OOM; what it held plus what it asked for is what its
retry is sized from (sim/fencing.py ``Refusal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from carma_airflow.core.gpu import GpuSpec


@dataclass(frozen=True, slots=True)
class ActivityProfile:
    sm_activity: float
    sm_occupancy: float
    dram_activity: float


# family/size class -> activity at batch sizes 32, 64, 128 (and beyond)
_BASE: dict[str, tuple[float, float, float]] = {
    "cnn-small": (0.25, 0.15, 0.12),  # CIFAR-size inputs: small kernels, input-bound
    "cnn": (0.45, 0.30, 0.25),  # ImageNet-size inputs
    "transformer": (0.55, 0.35, 0.35),
    "recsys": (0.35, 0.20, 0.45),  # embedding lookups: DRAM-bound
}
_BATCH_STEP = 0.06  # extra SM activity per doubling of batch size above 32


def activity_profile(family: str, batch_size: int, small_inputs: bool = False) -> ActivityProfile:
    """Solo activity of a training task from its family and batch size (an assumption)."""
    fam = family.strip().lower()
    if fam == "cnn" and small_inputs:
        fam = "cnn-small"
    act, occ, dram = _BASE.get(fam, _BASE["cnn"])
    doublings = 0.0
    size = max(1, batch_size)
    if fam in ("cnn", "cnn-small"):
        while size > 32:
            size //= 2
            doublings += 1
    act = min(0.95, act + _BATCH_STEP * doublings)
    occ = min(0.90, occ + 0.05 * doublings)
    dram = min(0.90, dram + 0.04 * doublings)
    return ActivityProfile(act, occ, dram)


@dataclass(frozen=True, slots=True)
class SharingModel:
    beta: float = 0.5  # contention below saturation, per unit of co-tenant activity
    stall_visibility: float = 0.5  # share of contention stalls that SM activity counters see
    busy_fraction: float = 0.3  # share of dynamic power drawn by any GPU with a tenant
    ramp_s: float = 20.0

    def slowdowns(self, profiles: Sequence[ActivityProfile]) -> list[float]:
        """Slowdown of each tenant of one GPU (1.0 = solo speed)."""
        demand = sum(p.sm_activity for p in profiles)
        sat = max(1.0, demand)
        return [sat * (1.0 + self.beta * (demand - p.sm_activity)) for p in profiles]

    def telemetry(self, profiles: Sequence[ActivityProfile], rates: Sequence[float]) -> tuple[float, float, float]:
        """(SM activity, SM occupancy, DRAM activity) of a GPU given tenants and their rates."""
        smact = smocc = drama = 0.0
        demand = sum(p.sm_activity for p in profiles)
        for p, r in zip(profiles, rates, strict=True):
            stall = 1.0 + self.stall_visibility * self.beta * (demand - p.sm_activity)
            smact += p.sm_activity * r * stall
            smocc += p.sm_occupancy * r * stall
            drama += p.dram_activity * r
        return min(1.0, smact), min(1.0, smocc), min(1.0, drama)

    def power_w(self, spec: GpuSpec, busy: bool, smact: float, drama: float) -> float:
        dyn = spec.max_power_w - spec.idle_power_w
        load = (self.busy_fraction if busy else 0.0) + (1.0 - self.busy_fraction) * (0.75 * smact + 0.25 * drama)
        return spec.idle_power_w + dyn * min(1.0, load)

    @staticmethod
    def oom_at_ramp(peak_mib: int, free_mib: int) -> bool:
        """Whether a task ramping to ``peak_mib`` crashes given what is free on the GPU."""
        return peak_mib > free_mib
