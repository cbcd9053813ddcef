"""`carma why` for a waiting try: its priority, the tries that go first, then what it waits for; and a
running try whose process has ended before the executor recorded it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from why_helpers import carma, home_with, nightly_try

from carma_airflow.store.records import TryOutcome
from carma_airflow.store.store import Store
from carma_airflow.taskrun.procstat import process_start_ticks

NOW = datetime(2026, 12, 6, 4, 0, tzinfo=timezone.utc)
WAITS = "waiting: no GPU with 30.0 GiB free (2 memory)"


def _snapshot(tmp_path: Path, waiting: list[dict[str, object]]) -> None:
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.put_snapshot("executor:gpu-01", datetime.now(timezone.utc), {"version": 1, "gpus": [], "waiting": waiting})
    store.close()


def test_a_waiting_try_says_its_priority_and_place_before_what_it_waits_for(tmp_path: Path) -> None:
    rec = nightly_try(1, TryOutcome.WAITING, (), decided_at=NOW, gpu_uuids=(), summary=WAITS)
    env = home_with(tmp_path, [rec])
    _snapshot(
        tmp_path,
        [
            {"key": rec.key, "label": "nightly.train", "priority": 10, "tie_break": 0},
            {"key": "other", "label": "nightly.big", "priority": 20, "tie_break": 0},
            {"key": "low", "label": "nightly.small", "priority": 1, "tie_break": 0},
        ],
    )
    out = carma(env, "why", "nightly.train")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("nightly.train run r1 try 1: waiting")
    assert lines[at + 1] == (
        "  priority 10; 1 waiting try of a higher priority goes first: nightly.big (20); 3 waiting for the GPUs"
        " of its executor in all"
    )
    assert lines[at + 2] == f"  waits for: {WAITS}"
    assert "peak not measured yet" in lines[at + 3]
    row = json.loads(carma(env, "why", "nightly.train", "--json").stdout)[0]
    assert row["queue_place"]["priority"] == 10 and row["queue_place"]["ahead"] == ["nightly.big (20)"]


def test_a_running_try_whose_process_ended_is_not_shown_running(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = process_start_ticks(gone.pid)
    gone.wait()  # reaped: its pid names no process now
    rec = replace(nightly_try(1, TryOutcome.RUNNING, (), decided_at=NOW), pid=gone.pid, pid_start=ticks, host="gpu-01")
    env = home_with(tmp_path, [rec])
    env["AIRFLOW__CARMA__HOST"] = "gpu-01"  # this host's try: its process is looked up here
    out = carma(env, "why", "nightly.train")
    assert out.returncode == 0, out.stderr
    assert "nightly.train run r1 try 1: ended; CarmaExecutor records how at its next heartbeat" in out.stdout
    assert "peak recorded with its end" in out.stdout and "peak - MiB" not in out.stdout


def test_a_try_that_grew_past_its_declaration_unstopped_is_said_so(tmp_path: Path) -> None:
    rec = replace(nightly_try(1, TryOutcome.SUCCESS, (), decided_at=NOW), peak_mib=30720)
    env = home_with(tmp_path, [rec])
    out = carma(env, "why", "nightly.train")
    assert out.returncode == 0, out.stderr
    assert "  grew to 30.0 GiB past its declared 8.0 GiB and was not stopped: the live cap" in out.stdout
