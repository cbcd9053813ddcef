"""What a task asks for."""

from __future__ import annotations

from dataclasses import dataclass, field

from carma_airflow.core.activity import ActivityEstimate


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """Per-GPU memory a task needs, and where the number came from.

    ``whole_gpu`` means "could not estimate: give it an idle GPU to itself".  ``add_headroom``
    is False for the fixed-floor estimator, whose number already is the free memory it demands.
    """

    mib: int
    source: str
    whole_gpu: bool = False
    add_headroom: bool = True

    def filter_mib(self, headroom_mib: int) -> int:
        """The free memory a GPU must have to take this task."""
        return self.mib + (headroom_mib if self.add_headroom else 0)


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One try of one task, asking for GPUs.

    ``key`` identifies the try (unique); ``label`` is what users read (task name).  Priority is
    larger-first (Airflow's priority_weight); ``tie_break`` (larger first) orders equal
    priorities.  ``avoid_gpus`` lists GPUs a recovery plan wants
    to keep away from; ``gpu_model`` is a case-insensitive substring of the spec name.
    ``activity``: the task's expected solo SM activity (learned from its earlier tries or its
    ``executor_config`` hint); None where nobody knows, and the policies that predict
    interference then fall back to memory order.  ``kept_margin_mib``: what the fence the try
    runs under lets it grow into above its reservation for its whole life, which the placer then
    keeps from newcomers while it is a tenant (core/fencing.FenceModel.kept_margin_mib: 0 under a
    live cap, the margin under a cap fixed at its start); None, unfenced: seen past its lock
    window it counts at what it holds (the paper's count).
    """

    key: str
    label: str
    memory: MemoryNeed
    gpus: int = 1
    exclusive: bool = False
    gpu_model: str | None = None
    priority: int = 0
    tie_break: int = 0
    submitted_at: float = 0.0
    try_number: int = 1
    recovered: bool = False
    avoid_gpus: frozenset[str] = field(default_factory=frozenset)
    activity: ActivityEstimate | None = None
    kept_margin_mib: int | None = None

    @property
    def needs_idle_gpu(self) -> bool:
        return self.exclusive or self.memory.whole_gpu


def task_type(label: str) -> str:
    """The task type a tenant's or request's label names: the label without a ``[...]`` suffix
    (a job id or map index), as the interference terms are kept."""
    return label.split("[", 1)[0]
