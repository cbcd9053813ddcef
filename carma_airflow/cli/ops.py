"""``carma gpus``, ``carma placements`` and ``carma why``: what the executor sees and decided."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from carma_airflow.cli import app, fail, one_line_errors


def _settings() -> Any:
    from carma_airflow.config.settings import CarmaSettings

    return CarmaSettings.from_config_file()  # without importing Airflow: a command starts in a second less


def _store(settings: Any) -> Any:
    import logging

    from carma_airflow.store.store import Store

    store = Store(settings.store_url)
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)  # keep --json output clean
    try:
        store.migrate()
    finally:
        alembic_log.setLevel(level)
    return store


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _record_dict(rec: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in asdict(rec).items()}


WideOpt = Annotated[bool, typer.Option("--wide", help="never shorten a cell, even on a narrow terminal")]
_UNLIMITED = 100_000  # columns: a table never needs more, so no cell is shortened


def _table_console(wide: bool, terminal_width: int | None = None) -> Console:
    """Where a table goes.  A terminal gets a table that fits it (cells shortened with ...) unless
    ``--wide``; a pipe or a file always gets every cell in full, so ``carma gpus | grep`` sees
    whole task names."""
    console = Console(width=terminal_width)
    if console.is_terminal and not wide:
        return console
    return Console(width=_UNLIMITED)


def _task_name(rec: Any) -> str:
    """``dag.task``, with ``[map index]`` for a mapped task's instance."""
    return f"{rec.dag_id}.{rec.task_id}" + (f"[{rec.map_index}]" if rec.map_index >= 0 else "")


@app.command("gpus")
@one_line_errors
def gpus_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    wide: WideOpt = False,
) -> None:
    """Live GPU table: memory, activity, risk and tenants (reads the GPUs and the store)."""
    from pathlib import Path

    from carma_airflow.core.risk import is_high_risk
    from carma_airflow.monitor.sampler import make_probe

    settings = _settings()
    probe = make_probe(
        settings.gpu_backend,
        settings.simulated_gpus,
        Path(settings.state_dir) / "simulated-gpus.json",
        host=settings.host,
    )
    try:
        samples = probe.sample()
    finally:
        probe.close()
    store = _store(settings)
    running = [p for p in store.running() if _plain(p.outcome) == "running"]
    activity = _tenant_activities(_current_snapshots(store, settings))
    rows: list[dict[str, Any]] = []
    for s in samples:
        mine = [p for p in running if s.uuid in p.gpu_uuids]
        tenants = [p.label or _task_name(p) for p in mine]
        tenant_activity = [activity.get(p.key) for p in mine]
        smact, smocc, drama = s.smact or 0.0, s.smocc or 0.0, s.drama or 0.0
        risk = "error" if s.error else ("high" if is_high_risk(smact, smocc, drama) else "ok")
        rows.append(
            {
                "index": s.index,
                "uuid": s.uuid,
                "name": s.name,
                "host": s.host,
                "memory_used_mib": s.memory_used_mib,
                "memory_total_mib": s.memory_total_mib,
                "smact": smact,
                "smocc": smocc,
                "drama": drama,
                "activity_source": s.activity_source,
                "risk": risk,
                "error": s.error,
                "tenants": tenants,
                "tenant_activity": tenant_activity,  # each tenant's learned solo SM activity, None: not known
            }
        )
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table(title=f"GPUs on {settings.host} ({settings.gpu_backend}; {_isolation_line(settings)})")
    for col in ("GPU", "model", "memory", "SM act", "SM occ", "DRAM", "risk", "tenants"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["index"]),
            r["name"],
            f"{r['memory_used_mib'] / 1024:.1f} / {r['memory_total_mib'] / 1024:.1f} GiB",
            f"{r['smact']:.2f}",
            f"{r['smocc']:.2f}",
            f"{r['drama']:.2f}",
            r["error"] or r["risk"],
            ", ".join(_with_activity(t, a) for t, a in zip(r["tenants"], r["tenant_activity"], strict=True)) or "-",
        )
    console = _table_console(wide)
    console.print(table)
    for line in _wait_view(store, settings).lines(datetime.now(timezone.utc)):
        console.print(line, markup=False, highlight=False)  # wrapped to a terminal as the table is


def _isolation_line(settings: Any) -> str:
    """The memory fence in force on this host (docs/isolation.md), or why there is none."""
    from carma_airflow.core.errors import ConfigError
    from carma_airflow.core.fencing import CapRule, IsolationMode
    from carma_airflow.taskrun.isolation import host_isolation, resolve

    try:
        rule = CapRule(getattr(settings, "isolation_cap", CapRule.PROMISE.value))  # fixed or live, in the line
        return resolve(IsolationMode.parse(settings.isolation), host_isolation(settings.gpu_backend), rule).describe()
    except ConfigError as exc:
        return f"isolation {settings.isolation} unavailable: {exc}"


def _current_snapshots(store: Any, settings: Any) -> dict[str, tuple[datetime, dict[str, Any]]]:
    """The live snapshots of the executors that run (a gone one's only where its host has no other)."""
    from carma_airflow.store.live_snapshots import PREFIX, current

    snapshots = store.snapshots(PREFIX)
    return current(snapshots, store.executors(), datetime.now(timezone.utc).timestamp(), settings.peer_timeout_seconds)


def _tenant_activities(snapshots: dict[str, tuple[datetime, dict[str, Any]]]) -> dict[str, float]:
    """Placement key -> the tenant's learned activity, from the executors' live snapshots (where given)."""
    import math

    found: dict[str, float] = {}
    for _, body in snapshots.values():
        gpus = body.get("gpus")
        for gpu in gpus if isinstance(gpus, list) else ():
            tenants = gpu.get("tenants") if isinstance(gpu, dict) else None
            for t in tenants if isinstance(tenants, list) else ():
                value = t.get("activity") if isinstance(t, dict) else None
                key = t.get("key") if isinstance(t, dict) else None
                if isinstance(key, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.update({key: float(value)} if math.isfinite(value) else {})
    return found


def _with_activity(label: str, activity: float | None) -> str:
    return label if activity is None else f"{label} (activity {activity:.2f})"


@app.command("placements")
@one_line_errors
def placements_cmd(
    dag_id: Annotated[str | None, typer.Option("--dag-id", help="only this DAG")] = None,
    limit: Annotated[int, typer.Option(help="most recent N tries")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list")] = False,
    wide: WideOpt = False,
) -> None:
    """Every placement decision and how each try ended (newest first)."""
    if not 1 <= limit <= 1_000_000:  # a larger int overflows the database's LIMIT
        fail("--limit must be between 1 and 1000000")
    records = _store(_settings()).placements(dag_id=dag_id, limit=limit)
    rows = [_record_dict(r) for r in records]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table(title="CARMA placements")
    for col in ("dag.task", "run", "try", "GPUs", "outcome", "estimate", "peak", "decided"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            f"{r['dag_id']}.{r['task_id']}" + (f"[{r['map_index']}]" if r["map_index"] >= 0 else ""),
            r["run_id"],
            str(r["try_number"]),
            ",".join(r["gpu_uuids"]) or "-",
            r["outcome"],
            f"{r['estimate_mib'] or '-'}",
            f"{r['peak_mib'] or '-'}",
            r["decided_at"] or "-",
        )
    _table_console(wide, terminal_width=200).print(table)


def _speed_line(store: Any, task: str) -> str | None:
    """The task's predicted run alone on each GPU model the store has solo runs of (core/model_speed.py)."""
    from carma_airflow.core.model_speed import SoloRunTimes, predicted_line

    runs = SoloRunTimes()
    for dag_id, task_id, gpu_model, seconds in store.recent_solo_runs_by_model():
        runs.add(f"{dag_id}.{task_id}", gpu_model, seconds)
    return predicted_line(runs, task)


def _shared_line(store: Any, dag_id: str, task_id: str) -> str | None:
    """For a task never measured alone whose first tries ran shared all along: their shortest duration
    (at most that alone) and the run alone estimated from them (core/policies/durations.py)."""
    import statistics

    from carma_airflow.core.model_speed import duration_text

    if store.recent_solo_runs(task=(dag_id, task_id)):
        return None
    rows = [(s, e, m) for _, _, m, s, e in store.recent_shared_runs(task=(dag_id, task_id))]
    if not rows:
        return None
    seconds, _, model = min(rows, key=lambda row: row[0])
    where = f" on {model}" if model else ""
    line = (
        f"run alone never measured: {len(rows)} first tr{'y' if len(rows) == 1 else 'ies'} ran shared all along, "
        f"the shortest {duration_text(seconds)}{where} (at most that alone)"
    )
    estimates = [e for _, e, _ in rows if e is not None]
    if estimates:
        median = statistics.median(estimates)
        line += (
            f"; estimated {duration_text(median)} alone from the slowdown predicted when placed (the rule "
            "scales it by how far such estimates came out for the tasks measured alone)"
        )
    return line


@app.command("why")
@one_line_errors
def why_cmd(
    task: Annotated[str, typer.Argument(help="DAG_ID.TASK_ID")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Why a task waits, or why it went where it went (latest tries first)."""
    if "." not in task:
        fail(f"cannot read {task!r}; write DAG_ID.TASK_ID, e.g. training.train_bert")
    from carma_airflow.core.checkpoints import RESUME_REASON
    from carma_airflow.core.estimators import outgrew_declaration
    from carma_airflow.core.fencing import FENCE_REASON, fence_line
    from carma_airflow.core.grown import grown_line
    from carma_airflow.views.learned import activity, activity_line

    dag_id, task_id = task.split(".", 1)
    map_index = None  # ``dag.task[3]``: one mapped instance, named as `carma placements` prints it
    if task_id.endswith("]") and "[" in task_id:
        task_id, _, index = task_id[:-1].rpartition("[")
        if not index.isdigit():
            fail(f"cannot read the map index in {task!r}; write DAG_ID.TASK_ID[N], e.g. training.train[3]")
        map_index = int(index)
    settings = _settings()
    store = _store(settings)
    view = _wait_view(store, settings)
    records = [r for r in store.latest_for(dag_id, task_id) if map_index is None or r.map_index == map_index]
    if not records:
        fail(f"no placement recorded for {task}; is it a CarmaExecutor task that was queued?")
    learned = activity([(r.sm_activity, r.source, bool(r.co_tasks)) for r in store.activity_records(dag_id, task_id)])
    speed = _speed_line(store, f"{dag_id}.{task_id}")  # a mixed fleet: its predicted run on each GPU model
    shared = _shared_line(store, dag_id, task_id)  # never run alone: what its shared tries say of it
    owner_alive = {w.record.key: w.owner_alive for w in view.waiting}
    places = _queue_places(records, store, settings)  # a waiting try's priority and place
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        **_record_dict(r),
                        "activity": learned,
                        "predicted_runs": speed,
                        "shared_runs": shared,
                        "resumed": _resumed(r),
                        "fence": fence_line(r.reasons),
                        "owner_running": owner_alive.get(r.key),
                        "queue_place": None if (p := places.get(r.key)) is None else asdict(p),
                        "ended_unrecorded": _ended_unrecorded(r, settings),
                    }
                    for r in records
                ]
            )
        )
        return
    if (stopped := view.not_running_line()) is not None:  # the entries below are the past, not now
        typer.echo(f"note: {stopped}", err=True)
    typer.echo(f"{dag_id}.{task_id} {activity_line(learned)}")
    if speed is not None:
        typer.echo(speed)
    if shared is not None:
        typer.echo(shared)
    for r in records[:3]:
        ended = _ended_unrecorded(r, settings)
        state = "ended; CarmaExecutor records how at its next heartbeat" if ended else _plain(r.outcome)
        typer.echo(f"{_task_name(r)} run {r.run_id} try {r.try_number}: {state}")
        if (place := places.get(r.key)) is not None:  # priority, place, then what it waits for
            typer.echo(f"  {place.line()}")
            typer.echo(f"  waits for: {r.summary}")
        else:
            typer.echo(f"  {r.summary}")
        if owner_alive.get(r.key) is False and view.running:
            typer.echo(f"  its CarmaExecutor ({r.owner}) is not running: nothing places it until Airflow resets it")
        if (resumed := _resumed(r)) is not None:
            typer.echo(f"  {resumed}")
        if (fence := fence_line(r.reasons)) is not None:  # this try's own fence, per GPU
            typer.echo(f"  memory fence of this try: {fence}")
        peak = _peak(r, ended)
        rule = "none" if settings.isolation == "none" else settings.isolation_cap
        grown = grown_line(str(r.outcome), r.peak_mib, r.estimate_mib, r.estimate_source == "declared", rule)
        if outgrew_declaration(r.estimate_source):  # flagged: its runs outgrew the memory it declared
            typer.echo(f"  memory estimate {r.estimate_mib} MiB: {r.estimate_source}; {peak}")
        else:
            typer.echo(f"  memory estimate {r.estimate_mib} MiB from {r.estimate_source}; {peak}")
        if grown is not None:  # past its declaration, let through by the fence: said, not hidden
            typer.echo(f"  {grown}")
        for line in [x for x in r.reasons if not x.startswith((RESUME_REASON, FENCE_REASON))][:10]:  # those: above
            typer.echo(f"  {line}")
    typer.echo(f"  memory fence on this host: {_isolation_line(settings)} (a task's executor_config isolation wins)")


def _queue_places(records: list[Any], store: Any, settings: Any) -> dict[str, Any]:
    """Placement key -> its QueuePlace, for each waiting one of ``records`` an executor lists."""
    from carma_airflow.views.queue_place import place_of

    if not any(r.outcome == "waiting" for r in records):
        return {}
    bodies = [body for _, body in _current_snapshots(store, settings).values()]
    found = {r.key: place_of(r.key, bodies) for r in records if r.outcome == "waiting"}
    return {k: v for k, v in found.items() if v is not None}


def _ended_unrecorded(rec: Any, settings: Any) -> bool:
    """A running try on this host whose process is gone: Airflow may already show its end, the
    store gets it at the executor's next heartbeat (it reads the result file then)."""
    from carma_airflow.taskrun.procstat import process_start_ticks

    if rec.outcome != "running" or rec.pid is None or (rec.host or settings.host) != settings.host:
        return False
    ticks = process_start_ticks(rec.pid)
    return ticks is None or (rec.pid_start is not None and ticks != rec.pid_start)


def _peak(rec: Any, ended: bool) -> str:
    if rec.peak_mib:
        return f"peak {rec.peak_mib} MiB"
    if ended:
        return "peak recorded with its end"
    return "peak not measured yet" if rec.outcome in ("waiting", "running") else "peak not recorded"


def _wait_view(store: Any, settings: Any) -> Any:
    """Every executor's waiting tries and heartbeats, from the store (waiting_view.py)."""
    from carma_airflow.views.waiting import read

    return read(store, datetime.now(timezone.utc), settings.peer_timeout_seconds)


def _resumed(rec: Any) -> str | None:
    """``try 2 resumed from step N (checkpoint of HH:MM:SS UTC, ...)``, None: it started from zero."""
    from carma_airflow.core.checkpoints import resume_line

    return resume_line(rec.try_number, rec.reasons)


@app.command("demo")
@one_line_errors
def demo_cmd(
    keep: Annotated[bool, typer.Option("--keep", help="leave Airflow running and print its URL")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="stop a demo left running with --keep")] = False,
    home: Annotated[str, typer.Option(help="AIRFLOW_HOME of the demo (wiped first)")] = ".demo/airflow",
    out: Annotated[str, typer.Option(help="folder for the timeline PNG")] = "out",
) -> None:
    """Run the main job: Airflow + CarmaExecutor on simulated 4xA100-40GB, the demo DAG, a report."""
    from pathlib import Path

    from carma_airflow.dev.demo import run_demo, stop_demo

    if stop:
        stop_demo(Path(home))
        typer.echo("demo stopped")
        return
    raise typer.Exit(run_demo(Path(home), keep=keep, out_dir=Path(out)))
