"""What one simulation replays: the GPUs, the policy and estimator, the truth, the knobs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from carma_airflow.core.estimators import DEFAULT_ESTIMATOR
from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.policies import Policy, make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.floor import set_floor
from carma_airflow.core.policies.predictive import Predictive, PredictiveSettings
from carma_airflow.core.recovery import RecoverySettings, max_retry_request_mib
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.sharing import SharingModel


@dataclass(frozen=True, slots=True)
class SimConfig:
    gpus: tuple[GpuSpec, ...]
    policy: str = "completion-time"
    # the executor's default (core/estimators.py EXECUTOR_ESTIMATOR): the trace's declared memory
    # (memory_mib) until outgrown, else the learned peaks, else the floor; "history" (or "history+X"):
    # learned memory ahead of X (sim/memory.py); gpumemnet, horus, ...: the catalogue's estimates
    estimator: str = DEFAULT_ESTIMATOR
    queue: str = "backfill"
    recovery: str | None = None  # paper | planned | blind; None: paper for fifo, blind for static-K
    settings: PlacementSettings = DEFAULT_SETTINGS
    sharing: SharingModel = field(default_factory=SharingModel)  # the truth: its beta
    recovery_settings: RecoverySettings = field(default_factory=RecoverySettings)
    activity_scale: float = 1.0  # the truth: real demand = this x the catalogue (reported) activity
    # the truth's form: "sharing" (the sharing model's rule), "types[:SEED]" (per task type
    # sensitivity and pressure, drawn) or "pairs:PATH[:GPU[:SEED]]" (a measured pair table); sim/truth.py
    truth: str = "sharing"
    # the truth's speeds per GPU model, combinable with every form above: "alike" (every model at
    # the trace's solo speed), "spec[:SEED]" or "table:PATH[:SEED]" (sim/speed.py)
    speed_truth: str = "alike"
    telemetry_noise: float = 0.02  # standard deviation of a solo try's measured SM activity
    progress_reports: bool = True  # tries report their progress: interference seen within one try
    # a try never alone long enough teaches its type what the monitor read of it beside its co-tenants
    # (marked shared; a type with a reading alone leaves it out), as the executor's telemetry does
    shared_readings: bool = True
    seed: int = 0  # of the telemetry noise
    predictive: PredictiveSettings | None = None  # the predictive policy's knobs (None: its defaults)
    min_gain: float | None = None  # the floor of completion-time or predictive (None: the policy's own)
    # earlier replays of the same trace whose ended tries' peaks the store holds when this run
    # starts (a DAG that runs every day); only with a history estimator, memory only
    warm_runs: int = 0
    # the earlier replays also leave what the executor learns of speed: activities, solo run times
    # and the interference fit (sim/days.py); False: memory only, the rest starts afresh
    warm_learning: bool = False
    # learned peaks below the estimate without history wait for a learned interference fit
    # (core/vouch.py), as in the executor; False: taken at once (before issue 41)
    vouch_peaks: bool = True
    # which of it carries over (bench/learning.py switches each on alone): the learned memory peaks,
    # the activities, the solo run times, the interference fit (and the stretches kept for it), the
    # completion-time rule's track record (with ``track_record`` on)
    warm_pieces: frozenset[str] = frozenset({"peaks", "activities", "runs", "fit", "record"})
    # the truth: true peaks exceed the catalogue's by up to this share, late in a run (sim/fencing.py)
    memory_growth: float = 0.0
    # the fence (sim/fencing.py, core/fencing.py): the host's mechanisms (framework | mps | driver),
    # the mechanism asked for (auto | framework | mps | driver | none: auto resolves on the host as
    # the executor's does) and the cap rule (promise | protective | live; None: the executor's default);
    # by default the executor's ([carma] isolation = auto: framework caps on the common host, issue 41)
    host: str = "framework"
    isolation: str = "auto"
    cap_rule: str | None = None
    # a job's tries save a checkpoint every this many seconds of running (0: never): a try that
    # crashes resumes its job from the last one instead of from zero
    checkpoint_every_s: float = 0.0
    # completion-time's options priced with this run's track record of how the tries' chosen options
    # completed against their predictions (core/track_record.py; opt-in, as in the executor)
    track_record: bool = False
    # completion-time's floor on GPU models the interference model has learned
    # (CompletionSettings.learned_floor): None, the policy's own (0.0); "off", none (the rule before
    # round 54); a number (``bench/learning.py --knobs learned_floor=off`` runs the rule without it)
    learned_floor: float | str | None = None

    def __post_init__(self) -> None:
        lf = self.learned_floor
        if isinstance(lf, str) and lf.strip().lower() != "off":
            raise ValueError(f"SimConfig.learned_floor must be None, off or a number between -1 and 1, got {lf!r}")
        if isinstance(lf, (int, float)) and not -1.0 <= lf <= 1.0:
            raise ValueError(f"SimConfig.learned_floor must be None, off or a number between -1 and 1, got {lf!r}")

    def built_policy(self) -> Policy:
        """The policy this run replays, with its knobs (the predictive policy's, the floor)."""
        policy = make_policy(self.policy)
        if isinstance(policy, Predictive) and self.predictive is not None:
            policy = Predictive(settings=self.predictive)
        if self.min_gain is not None:
            set_floor(policy, self.min_gain)
        if self.track_record and isinstance(policy, CompletionTime):
            policy.settings = replace(policy.settings, track_record=True)
        lf = self.learned_floor
        if lf is not None and isinstance(policy, CompletionTime):
            policy.settings = replace(policy.settings, learned_floor=None if isinstance(lf, str) else float(lf))
        return policy

    def bounded_recovery(self) -> RecoverySettings:
        """The recovery settings of the run, an OOM retry's request bounded by the largest GPU as the
        executor bounds it (``executor/parts.py``: the largest GPU its monitor sees at start): a retry
        asking more than any GPU offers would never fit and be lost; it gets a GPU to itself instead.

        Decision: always, not only where memory grows.  A try crashed under an estimate far below its
        peak (GPUMemNet's 8,000 MiB for maskrcnn's 28,606) stops at what the GPU had free, and 1.25x
        that is past a V100-32GB or an L4: unbounded, the simulator lost tasks the executor runs
        (8xV100-32GB, 8 traces: 2-8 tasks per truth, every policy)."""
        rs = self.recovery_settings
        if rs.max_request_mib is not None or not self.gpus:
            return rs
        s = self.settings
        largest = max(g.memory_mib for g in self.gpus)
        return replace(rs, max_request_mib=max_retry_request_mib(largest, s.reserve_mib, s.headroom_mib, rs.round_mib))

    def recovery_mode(self) -> str:
        if self.recovery is not None:
            return self.recovery
        if self.queue == "fifo":
            return "paper"
        if self.policy.startswith("static-"):
            return "blind"
        return "planned"


__all__ = ["SimConfig"]
