"""How fast a task runs on one GPU model relative to another, from the models' spec sheets.

A training step is part compute (tensor math, bound by the GPU's dense BF16/FP16 throughput) and
part memory traffic (bound by its memory bandwidth).  With ``compute_share`` the share of a step's
time on ``reference`` that is compute, the step takes on ``model``::

    time ratio = compute_share x ref TFLOPS / model TFLOPS + (1 - compute_share) x ref GB/s / model GB/s

(a roofline with the two parts not overlapping).  Its inverse is the task's speed on ``model``
relative to ``reference``.  A model whose throughput or bandwidth is unknown (0: not in the
catalogue) runs at the reference's speed: nothing to say otherwise.  This is the prior a
placer starts from; run times measured on each model replace it.
"""

from __future__ import annotations

from collections.abc import Iterable

from carma_airflow.core.gpu import GpuSpec

DEFAULT_COMPUTE_SHARE = 0.5  # a task nothing is known of: half compute, half memory traffic


def knows_speed(spec: GpuSpec) -> bool:
    """Whether the spec gives both throughput and bandwidth."""
    return spec.dense_tflops > 0 and spec.memory_gbs > 0


def spec_time_ratio(model: GpuSpec, reference: GpuSpec, compute_share: float = DEFAULT_COMPUTE_SHARE) -> float:
    """A step's time on ``model`` over its time on ``reference`` (see the module doc)."""
    if not 0.0 <= compute_share <= 1.0:
        raise ValueError(f"compute_share must be between 0 and 1, got {compute_share!r}")
    if model.name == reference.name or not (knows_speed(model) and knows_speed(reference)):
        return 1.0
    compute = reference.dense_tflops / model.dense_tflops
    memory = reference.memory_gbs / model.memory_gbs
    return compute_share * compute + (1.0 - compute_share) * memory


def spec_speed(model: GpuSpec, reference: GpuSpec, compute_share: float = DEFAULT_COMPUTE_SHARE) -> float:
    """A task's speed on ``model`` relative to ``reference`` (1.0: as fast; 2.0: twice as fast)."""
    return 1.0 / spec_time_ratio(model, reference, compute_share)


def fastest(specs: Iterable[GpuSpec]) -> GpuSpec:
    """The fastest model among ``specs`` by the spec sheet (throughput, then bandwidth, then name)."""
    try:
        return max(specs, key=lambda s: (s.dense_tflops, s.memory_gbs, s.name))
    except ValueError:
        raise ValueError("fastest() needs at least one GPU spec") from None


def slowest(specs: Iterable[GpuSpec]) -> GpuSpec:
    """The slowest model among ``specs`` by the spec sheet (a try on several GPUs goes at its pace)."""
    try:
        return min(specs, key=lambda s: (s.dense_tflops, s.memory_gbs, s.name))
    except ValueError:
        raise ValueError("slowest() needs at least one GPU spec") from None


__all__ = ["DEFAULT_COMPUTE_SHARE", "fastest", "knows_speed", "slowest", "spec_speed", "spec_time_ratio"]
