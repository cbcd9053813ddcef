"""``carma hosts``: the GPU hosts behind Celery dispatch, as their agents and workers last reported."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from carma_airflow.cli import app, one_line_errors
from carma_airflow.cli.ops import _settings, _store


def _age_s(at: datetime | None, now: datetime) -> float | None:
    if at is None:
        return None
    return max(0.0, (now - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds())


def host_rows(hosts: list[Any], running: dict[str, int], timeout_s: float, now: datetime) -> list[dict[str, Any]]:
    """One plain row per host: heartbeat ages, whether it looks live, its GPUs and running tries.

    "live" here reads the timestamps against this machine's clock; the executor itself judges a
    host by whether its heartbeats keep changing on the scheduler's clock, which clock skew
    between hosts cannot fool.  The two agree unless the clocks differ by ``timeout_s`` or more.
    """
    rows = []
    for h in hosts:
        agent_age = _age_s(h.heartbeat_at, now)
        worker_age = _age_s(h.worker_at, now)
        problems = []
        if agent_age is None or agent_age > timeout_s:
            problems.append(f"agent silent for {agent_age:.0f} s" if agent_age is not None else "no agent")
        if worker_age is None:
            problems.append(f"no Celery worker on queue {h.queue} has reported")
        elif worker_age > timeout_s:
            problems.append(f"worker silent for {worker_age:.0f} s")
        used = sum(int(str(g.get("memory_used_mib") or 0)) for g in h.gpus)
        total = sum(int(str(g.get("memory_total_mib") or 0)) for g in h.gpus)
        models = Counter(str(g.get("name", "?")) for g in h.gpus)
        rows.append(
            {
                "host": h.host,
                "queue": h.queue,
                "backend": h.backend,
                "status": "live" if not problems else "silent: " + "; ".join(problems),
                "agent_age_s": agent_age,
                "worker_age_s": worker_age,
                "gpus": len(h.gpus),
                "models": ", ".join(f"{n}x{m}" for m, n in sorted(models.items())),
                "memory_used_mib": used,
                "memory_total_mib": total,
                "errors": [str(g.get("error")) for g in h.gpus if g.get("error")],
                "running_tries": running.get(h.host, 0),
            }
        )
    return rows


@app.command("hosts")
@one_line_errors
def hosts_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """GPU hosts of Celery dispatch: heartbeats of agent and worker, GPUs, memory, running tries."""
    settings = _settings()
    store = _store(settings)
    try:
        hosts = store.hosts()
        running = store.dispatch_counts("sent")
    finally:
        store.close()
    rows = host_rows(hosts, running, settings.host_timeout_seconds, datetime.now(UTC))
    if as_json:
        typer.echo(json.dumps(rows))
        return
    if not rows and settings.dispatch != "celery":  # one host, nothing to run on the others
        typer.echo(
            f"[carma] dispatch = {settings.dispatch}: every GPU try runs on the scheduler's own host, which needs no"
            " agent; `carma gpus` shows its GPUs (`carma hosts` lists the GPU hosts of dispatch = celery:"
            " docs/multihost.md)"
        )
        return
    if not rows:
        typer.echo(
            f"no GPU host has published to the store {store.masked_url}: run `carma agent` on each GPU host "
            "(with [carma] dispatch = celery)"
        )
        return
    table = Table(title=f"GPU hosts (live = agent and worker heard within {settings.host_timeout_seconds:.0f} s)")
    for col in ("host", "status", "GPUs", "memory", "running", "queue", "agent", "worker"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["host"],
            r["status"] + ("; GPU errors: " + "; ".join(r["errors"]) if r["errors"] else ""),
            f"{r['gpus']} ({r['models']})" if r["gpus"] else "0",
            f"{r['memory_used_mib'] / 1024:.1f} / {r['memory_total_mib'] / 1024:.1f} GiB",
            str(r["running_tries"]),
            r["queue"],
            "-" if r["agent_age_s"] is None else f"{r['agent_age_s']:.0f} s ago",
            "-" if r["worker_age_s"] is None else f"{r['worker_age_s']:.0f} s ago",
        )
    Console().print(table)
