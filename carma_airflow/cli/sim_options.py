"""The command line of ``carma simulate`` and ``carma compare``: their shared options, and the
text of each turned into a :class:`~carma_airflow.sim.config.SimConfig` or a workload (an
``error:`` line and exit 2 for bad input, as the executor would refuse it)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Annotated

import typer

from carma_airflow.cli import fail
from carma_airflow.core.errors import ConfigError, WorkloadError
from carma_airflow.core.estimators import make_estimator
from carma_airflow.core.gpu import parse_gpu_list
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.floor import FLOORED_POLICIES
from carma_airflow.core.queueing import DEFAULT_QUEUE, make_queue
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim.config import SimConfig
from carma_airflow.sim.memory import MAX_WARM_RUNS, learns_memory
from carma_airflow.sim.speed import make_speed_truth
from carma_airflow.sim.truth import make_truth
from carma_airflow.sim.workload import Arrival, load_catalog, load_trace, packaged, synthetic_trace

TraceOpt = Annotated[
    str,
    typer.Option(help="trace CSV (job_id,submit_s,task); 't1'/'t2' for the paper's; 'synthetic:N' for N random tasks"),
]
CatalogOpt = Annotated[str, typer.Option(help="task catalogue CSV (default: the paper's, shipped)")]
GpusOpt = Annotated[str, typer.Option(help="GPUs as NxSPEC, or a comma list: 4xA100-40GB,2xH100-80GB")]
EstimatorOpt = Annotated[
    str,
    typer.Option(
        help="history+floor (default: the executor's: the trace's declared memory_mib, else learned peaks, else "
        "the floor), oracle, gpumemnet, faketensor, horus, floor, history (history+gpumemnet), declared, a+b"
    ),
]
QueueOpt = Annotated[str | None, typer.Option(help="fifo (the paper's) or backfill (default)")]
SeedOpt = Annotated[int, typer.Option(help="seed for synthetic traces")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
WarmOpt = Annotated[
    str,
    typer.Option(
        "--warm-runs",
        help="with a history estimator (the default is one): replay the trace this many times first; the "
        "learned peaks of their ended tries fill the store (a DAG that runs every day; memory only, unless "
        "--warm-learning)",
    ),
]
WarmLearningOpt = Annotated[
    bool,
    typer.Option(
        "--warm-learning",
        help="with --warm-runs: those replays also leave what the executor learns of speed (activities, "
        "solo run times, the interference fit), as a deployment that ran the DAG before knows it",
    ),
]
BetaOpt = Annotated[
    str | None,
    typer.Option(
        "--interference-beta",
        help="the simulated truth: contention per unit of co-tenant activity (default: the calibration, "
        f"{SharingModel().beta}); the placer only learns it from ended tries",
    ),
]
ScaleOpt = Annotated[
    str,
    typer.Option(
        "--activity-scale",
        help="the simulated truth: real SM demand = S x the activity the monitor reports (default 1.0)",
    ),
]
FormOpt = Annotated[
    str,
    typer.Option(
        "--truth",
        help="the simulated truth's form: sharing (the sharing model), types[:SEED] (per task type sensitivity "
        "and pressure, drawn), pairs:PATH[:GPU[:SEED]] (a measured pair table mapped onto the task types)",
    ),
]
SpeedOpt = Annotated[
    str,
    typer.Option(
        "--speed-truth",
        help="the simulated truth's speed per GPU model, with any --truth: alike (every model at the trace's "
        "solo speed), spec[:SEED] (from the spec sheets, a drawn compute/memory mix per task type) or "
        "table:PATH[:SEED] (measured solo throughputs: gpu,job,solo rows or gavel_pairs.csv)",
    ),
]

GrowthOpt = Annotated[
    str,
    typer.Option(
        "--memory-growth",
        help="the simulated truth: each job's true peak exceeds the catalogue's by up to this share (e.g. 0.3), "
        "late in its run (seeded)",
    ),
]
HostOpt = Annotated[
    str,
    typer.Option(
        "--host",
        help="the host's fencing mechanisms: framework (PyTorch/TensorFlow/JAX caps only: the common host), "
        "mps (an MPS control daemon serves the GPUs) or driver (NVML per-cgroup limits: r615+, cgroup v2, root)",
    ),
]
IsolationOpt = Annotated[
    str,
    typer.Option(
        "--isolation",
        help="as the executor's isolation setting: auto (the strongest the host has, as the executor resolves "
        "it), framework, mps, driver, or none (unfenced: the try that allocates next crashes, whoever grew)",
    ),
]
CapRuleOpt = Annotated[
    str | None,
    typer.Option(
        "--cap-rule",
        help="as the executor's isolation_cap setting: promise (reservation + margin, set at start), protective "
        "(the GPU less the co-tenants at start) or live (re-set as co-tenants come and go; framework and driver); "
        "default: the executor's",
    ),
]
MinGainOpt = Annotated[
    str | None,
    typer.Option(
        "--min-gain",
        help="as the executor's min_gain setting: a collocation must raise its GPU's summed predicted speed "
        "(solo = 1.0 per task) by this much (completion-time, predictive; default: the policy's own)",
    ),
]
CheckpointOpt = Annotated[
    str,
    typer.Option(
        "--checkpoint-every",
        help="each try saves a checkpoint every this many seconds of running (0: never); a try that crashes "
        "resumes its job from the last one; the result reports the GPU-seconds crashes threw away",
    ),
]


def with_fencing(
    cfg: SimConfig,
    growth: str,
    isolation: str,
    host: str = "framework",
    cap_rule: str | None = None,
    checkpoint_every: str = "0",
) -> SimConfig:
    from carma_airflow.sim.fencing import sim_fence

    g = truth_number("--memory-growth", growth, 0.0)
    every = truth_number("--checkpoint-every", checkpoint_every, 0.0)
    out = replace(
        cfg,
        memory_growth=g,
        isolation=isolation.strip().lower(),
        host=host.strip().lower(),
        cap_rule=None if cap_rule is None else cap_rule.strip().lower(),
        checkpoint_every_s=every,
    )
    try:
        sim_fence(out)  # the names, and a mechanism the host lacks, as the executor would refuse it
    except ConfigError as exc:
        fail(str(exc))
    return out


def truth_number(option: str, text: str | None, default: float) -> float:
    """A ground-truth option as a finite number >= 0 (an ``error:`` line and exit 2 otherwise)."""
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        fail(f"{option} must be a number >= 0, got {text!r}")
    if not math.isfinite(value) or value < 0:
        fail(f"{option} must be a finite number >= 0, got {text!r}")
    return value


def with_floor(cfg: SimConfig, text: str | None) -> SimConfig:
    """``--min-gain``: the floor of completion-time or predictive, a gain in summed speed in -1..1."""
    if text is None:
        return cfg
    try:
        value = float(text)
    except ValueError:
        fail(f"--min-gain must be a number between -1 and 1 (a gain in summed speed), got {text!r}")
    if not -1.0 <= value <= 1.0:
        fail(f"--min-gain must be a number between -1 and 1 (a gain in summed speed), got {text!r}")
    if make_policy(cfg.policy).name not in FLOORED_POLICIES:
        fail(f"--min-gain applies to the {' and '.join(FLOORED_POLICIES)} policies, not {cfg.policy!r}")
    return replace(cfg, min_gain=value)


def with_warm_runs(cfg: SimConfig, text: str, learning: bool = False) -> SimConfig:
    """``--warm-runs``: a whole number 0..MAX_WARM_RUNS, and only with an estimator that learns
    (or ``--warm-learning``, which needs some replays)."""
    try:
        runs = int(text)
    except ValueError:
        fail(f"--warm-runs must be a whole number between 0 and {MAX_WARM_RUNS}, got {text!r}")
    if not 0 <= runs <= MAX_WARM_RUNS:
        fail(f"--warm-runs must be a whole number between 0 and {MAX_WARM_RUNS}, got {text!r}")
    if learning and not runs:
        fail("--warm-learning needs --warm-runs 1 or more (the replays whose lessons it keeps)")
    if runs and not learning and not learns_memory(cfg.estimator):
        fail(f"--warm-runs needs an estimator that learns memory (history or history+X), not {cfg.estimator!r}")
    return replace(cfg, warm_runs=runs, warm_learning=learning)


def with_truth(cfg: SimConfig, beta: str | None, scale: str, form: str = "sharing") -> SimConfig:
    b = truth_number("--interference-beta", beta, cfg.sharing.beta)
    s = truth_number("--activity-scale", scale, 1.0)
    try:
        make_truth(form, cfg.sharing, [])  # checks the spelling and reads a pair table once
    except (ValueError, OSError) as exc:
        fail(f"--truth: {exc}")
    return replace(cfg, sharing=replace(cfg.sharing, beta=b), activity_scale=s, truth=form)


def with_speed(cfg: SimConfig, form: str) -> SimConfig:
    """The ``--speed-truth`` option, checked (and a table read once) against the run's GPUs."""
    try:
        make_speed_truth(form, [], cfg.gpus)
    except (ValueError, OSError) as exc:
        fail(f"--speed-truth: {exc}")
    return replace(cfg, speed_truth=form.strip() or "alike")


def workload(trace: str, catalog: str, gpus: int, seed: int) -> list[Arrival]:
    cat = load_catalog(catalog or packaged("task_catalog.csv"))
    if trace.startswith("synthetic:"):
        try:
            n = int(trace.split(":", 1)[1])
        except ValueError:
            raise WorkloadError(f"cannot read {trace!r}; write synthetic:N with N a number of tasks") from None
        if not 1 <= n <= 1_000_000:
            raise WorkloadError("synthetic:N needs N between 1 and 1000000")
        return synthetic_trace(cat, n, gpus=gpus, seed=seed)
    if trace in ("t1", "t2"):
        trace = str(packaged(f"trace_{trace}.csv"))
    return load_trace(trace, cat)


def base_config(gpus: str, policy: str, estimator: str, queue: str | None) -> SimConfig:
    specs = parse_gpu_list(gpus)
    make_policy(policy)  # validate names early, with the error that lists valid ones
    make_estimator(estimator)
    make_queue(queue or DEFAULT_QUEUE)
    return SimConfig(gpus=tuple(specs), policy=policy, estimator=estimator, queue=queue or DEFAULT_QUEUE)
