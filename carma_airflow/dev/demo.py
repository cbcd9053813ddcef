"""``carma demo`` / ``make demo``: a throwaway Airflow with CarmaExecutor on simulated GPUs.

Starts api-server, scheduler and dag-processor (SQLite, AIRFLOW_HOME under ``.demo/`` in the
current folder, lowered heartbeats) with CarmaExecutor on simulated 4xA100-40GB, triggers
``carma_demo``, shows live progress, then prints what happened per task, the makespan the
simulator gives the same tasks under exclusive allocation and under the default policy (completion-time)
(beside the measured wall time, which includes Airflow's own overhead and is labelled so),
writes a timeline PNG, and stops every process it started unless ``--keep``.  With ``--keep``
Airflow goes on serving on 127.0.0.1 only, with login on: the demo prints the URL, the user and
its password.  Safe to run twice: a previous demo's processes are stopped and its folder is
wiped first.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import time
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from carma_airflow.core.policies import DEFAULT_POLICY
from carma_airflow.core.shorten import whole_clauses

DEMO_DAGS = Path(__file__).resolve().parents[1] / "demo_dags"  # carma_airflow/demo_dags: the shipped demo DAG

GPUS = "4xA100-40GB"
SHARED_POLICY = DEFAULT_POLICY  # what the demo's executor places by ([carma] policy left at its default)
DAG_ID = "carma_demo"
SCALE_S_PER_MINUTE = 0.2  # one catalogue minute of solo training takes this long in the demo
DEMO_TASKS = (  # task types of the paper's catalogue that dags/carma_demo.py trains
    "vgg3",
    "resnet3",
    "Xception3",
    "BERT_large",
    "Inception",
    "resnet",
    "vgg",
    "efficientNet",
    "mobilenet2",
    "UNet",
    "resnet18_cifar100_20e_1",
    "efficientNet_cifar100_20e_2",
    "mobilenet_cifar100_20e_3",
    "resnet34_cifar100_20e_1",
    "Inception2",
    "dlrm",
    "xlnet_base_cased_2",
    "maskrcnn",
)


def _stop_previous(home: Path) -> None:
    """Stop what an earlier ``carma demo --keep`` left running (its process groups, then its tasks)."""
    from carma_airflow.dev.devstack import kill_task_processes

    pids: list[int] = []
    with suppress(ValueError, OSError):
        pids = [p for p in json.loads((home / "pids.json").read_text()) if isinstance(p, int) and p > 1]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        if pids and sig == signal.SIGTERM:
            time.sleep(2)
    kill_task_processes(home)


def _progress(states: dict[str, tuple[str, int]], elapsed: float) -> Table:
    counts: dict[str, int] = {}
    for state, _ in states.values():
        counts[state or "none"] = counts.get(state or "none", 0) + 1
    table = Table(title=f"carma_demo on simulated {GPUS} - {elapsed:.0f} s")
    for col in ("success", "running", "queued", "up_for_retry", "scheduled", "failed"):
        table.add_column(col, justify="right")
    table.add_row(
        *(str(counts.get(c, 0)) for c in ("success", "running", "queued", "up_for_retry", "scheduled", "failed"))
    )
    return table


def _timeline(records: list[Any], path: Path, started: datetime) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    uuids = sorted({u for r in records for u in r.gpu_uuids})
    lanes: dict[str, list[tuple[float, float]]] = {u: [] for u in uuids}
    cmap = plt.get_cmap("tab20")
    for i, r in enumerate(sorted(records, key=lambda r: r.started_at or started)):
        if r.started_at is None or r.ended_at is None:
            continue
        a, b = (r.started_at - started).total_seconds(), (r.ended_at - started).total_seconds()
        for u in r.gpu_uuids:
            depth = sum(1 for x, y in lanes[u] if x < b and a < y)
            lanes[u].append((a, b))
            y = uuids.index(u)
            outcome = str(r.outcome)
            color = "black" if outcome == "oom" else "tab:red" if outcome == "failed" else cmap(i % 20)
            hatch = "////" if outcome == "failed" else None
            ax.broken_barh([(a, b - a)], (y - 0.4 + (depth % 3) * 0.27, 0.25), color=color, hatch=hatch)
            ax.text(a, y - 0.4 + (depth % 3) * 0.27 + 0.12, r.task_id.removeprefix("train_"), fontsize=6, va="center")
    ax.set_yticks(range(len(uuids)))
    ax.set_yticklabels([f"GPU {i}" for i in range(len(uuids))])
    ax.set_xlabel(
        "seconds since the first placement (black: try that hit CUDA OOM; red, hatched: try that failed otherwise)"
    )
    ax.set_title("carma_demo: CarmaExecutor placements on simulated GPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _simulated_makespans(startup_s: float = 0.0) -> tuple[float, float]:
    """Simulated makespan of the demo's GPU tasks: exclusive vs the default policy (SHARED_POLICY, same scale).

    ``startup_s`` is added to every task's duration: what starting a task process costs in
    Airflow, which the simulator otherwise leaves out."""
    from dataclasses import replace

    from carma_airflow.core.gpu import parse_gpu_list
    from carma_airflow.sim import SimConfig, simulate
    from carma_airflow.sim.workload import Arrival, load_catalog, packaged

    scale = SCALE_S_PER_MINUTE / 60
    names = DEMO_TASKS
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = [
        Arrival(i, 0.0, replace(catalog[n], solo_s=catalog[n].solo_s * scale + startup_s)) for i, n in enumerate(names)
    ]
    base = SimConfig(gpus=tuple(parse_gpu_list(GPUS)))
    model = replace(base.sharing, ramp_s=0.5)
    excl = simulate(replace(base, policy="exclusive", estimator="gpumemnet", queue="fifo", sharing=model), arrivals)
    # the demo DAG declares GPUMemNet's figure for each task (exclusive where it gave up): that estimator
    # plays those declarations (the simulator's default is the executor's, for undeclared tasks)
    ours = simulate(replace(base, policy=SHARED_POLICY, estimator="gpumemnet", sharing=model), arrivals)
    return excl.makespan_s, ours.makespan_s


def run_demo(home: Path, keep: bool = False, out_dir: Path | None = None, timeout_s: float = 600) -> int:
    from carma_airflow.dev.devstack import AirflowStack
    from carma_airflow.store.store import Store

    probe = Console()
    console = probe if probe.width >= 120 else Console(width=140)
    home = home.resolve()
    _stop_previous(home)
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    out = (out_dir or Path("out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stack = AirflowStack(
        home,
        DEMO_DAGS,
        simulated_gpus=GPUS,
        AIRFLOW__CORE__PARALLELISM="32",
    )
    console.print(f"[bold]carma demo[/]: starting Airflow (api-server, scheduler, dag-processor) in {home}")
    t0 = time.time()
    stack.start()
    (home / "pids.json").write_text(json.dumps([p.pid for p in stack.procs.values()]))
    console.print(f"Airflow is up in {time.time() - t0:.0f} s; triggering {DAG_ID}")
    try:
        run_id = stack.trigger(DAG_ID)
        started = time.time()
        state = None
        with Live(_progress({}, 0), console=console, refresh_per_second=2) as live:
            while time.time() - started < timeout_s:
                rows = stack.query("select state from dag_run where dag_id = :d and run_id = :r", d=DAG_ID, r=run_id)
                state = rows[0][0] if rows else None
                live.update(_progress(stack.task_states(DAG_ID, run_id), time.time() - started))
                if state in ("success", "failed"):
                    break
                time.sleep(1)
        wall = time.time() - started
        store = Store(f"sqlite:///{home / 'carma.db'}")
        records = store.placements(dag_id=DAG_ID, limit=1000)
        _report(console, stack, run_id, records, wall, state, out)
    finally:
        if keep:
            _print_login(console, stack)
        else:
            stack.stop()
            console.print("stopped every process the demo started")
    return 0 if state == "success" else 1


def _print_login(console: Console, stack: Any) -> None:
    """Where the Airflow left running is and how to log in (UI and REST API)."""
    login = json.dumps({"username": stack.username, "password": stack.password})
    console.print(
        f"Airflow keeps running on {stack.base_url}/ (127.0.0.1 only; stop it: carma demo --stop)\n"
        f"  log in as [bold]{stack.username}[/] with password [bold]{stack.password}[/] "
        f"(also in {stack.passwords_file})\n"
        f"  REST API token: curl -X POST {stack.base_url}/auth/token -H 'Content-Type: application/json' "
        f"-d '{login}'\n"
        f"  then: curl {stack.base_url}/api/v2/dags -H 'Authorization: Bearer <access_token>'",
        soft_wrap=True,
        highlight=False,
        markup=True,
    )


def _startup_s(stack: Any, run_id: str, tries: dict[str, list[Any]]) -> list[float]:
    """Per successful GPU try: its process's wall time minus the training the task itself timed
    (``wall_s`` in its XCom), i.e. what Airflow spent starting and finishing the task process."""
    out = []
    for task_id, rows in tries.items():
        last = rows[-1]
        if str(last.outcome) != "success" or last.started_at is None or last.ended_at is None:
            continue
        result = stack.xcom(DAG_ID, run_id, task_id)
        if isinstance(result, dict) and isinstance(result.get("wall_s"), (int, float)):
            out.append(max(0.0, (last.ended_at - last.started_at).total_seconds() - float(result["wall_s"])))
    return out


def _makespans(console: Console, n_tasks: int, measured: float, startup: list[float]) -> None:
    """Like with like: simulated makespans side by side (with their ratio), the measured one on a
    row of its own, next to the simulation that counts the same start-up the measured run paid."""
    excl, ours = _simulated_makespans()
    table = Table(title=f"GPU makespan of the {n_tasks} training tasks (first placement to last end)")
    for col in ("", "exclusive", SHARED_POLICY, f"{SHARED_POLICY} / exclusive"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("simulator: training time only, no Airflow", f"{excl:.0f} s", f"{ours:.0f} s", f"{ours / excl:.2f}x")
    if startup:
        median = statistics.median(startup)
        excl_s, ours_s = _simulated_makespans(median)
        table.add_row(
            f"simulator: + {median:.1f} s start-up per task (median measured here)",
            f"{excl_s:.0f} s",
            f"{ours_s:.0f} s",
            f"{ours_s / excl_s:.2f}x",
        )
    table.add_row("measured here: Airflow + CarmaExecutor, wall time", "not run", f"{measured:.0f} s", "-")
    console.print(table)
    spread = f" ({min(startup):.1f}-{max(startup):.1f} s a try here)" if startup else ""
    console.print(
        "Measured: wall time in this Airflow, with the scheduler's heartbeats, the placement lock window "
        f"and each task process's start-up{spread}, which the first simulator row leaves out: hold it "
        "against the row that adds the start-up. Exclusive allocation was not run here; its figures are simulated.",
        highlight=False,
    )


def _report(
    console: Console, stack: Any, run_id: str, records: list[Any], wall: float, state: str | None, out: Path
) -> None:
    by_task: dict[str, list[Any]] = {}
    for r in records:
        by_task.setdefault(r.task_id, []).append(r)
    failures = _failures(records, stack.task_states(DAG_ID, run_id))
    verdict = f"{state} in {wall:.0f} s"
    if failures:
        verdict += f"; {len(failures)} {'try' if len(failures) == 1 else 'tries'} failed (listed below the table)"
    table = Table(title=f"carma_demo: {verdict}")
    for col in ("task", "GPU(s)", "wait s", "run s", "tries", "outcome", "memory declared / peak MiB"):
        table.add_column(col)
    first_decided = min((r.decided_at for r in records), default=None)
    for task_id, tries in sorted(by_task.items()):
        tries.sort(key=lambda r: r.try_number)
        last = tries[-1]
        gpus = ",".join(u.rsplit("-", 1)[-1].lstrip("0") or "0" for u in last.gpu_uuids)
        wait = (last.started_at - tries[0].decided_at).total_seconds() if last.started_at else float("nan")
        run = (last.ended_at - last.started_at).total_seconds() if last.ended_at and last.started_at else float("nan")
        outcome = " -> ".join(str(t.outcome) for t in tries)
        table.add_row(
            task_id.removeprefix("train_"),
            gpus,
            f"{wait:.1f}",
            f"{run:.1f}",
            str(len(tries)),
            outcome,
            f"{tries[0].estimate_mib} / {last.peak_mib or '-'}",
        )
    states = stack.task_states(DAG_ID, run_id)
    for cpu_task in ("prepare_data", "summarise"):
        if cpu_task in states:
            state, tries_n = states[cpu_task]
            table.add_row(f"{cpu_task} (CPU, LocalExecutor)", "-", "-", "-", str(tries_n), str(state), "-")
    console.print(table)
    for line in failures:
        console.print(f"[red]failed[/]: {line}", highlight=False)
    from carma_airflow.core.checkpoints import resume_line

    for r in sorted(records, key=lambda r: (r.task_id, r.try_number)):  # retries that did not start over
        if (resumed := resume_line(r.try_number, r.reasons)) is not None:
            console.print(f"{r.task_id.removeprefix('train_')}: {resumed}", highlight=False)
    if records and first_decided is not None:
        ends = [r.ended_at for r in records if r.ended_at]
        measured = (max(ends) - first_decided).total_seconds() if ends else float("nan")
        _makespans(console, len(by_task), measured, _startup_s(stack, run_id, by_task))
        png = out / "demo_timeline.png"
        _timeline(records, png, first_decided)
        console.print(f"timeline: {png}")


def _failures(records: list[Any], states: dict[str, tuple[str, int]]) -> list[str]:
    """Every try of the run that did not succeed, with what ended it: a CUDA OOM that CARMA retried
    is as much a part of the story as a try that timed out talking to Airflow's API, and the run's
    final state alone hides both."""
    lines = []
    for r in sorted(records, key=lambda r: (r.task_id, r.try_number)):
        outcome = str(r.outcome)
        if outcome not in ("oom", "failed"):
            continue
        ran = "never started" if r.started_at is None else "ran"
        why = whole_clauses((r.summary or "no reason recorded").strip().splitlines()[0], 200)  # by clause
        lines.append(f"{r.task_id.removeprefix('train_')} try {r.try_number}: {outcome} ({ran}): {why}")
    for task_id, (state, tries) in sorted(states.items()):  # CPU tasks and tries CARMA never saw end
        if state in ("failed", "upstream_failed") and not any(r.task_id == task_id for r in records):
            lines.append(f"{task_id} try {tries}: {state} in Airflow (see its log in the UI)")
    return lines


def stop_demo(home: Path) -> None:
    _stop_previous(home.resolve())
