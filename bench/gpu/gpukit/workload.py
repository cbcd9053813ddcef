"""The kit's tasks: small CNNs and small transformers that fit several to a GPU, a memory hog and
an underdeclared task that crashes with a CUDA OOM beside it.

Sizes follow the GPU's memory (the smallest GPU's total, in MiB), so the same scenario plays on
an H200, an A100 or simulated GPUs:

* the hog declares all of the GPU but ``HOG_LEAVES_MIB`` (6.5 GiB usable after the reserve),
  which no well-declared training task fits beside (each declares >= 6 GiB + 2 GiB headroom);
* the underdeclared task declares 2 GiB (fits beside the hog) and really grows to 16 GiB: a
  real CUDA OOM, after which the recovery planner asks for what it reached x 1.25 + headroom,
  which no longer fits beside the hog: the retry lands elsewhere, or after the hog.

``seconds`` is a task's solo training time on a real GPU; the first (exclusive) run trains each
task for that long and counts its steps, the second run trains the same steps, so the ratio of
training times is the slowdown collocation cost.  Simulated tasks train ``seconds * sim_scale``
of solo work (carma's sharing model decides their pace).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

GIB = 1024
HOG_LEAVES_MIB = 7 * GIB  # usable memory beside the hog: this minus the placer's 512 MiB reserve
UNDERDECLARED_MIB = 2 * GIB
UNDERDECLARED_REACHES_MIB = 16 * GIB
MIN_GPU_MIB = 24 * GIB


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One GPU task of the kit.

    ``kind``: ``cnn`` | ``transformer`` (PyTorch model), ``hog`` (a CNN holding ``ballast_mib``
    besides), ``ramp`` (a transformer whose held memory grows to ``ramp_mib`` in its first steps).
    ``declared_mib`` is what it tells carma (``gpu_task(memory=...)``); ``sim_peak_mib`` and
    ``sim_activity`` are what the simulated task really holds and how busy it keeps the SMs.
    """

    name: str
    kind: str
    declared_mib: int
    seconds: float
    priority: int = 10
    delay_s: float = 0.0
    role: str = "train"  # train | hog | underdeclared
    params: dict[str, int] = field(default_factory=dict)
    ballast_mib: int = 0
    ramp_mib: int = 0
    sim_peak_mib: int = 0
    sim_activity: float = 0.4
    steps: int | None = None  # set for the second run: the steps the first run trained

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TaskSpec:
        return TaskSpec(**data)

    @staticmethod
    def from_json(text: str) -> TaskSpec:
        return TaskSpec.from_dict(json.loads(text))


class WorkloadError(ValueError):
    """The GPU is too small for the kit's scenario."""


def kit_tasks(gpu_total_mib: int, *, scale: float = 1.0) -> list[TaskSpec]:
    """The kit's tasks for GPUs of ``gpu_total_mib`` (the smallest one); ``scale`` stretches time."""
    if gpu_total_mib < MIN_GPU_MIB:
        raise WorkloadError(
            f"the kit's scenario needs a GPU with at least {MIN_GPU_MIB // GIB} GiB; this one has "
            f"{gpu_total_mib / GIB:.1f} GiB"
        )
    if scale <= 0:
        raise WorkloadError(f"--scale must be > 0, got {scale}")
    s = scale
    hog_declared = gpu_total_mib - HOG_LEAVES_MIB
    tasks = [
        # the hog goes first (highest priority but the underdeclared task's), alone on its GPU
        TaskSpec(
            "memory_hog",
            "hog",
            hog_declared,
            30 * s,
            priority=30,
            role="hog",
            params={"width": 32, "batch": 64, "image": 32},
            ballast_mib=hog_declared - 2 * GIB,  # + CUDA context and a small CNN: under what it declares
            sim_peak_mib=hog_declared - GIB,
            sim_activity=0.15,
        ),
        # placed beside the hog a few seconds later (once the hog holds its memory)
        TaskSpec(
            "underdeclared",
            "ramp",
            UNDERDECLARED_MIB,
            10 * s,
            priority=40,
            delay_s=8 * s,
            role="underdeclared",
            params={"d_model": 256, "layers": 2, "heads": 4, "seq": 128, "batch": 16, "vocab": 4096},
            ramp_mib=UNDERDECLARED_REACHES_MIB,
            sim_peak_mib=UNDERDECLARED_REACHES_MIB,
            sim_activity=0.35,
        ),
        TaskSpec(
            "cnn_small",
            "cnn",
            6 * GIB,
            12 * s,
            params={"width": 32, "batch": 128, "image": 32},
            sim_peak_mib=3 * GIB,
            sim_activity=0.3,
        ),
        TaskSpec(
            "cnn_wide",
            "cnn",
            6 * GIB,
            12 * s,
            params={"width": 64, "batch": 128, "image": 32},
            sim_peak_mib=4 * GIB,
            sim_activity=0.4,
        ),
        TaskSpec(
            "cnn_64px",
            "cnn",
            8 * GIB,
            12 * s,
            params={"width": 32, "batch": 64, "image": 64},
            sim_peak_mib=5 * GIB,
            sim_activity=0.45,
        ),
        TaskSpec(
            "cnn_deep",
            "cnn",
            6 * GIB,
            12 * s,
            params={"width": 48, "batch": 96, "image": 32, "blocks": 3},
            sim_peak_mib=4 * GIB,
            sim_activity=0.4,
        ),
        TaskSpec(
            "transformer_small",
            "transformer",
            8 * GIB,
            12 * s,
            params={"d_model": 384, "layers": 4, "heads": 6, "seq": 256, "batch": 32, "vocab": 8192},
            sim_peak_mib=5 * GIB,
            sim_activity=0.5,
        ),
        TaskSpec(
            "transformer_wide",
            "transformer",
            10 * GIB,
            12 * s,
            params={"d_model": 512, "layers": 4, "heads": 8, "seq": 256, "batch": 32, "vocab": 8192},
            sim_peak_mib=6 * GIB,
            sim_activity=0.55,
        ),
    ]
    return tasks


def with_steps(tasks: list[TaskSpec], steps: dict[str, int]) -> list[TaskSpec]:
    """The same tasks, each training the steps it trained in the first run (time-bound if unknown)."""
    return [replace(t, steps=steps.get(t.name)) for t in tasks]
