"""``carma model``: the interference the executor learned per GPU model (issue 13)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from carma_airflow.cli import app, one_line_errors
from carma_airflow.cli.ops import _settings, _store


@app.command("model")
@one_line_errors
def model_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The learned interference of each GPU model: beta, activity scale k, ranges, confidence, observations."""
    from carma_airflow.learned_view import MODEL_PREFIX, fit_lines, interference, nothing_learned_line

    store = _store(_settings())
    try:
        learned = interference(store.snapshots(MODEL_PREFIX))
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(learned))
        return
    for problem in learned["problems"]:
        typer.echo(f"warning: {learned['document']} {problem}", err=True)
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
