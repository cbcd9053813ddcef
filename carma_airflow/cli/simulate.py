"""``carma simulate`` and ``carma compare``."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from carma_airflow.cli import app, fail, one_line_errors
from carma_airflow.core.errors import ConfigError, WorkloadError
from carma_airflow.core.estimators import DEFAULT_ESTIMATOR, make_estimator
from carma_airflow.core.gpu import parse_gpu_list
from carma_airflow.core.policies import DEFAULT_POLICY, make_policy, policy_names
from carma_airflow.core.policies.floor import FLOORED_POLICIES
from carma_airflow.core.queueing import DEFAULT_QUEUE, make_queue
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim.compare import DEFAULT_COMPARISON, compare
from carma_airflow.sim.config import SimConfig
from carma_airflow.sim.engine import simulate
from carma_airflow.sim.memory import MAX_WARM_RUNS, learns_memory
from carma_airflow.sim.metrics import SimResult
from carma_airflow.sim.truth import make_truth
from carma_airflow.sim.workload import Arrival, load_catalog, load_trace, packaged, synthetic_trace

TraceOpt = Annotated[
    str,
    typer.Option(help="trace CSV (job_id,submit_s,task); 't1'/'t2' for the paper's; 'synthetic:N' for N random tasks"),
]
CatalogOpt = Annotated[str, typer.Option(help="task catalogue CSV (default: the paper's, shipped)")]
GpusOpt = Annotated[str, typer.Option(help="GPUs as NxSPEC, or a comma list: 4xA100-40GB,2xH100-80GB")]
EstimatorOpt = Annotated[str, typer.Option(help="oracle, gpumemnet, faketensor, horus, floor, history, declared")]
QueueOpt = Annotated[str | None, typer.Option(help="fifo (the paper's) or backfill (default)")]
SeedOpt = Annotated[int, typer.Option(help="seed for synthetic traces")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
WarmOpt = Annotated[
    str,
    typer.Option(
        "--warm-runs",
        help="with --estimator history: replay the trace this many times first; the learned peaks of their "
        "ended tries fill the store (a DAG that runs every day; memory only, unless --warm-learning)",
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


def _with_fencing(
    cfg: SimConfig,
    growth: str,
    isolation: str,
    host: str = "framework",
    cap_rule: str | None = None,
    checkpoint_every: str = "0",
) -> SimConfig:
    from carma_airflow.sim.fencing import sim_fence

    g = _truth_number("--memory-growth", growth, 0.0)
    every = _truth_number("--checkpoint-every", checkpoint_every, 0.0)
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


def _truth_number(option: str, text: str | None, default: float) -> float:
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


def _with_floor(cfg: SimConfig, text: str | None) -> SimConfig:
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


def _with_warm_runs(cfg: SimConfig, text: str, learning: bool = False) -> SimConfig:
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


def _with_truth(cfg: SimConfig, beta: str | None, scale: str, form: str = "sharing") -> SimConfig:
    b = _truth_number("--interference-beta", beta, cfg.sharing.beta)
    s = _truth_number("--activity-scale", scale, 1.0)
    try:
        make_truth(form, cfg.sharing, [])  # checks the spelling and reads a pair table once
    except (ValueError, OSError) as exc:
        fail(f"--truth: {exc}")
    return replace(cfg, sharing=replace(cfg.sharing, beta=b), activity_scale=s, truth=form)


def _workload(trace: str, catalog: str, gpus: int, seed: int) -> list[Arrival]:
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


def _config(gpus: str, policy: str, estimator: str, queue: str | None) -> SimConfig:
    specs = parse_gpu_list(gpus)
    make_policy(policy)  # validate names early, with the error that lists valid ones
    make_estimator(estimator)
    make_queue(queue or DEFAULT_QUEUE)
    return SimConfig(gpus=tuple(specs), policy=policy, estimator=estimator, queue=queue or DEFAULT_QUEUE)


@app.command("simulate")
@one_line_errors
def simulate_cmd(
    trace: TraceOpt = "t1",
    catalog: CatalogOpt = "",
    gpus: GpusOpt = "4xA100-40GB",
    policy: Annotated[str, typer.Option(help=f"one of {', '.join(policy_names())}")] = DEFAULT_POLICY,
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
    queue: QueueOpt = None,
    seed: SeedOpt = 0,
    interference_beta: BetaOpt = None,
    activity_scale: ScaleOpt = "1.0",
    truth: FormOpt = "sharing",
    warm_runs: WarmOpt = "0",
    warm_learning: WarmLearningOpt = False,
    memory_growth: GrowthOpt = "0",
    host: HostOpt = "framework",
    isolation: IsolationOpt = "auto",
    cap_rule: CapRuleOpt = None,
    checkpoint_every: CheckpointOpt = "0",
    min_gain: MinGainOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay a trace through one policy and print what it measured."""
    cfg = _with_truth(_config(gpus, policy, estimator, queue), interference_beta, activity_scale, truth)
    cfg = _with_floor(cfg, min_gain)
    cfg = _with_fencing(cfg, memory_growth, isolation, host, cap_rule, checkpoint_every)
    cfg = _with_warm_runs(cfg, warm_runs, warm_learning)
    arrivals = _workload(trace, catalog, len(cfg.gpus), seed)
    result = simulate(cfg, arrivals)
    _fail_on_impossible(result)
    summary = result.summary()
    if as_json:
        typer.echo(json.dumps(summary))
        return
    table = Table(title=f"carma simulate: {summary['policy']} on {summary['gpus']}", show_header=False)
    for key, value in summary.items():
        table.add_row(key, str(value))
    _console().print(table)


@app.command("compare")
@one_line_errors
def compare_cmd(
    trace: TraceOpt = "t1",
    catalog: CatalogOpt = "",
    gpus: GpusOpt = "4xA100-40GB",
    policies: Annotated[str, typer.Option(help="comma list of policies (names or paper short names)")] = ",".join(
        DEFAULT_COMPARISON
    ),
    estimator: EstimatorOpt = DEFAULT_ESTIMATOR,
    queue: Annotated[
        str | None, typer.Option(help="queue for all policies; default: fifo for the paper's, backfill for others")
    ] = None,
    seed: SeedOpt = 0,
    interference_beta: BetaOpt = None,
    activity_scale: ScaleOpt = "1.0",
    truth: FormOpt = "sharing",
    memory_growth: GrowthOpt = "0",
    host: HostOpt = "framework",
    isolation: IsolationOpt = "auto",
    cap_rule: CapRuleOpt = None,
    checkpoint_every: CheckpointOpt = "0",
    as_json: JsonOpt = False,
    plot: Annotated[Path | None, typer.Option(help="write a PNG: per-GPU timelines and a bar chart")] = None,
) -> None:
    """Compare policies against exclusive allocation on one trace (ratios; exclusive = 1.0)."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        fail("--policies is empty; give e.g. magm,interference-aware")
    for name in names:
        make_policy(name)
    cfg = _with_truth(_config(gpus, DEFAULT_POLICY, estimator, queue), interference_beta, activity_scale, truth)
    cfg = _with_fencing(cfg, memory_growth, isolation, host, cap_rule, checkpoint_every)
    if plot is not None:
        _check_plot_path(plot)
    arrivals = _workload(trace, catalog, len(cfg.gpus), seed)
    comparison = compare(arrivals, cfg, names, queue=queue)
    _fail_on_impossible(comparison.baseline)  # exclusive with the oracle: it cannot fit at all
    rows = comparison.rows()
    if plot is not None:
        from carma_airflow.sim.plot import plot_comparison

        try:
            plot_comparison(comparison, plot)
        except OSError as exc:  # no permission, disk full, a special file
            fail(f"cannot write {plot}: {exc.strerror or exc}")
    if as_json:
        typer.echo(json.dumps(rows))
        return
    _print_table(rows, plot)


def _fail_on_impossible(result: SimResult) -> None:
    """A task the placer says can never fit these GPUs is bad input: an ``error:`` line, exit 2."""
    if not result.never_fits:
        return
    first = result.never_fits[0]
    reason = first.reason.removeprefix("never fits: ")
    more = len(result.never_fits) - 1
    others = f" (and {more} more task{'s' if more > 1 else ''} that can never fit)" if more else ""
    fail(
        f"trace job {first.job_id} (task {first.task}) can never run on {result.gpus}: {reason}{others}; "
        "change the task in the catalogue or trace, or simulate GPUs that can hold it (--gpus)"
    )


def _check_plot_path(plot: Path) -> None:
    if plot.is_dir():
        fail(f"cannot write {plot}: it is a folder; give a file name such as out/compare.png")
    if not plot.parent.is_dir():
        fail(f"cannot write {plot}: folder {plot.parent} does not exist")
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = plot.suffix.lstrip(".").lower()
    if suffix not in FigureCanvasBase.get_supported_filetypes():
        fail(f"cannot write {plot}: unknown picture format {suffix!r}; end the name with .png, .svg or .pdf")


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    """A ratio for the table; ``-`` where it is undefined (e.g. the baseline completed nothing)."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _console() -> Console:
    probe = Console()
    return probe if probe.is_terminal else Console(width=160)


def _print_table(rows: list[dict[str, Any]], plot: Path | None) -> None:
    base = rows[0]
    table = Table(
        title=f"{base['gpus']}, {base['tasks']} tasks: ratios to exclusive "
        f"(makespan {base['makespan_s'] / 3600:.2f} h, {base['energy_kwh']:.1f} kWh)"
    )
    for col in (
        "policy",
        "estimator",
        "queue",
        "makespan",
        "wait",
        "JCT",
        "energy",
        "SM act",
        "SM occ",
        "memory",
        "slowdown",
        "OOM",
        "lost",
    ):
        table.add_column(col, justify="left" if col in ("policy", "estimator", "queue") else "right")
    for r in rows:
        table.add_row(
            r["policy"],
            r["estimator"],
            r["queue"],
            _fmt(r["makespan_s_ratio"], ".3f"),
            _fmt(r["mean_wait_s_ratio"] or 0, ".3f"),
            _fmt(r["mean_jct_s_ratio"], ".3f"),
            _fmt(r["energy_kwh_ratio"], ".3f"),
            _fmt(r["sm_activity_mean_ratio"], ".2f", "x"),
            _fmt(r["sm_occupancy_mean_ratio"], ".2f", "x"),
            _fmt(r["memory_used_mean_ratio"], ".2f", "x"),
            _fmt(r["mean_slowdown"], ".2f"),
            str(r["oom_crashes"]),
            str(r["lost"]),
        )
    console = _console()
    console.print(table)
    console.print(
        "Figures are predictions of the sharing model (docs/model.md), calibrated once on "
        "most-free-memory + oracle, trace_t1, 4xA100-40GB."
    )
    if plot is not None:
        console.print(f"plot written to {plot}")
