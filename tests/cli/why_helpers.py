"""What the `carma why` tests of one task's tries share: a store of placements under a fresh
AIRFLOW_HOME, and the CLI run against it as a user runs it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterable
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime
from pathlib import Path

from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))


def nightly_try(
    number: int,
    outcome: TryOutcome,
    reasons: tuple[str, ...],
    *,
    decided_at: datetime,
    gpu_uuids: tuple[str, ...] = ("GPU-SIM-0000",),
    summary: str = "placed on GPU 0 (A100-40GB)",
) -> PlacementRecord:
    """Try ``number`` of ``nightly.train`` (run r1), declared 8,192 MiB."""
    return PlacementRecord(
        key=f"nightly/train/r1/-1#{number}",
        dag_id="nightly",
        task_id="train",
        run_id="r1",
        try_number=number,
        decided_at=decided_at,
        outcome=outcome,
        gpu_uuids=gpu_uuids,
        estimate_mib=8192,
        estimate_source="declared",
        summary=summary,
        reasons=reasons,
    )


def home_with(tmp_path: Path, tries: Iterable[PlacementRecord]) -> dict[str, str]:
    """The environment of a `carma` run whose store (under ``tmp_path``) holds ``tries``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated")
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    for rec in tries:
        store.upsert_placement(rec)
    store.close()
    return env


def carma_script(env: dict[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``carma ARGS`` through the console script, in a process of its own (about 1.4 CPU-seconds)."""
    return subprocess.run([CARMA, *args], env=env, capture_output=True, text=True, check=check, timeout=120)


def carma(env: dict[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``carma ARGS`` with ``env`` as its whole environment, run by the console script's own ``main``
    in this process: the same output and exit status as :func:`carma_script` for a small part of its
    CPU (the imports are paid once per worker).  Standard output is not a terminal, as in a pipe."""
    import pytest

    from carma_airflow.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setattr(sys, "argv", [CARMA, *args])
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    done = subprocess.CompletedProcess([CARMA, *args], code, out.getvalue(), err.getvalue())
    if check:
        done.check_returncode()
    return done
