"""The placement core: pure Python, standard library only, no I/O, no clock, no globals.

Value types (GPUs, tasks, decisions), the paper's risk analysis, the placement engine and the
filter interface its policies compose (the policies: :mod:`carma_airflow.core.policies`), memory
estimators, queue disciplines, the recovery planner, the GPU sharing model, and the scheduling
cycle with its reservation ledger.  The simulator, the GPU kit and the Airflow executor drive the
same :class:`SchedulingCycle` over the same :class:`Placer`.
"""

from carma_airflow.core.cycle import CycleResult, Placed, SchedulingCycle, Unplaceable
from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.errors import (
    CarmaError,
    ConfigError,
    DuplicateKeyError,
    NeverFitsError,
    UnknownGpuSpecError,
    UnknownPolicyError,
    WorkloadError,
)
from carma_airflow.core.estimators import (
    DEFAULT_ESTIMATOR,
    MemoryEstimator,
    TaskMemoryInfo,
    estimator_names,
    make_estimator,
)
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.gpu import (
    GPU_CATALOGUE,
    ClusterView,
    GpuHealth,
    GpuSpec,
    GpuState,
    Tenant,
    gpu_spec,
    parse_gpu_list,
)
from carma_airflow.core.placer import PassResult, Placer
from carma_airflow.core.queueing import DEFAULT_QUEUE, Backfill, Fifo, QueueDiscipline, make_queue
from carma_airflow.core.recovery import (
    Failure,
    FailureKind,
    GiveUp,
    RecoverySettings,
    RetryMode,
    RetryPlan,
    classify_failure,
    paper_recovery,
    plan_recovery,
    plan_retry,
)
from carma_airflow.core.reservations import Reservation, Reservations
from carma_airflow.core.risk import MetricWindow, RiskSettings, is_high_risk, window_score
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.sharing import ActivityProfile, SharingModel, activity_profile
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.core.units import format_mib, parse_mib

__all__ = [
    "DEFAULT_ESTIMATOR",
    "DEFAULT_QUEUE",
    "DEFAULT_SETTINGS",
    "GPU_CATALOGUE",
    "ActivityProfile",
    "Backfill",
    "CarmaError",
    "ClusterView",
    "ConfigError",
    "CycleResult",
    "Decision",
    "DuplicateKeyError",
    "Failure",
    "FailureKind",
    "Fifo",
    "Filter",
    "GiveUp",
    "GpuHealth",
    "GpuSpec",
    "GpuState",
    "GpuVerdict",
    "MemoryEstimator",
    "MemoryNeed",
    "MetricWindow",
    "NeverFitsError",
    "Outcome",
    "PassResult",
    "Placed",
    "PlacementSettings",
    "Placer",
    "QueueDiscipline",
    "Reason",
    "RecoverySettings",
    "Rejection",
    "Reservation",
    "Reservations",
    "RetryMode",
    "RetryPlan",
    "RiskSettings",
    "SchedulingCycle",
    "SharingModel",
    "TaskMemoryInfo",
    "TaskRequest",
    "Tenant",
    "UnknownGpuSpecError",
    "UnknownPolicyError",
    "Unplaceable",
    "WorkloadError",
    "activity_profile",
    "classify_failure",
    "estimator_names",
    "format_mib",
    "gpu_spec",
    "is_high_risk",
    "make_estimator",
    "make_queue",
    "paper_recovery",
    "parse_gpu_list",
    "parse_mib",
    "plan_recovery",
    "plan_retry",
    "window_score",
]
