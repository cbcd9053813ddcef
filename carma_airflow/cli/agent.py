"""``carma agent``: the agent of one GPU host (``[carma] dispatch = celery``)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from typing import Annotated, Any

import typer

from carma_airflow.cli import app, one_line_errors


@app.command("agent")
@one_line_errors
def agent_cmd(
    once: Annotated[bool, typer.Option("--once", help="publish one heartbeat, print it as JSON, exit")] = False,
) -> None:
    """Publish this GPU host's GPUs and a heartbeat to the store every [carma] sample_period.

    Run one per GPU host, next to `airflow celery worker --queues <queue_prefix><host>`; the
    CarmaExecutor (dispatch = celery) places tries on the hosts whose agent and worker are alive.
    """
    from carma_airflow.config.settings import CarmaSettings
    from carma_airflow.distributed.agent import Agent

    settings = CarmaSettings.from_airflow()
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)  # keep --once output clean JSON
    try:
        agent = Agent.from_settings(settings)
    finally:
        alembic_log.setLevel(level)
    try:
        rec = agent.beat()  # fail fast (store unreachable, no driver) with the one-line message
        if once:
            summary: dict[str, Any] = {
                "host": rec.host,
                "queue": rec.queue,
                "backend": rec.backend,
                "heartbeat_at": rec.heartbeat_at.isoformat(),
                "gpus": [{k: g.get(k) for k in ("uuid", "index", "name", "memory_total_mib")} for g in rec.gpus],
            }
            typer.echo(json.dumps(summary, indent=2))
            return
        where = f"queue {rec.queue}, store {agent.store.masked_url}"
        typer.echo(f"carma agent: host {rec.host}, {len(rec.gpus)} GPUs, {where}")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        agent.run(stop)
    finally:
        agent.close()
