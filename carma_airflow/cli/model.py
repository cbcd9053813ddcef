"""``carma model``: the interference the executor learned per GPU model (issue 13), and carrying
it to another deployment (``carma model export`` / ``carma model import``)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from carma_airflow.cli import app, one_line_errors
from carma_airflow.cli.ops import _settings, _store
from carma_airflow.core.errors import CarmaError
from carma_airflow.core.model_speed import PairRatio, SoloRunTimes

model_app = typer.Typer(
    help="The learned interference of each GPU model; export it, or import one learned elsewhere.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(model_app, name="model")


@model_app.callback()
@one_line_errors
def model_cmd(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The learned interference of each GPU model: beta, activity scale k, ranges, confidence, observations;
    and the speed ratios between GPU models learned from solo run times (issue 44)."""
    if ctx.invoked_subcommand is not None:
        return
    from carma_airflow.views.learned import MODEL_PREFIX, fit_lines, interference, nothing_learned_line

    store = _store(_settings())
    try:
        learned = interference(store.snapshots(MODEL_PREFIX))
        runs = SoloRunTimes()
        for dag_id, task_id, gpu_model, seconds in store.recent_solo_runs_by_model():
            runs.add(f"{dag_id}.{task_id}", gpu_model, seconds)
    finally:
        store.close()
    ratios = runs.ratios()
    if as_json:
        typer.echo(json.dumps({**learned, "speed_ratios": [asdict(r) for r in ratios]}))
        return
    for problem in learned["problems"]:
        typer.echo(f"warning: {learned['document']} {problem}", err=True)
    _speed_lines(runs, ratios)
    if not learned["models"]:
        typer.echo(nothing_learned_line())
        return
    typer.echo(f"learned interference ({learned['document']}, written {learned['written_at']})")
    for row in learned["models"]:
        for line in fit_lines(row, learned["prior"]["min_observations"]):
            typer.echo(line)
    typer.echo(
        f"GPU models not listed use the prior: beta {learned['prior']['beta']:.2f}, "
        f"activity scale k {learned['prior']['activity_scale']:.2f}"
    )


def _speed_lines(runs: SoloRunTimes, ratios: list[PairRatio]) -> None:
    """The run-time ratios between GPU models (learned from tasks run alone on both, else the spec prior)."""
    models = runs.models()
    if not models:
        return
    typer.echo(f"solo run times by GPU model: {', '.join(models)}")
    for r in ratios:
        typer.echo(f"  {r.text()}")


@model_app.command("export")
@one_line_errors
def export_cmd(
    path: Annotated[str, typer.Argument(help="the file to write; - for standard output")] = "-",
    gpu_model: Annotated[
        list[str] | None, typer.Option("--gpu-model", help="only this GPU model's fit (repeatable)")
    ] = None,
) -> None:
    """Write the learned fits to a file that `carma model import` reads in another deployment.

    Every GPU model's fit (or those of --gpu-model), with the observations it rests on."""
    from carma_airflow.views.learned import INTERFERENCE_DOCUMENT, export_document

    store = _store(_settings())
    try:
        doc = export_document(store.snapshots(INTERFERENCE_DOCUMENT).get(INTERFERENCE_DOCUMENT), gpu_model or ())
    finally:
        store.close()
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    Path(path).write_text(text)
    typer.echo(f"wrote {', '.join(sorted(doc['models']))} to {path}")


@model_app.command("import")
@one_line_errors
def import_cmd(
    path: Annotated[Path, typer.Argument(help="a file `carma model export` wrote")],
    replace: Annotated[
        bool, typer.Option("--replace", help="also overwrite a GPU model whose fit this deployment has learned")
    ] = False,
) -> None:
    """Start this deployment from fits another learned on the same GPU models.

    Until its own tries teach it, the placer predicts collocations with them instead of the prior.
    Run it while no CarmaExecutor runs: a running one would overwrite them at its next refit."""
    from carma_airflow.views.learned import INTERFERENCE_DOCUMENT, merge_import, read_export

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CarmaError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CarmaError(f"{path} is not JSON ({exc}); write one with carma model export") from exc
    incoming = read_export(data)
    settings = _settings()
    store = _store(settings)
    try:
        now = time.time()
        live = [e for e in store.executors() if e.alive(now, settings.peer_timeout_seconds)]
        if live:
            who = ", ".join(f"{e.id} on {e.host} (pid {e.pid})" for e in live)
            raise CarmaError(
                f"a CarmaExecutor is running ({who}): it would overwrite the import at its next refit; "
                "stop the scheduler, import, then start it"
            )
        found = store.snapshots(INTERFERENCE_DOCUMENT).get(INTERFERENCE_DOCUMENT)
        merged, taken, kept = merge_import(None if found is None else found[1], incoming, replace)
        if taken:
            store.put_snapshot(INTERFERENCE_DOCUMENT, datetime.now(timezone.utc), merged)
    finally:
        store.close()
    for key in taken:
        typer.echo(f"imported {key}")
    for key in kept:
        typer.echo(f"kept {key}: this deployment has learned its own fit (--replace to overwrite it)")
