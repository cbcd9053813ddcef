"""``carma simulate`` and ``carma compare``: the commands and their output (their options and
how each is read: :mod:`carma_airflow.cli.sim_options`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from carma_airflow.cli import app, fail, one_line_errors
from carma_airflow.cli.sim_options import (
    BetaOpt,
    CapRuleOpt,
    CatalogOpt,
    CheckpointOpt,
    EstimatorOpt,
    FormOpt,
    GpusOpt,
    GrowthOpt,
    HostOpt,
    IsolationOpt,
    JsonOpt,
    MinGainOpt,
    QueueOpt,
    ScaleOpt,
    SeedOpt,
    SpeedOpt,
    TraceOpt,
    WarmLearningOpt,
    WarmOpt,
    base_config,
    with_fencing,
    with_floor,
    with_speed,
    with_truth,
    with_warm_runs,
    workload,
)
from carma_airflow.core.estimators import DEFAULT_ESTIMATOR
from carma_airflow.core.policies import DEFAULT_POLICY, make_policy, policy_names
from carma_airflow.sim.compare import DEFAULT_COMPARISON, compare
from carma_airflow.sim.engine import simulate
from carma_airflow.sim.metrics import SimResult


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
    speed_truth: SpeedOpt = "alike",
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
    cfg = with_truth(base_config(gpus, policy, estimator, queue), interference_beta, activity_scale, truth)
    cfg = with_speed(cfg, speed_truth)
    cfg = with_floor(cfg, min_gain)
    cfg = with_fencing(cfg, memory_growth, isolation, host, cap_rule, checkpoint_every)
    cfg = with_warm_runs(cfg, warm_runs, warm_learning)
    arrivals = workload(trace, catalog, len(cfg.gpus), seed)
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
    speed_truth: SpeedOpt = "alike",
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
    cfg = with_truth(base_config(gpus, DEFAULT_POLICY, estimator, queue), interference_beta, activity_scale, truth)
    cfg = with_speed(cfg, speed_truth)
    cfg = with_fencing(cfg, memory_growth, isolation, host, cap_rule, checkpoint_every)
    if plot is not None:
        _check_plot_path(plot)
    arrivals = workload(trace, catalog, len(cfg.gpus), seed)
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
