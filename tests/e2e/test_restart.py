"""The scheduler (and the executor in it) is killed while GPU tasks run, then started again.

Nothing may be lost or run twice: the new executor finds the tries in the store, keeps their
GPUs reserved while their processes run, adopts them when the scheduler hands them over, and
reports how they ended; no GPU stays reserved afterwards.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from carma_airflow.store import Store
from carma_airflow.store.live_snapshots import PREFIX, name_of

pytestmark = [pytest.mark.e2e, pytest.mark.db]


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_tasks_survive_a_scheduler_kill_and_are_adopted(
    airflow_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release-tries"  # the tries train until this file exists
    monkeypatch.setenv("CARMA_E2E_RELEASE", str(release))
    stack = airflow_stack(
        simulated_gpus="2xA100-40GB",
        AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL="5",
        AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD="8",
        snapshot_period="0.5",
    )
    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    run = stack.trigger("carma_restart")
    tasks = {"long_a", "long_b", "long_c"}
    deadline = time.time() + 120
    while time.time() < deadline:
        running = {p.task_id: p for p in store.placements(dag_id="carma_restart") if p.outcome == "running"}
        if set(running) == tasks and all(p.pid for p in running.values()):
            break
        time.sleep(1)
    else:
        raise AssertionError("tasks did not start:\n" + stack.tail("scheduler"))
    pids = {t: p.pid for t, p in running.items() if p.pid is not None}

    stack.kill("scheduler")  # the executor dies with it
    time.sleep(3)
    assert all(_alive(pid) for pid in pids.values())  # the task processes do not
    stack.start_component("scheduler")
    # the tries run on until the restarted scheduler has handed them over and its executor has
    # adopted them; then they end, and the new executor reports how (they trained a fixed 35 s:
    # about 35 s more than this needs at a load of 4, and too few where a restart takes longer)
    deadline = time.time() + 240
    while time.time() < deadline:
        adopted = [line for line in stack.tail("scheduler", 200_000).splitlines() if "Adopted" in line]
        if all(any(task in line for line in adopted) for task in tasks):
            break
        time.sleep(0.5)
    release.write_text("")

    assert stack.wait_run("carma_restart", run, timeout=240) == "success", stack.tail("scheduler", 8000)
    states = stack.task_states("carma_restart", run)
    assert {t: s for t, s in states.items()} == {t: ("success", 1) for t in tasks}  # none ran twice
    assert stack.query("select count(*) from task_instance_history where dag_id = 'carma_restart'")[0][0] == 0
    log = stack.tail("scheduler", 200_000)
    assert "outlived the previous executor" in log and "Adopted" in log
    deadline = time.time() + 30
    while time.time() < deadline:  # the run ends when the tasks report; the executor sees it next
        final = {p.task_id: (p.outcome, p.pid) for p in store.placements(dag_id="carma_restart")}
        if final == {t: ("success", pids[t]) for t in tasks}:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"store after the run: {final}")
    deadline = time.time() + 30
    while time.time() < deadline:  # the new executor's live view: no tenant left on any GPU
        # the new executor's snapshot (each executor writes its own: the killed one's stays)
        newest = max(store.executors(), key=lambda e: e.started_at).id
        snap = store.snapshots(PREFIX).get(name_of(newest))
        body = snap[1] if snap else {"gpus": [{"tenants": [1]}]}
        if body["gpus"] and all(not g["tenants"] for g in body["gpus"]):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"GPUs still reserved: {body['gpus']}")
    store.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
