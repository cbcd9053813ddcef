"""``airflow carma ...``: the carma CLI mounted into Airflow's (same commands, same output)."""

from __future__ import annotations

import argparse
from typing import Any


def _forward(argv: list[str]) -> None:
    from carma_airflow.cli import _register, app

    _register()
    app(args=argv, prog_name="airflow carma", standalone_mode=True)


def _gpus(args: argparse.Namespace) -> None:
    _forward(["gpus", *(["--json"] if args.json else [])])


def _placements(args: argparse.Namespace) -> None:
    argv = ["placements"]
    if args.dag_id:
        argv += ["--dag-id", args.dag_id]
    _forward(argv + (["--json"] if args.json else []))


def _why(args: argparse.Namespace) -> None:
    _forward(["why", args.task, *(["--json"] if args.json else [])])


def _model(args: argparse.Namespace) -> None:
    _forward(["model", *(["--json"] if args.json else [])])


def _hosts(args: argparse.Namespace) -> None:
    _forward(["hosts", *(["--json"] if args.json else [])])


def _agent(args: argparse.Namespace) -> None:
    _forward(["agent", *(["--once"] if args.once else [])])


def carma_cli_commands() -> list[Any]:
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand

    as_json = Arg(("--json",), help="print JSON", action="store_true")  # type: ignore[no-untyped-call]
    dag_id = Arg(("--dag-id",), help="only this DAG")  # type: ignore[no-untyped-call]
    task = Arg(("task",), help="DAG_ID.TASK_ID")  # type: ignore[no-untyped-call]
    once = Arg(("--once",), help="publish one heartbeat, print it, exit", action="store_true")  # type: ignore[no-untyped-call]
    return [
        GroupCommand(
            name="carma",
            help="CARMA GPU placement: GPUs, placements, why a task waits, and the GPU host agent",
            subcommands=(
                ActionCommand(name="gpus", help="live GPU table", func=_gpus, args=(as_json,)),
                ActionCommand(
                    name="placements", help="placement decisions and outcomes", func=_placements, args=(dag_id, as_json)
                ),
                ActionCommand(
                    name="why", help="why a task waits or went where it went", func=_why, args=(task, as_json)
                ),
                ActionCommand(
                    name="model",
                    help="the interference learned per GPU model (beta, activity scale k, confidence)",
                    func=_model,
                    args=(as_json,),
                ),
                ActionCommand(
                    name="hosts",
                    help="GPU hosts of Celery dispatch: heartbeats, GPUs, running tries",
                    func=_hosts,
                    args=(as_json,),
                ),
                ActionCommand(
                    name="agent",
                    help="this GPU host's agent: publish its GPUs and a heartbeat (dispatch = celery)",
                    func=_agent,
                    args=(once,),
                ),
            ),
        )
    ]
