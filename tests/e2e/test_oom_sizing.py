"""In a real Airflow on simulated GPUs (issue 41): a task that held 5000 MiB and asked 13003 MiB more on
a full GPU gets a retry sized for at least 18 GiB, and succeeds on try 2 (tests/e2e/dags/carma_oom_sizing.py).
Before, try 2 was planned from what try 1 held (6400 MiB: 4998 x 1.25) and crashed the same way."""

from __future__ import annotations

import time

import pytest

from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.db]
DAG_ID = "carma_oom_sizing"


@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)  # the store backend is not what it tests
def test_a_full_gpu_oom_retry_asks_for_held_plus_asked_and_succeeds(default_stack) -> None:
    stack = default_stack
    store = Store(stack.env.get("AIRFLOW__CARMA__STORE_URL") or Store.default_url(str(stack.home)))
    run = stack.trigger(DAG_ID)
    # the fillers hold their GPUs until grower's try 2 has been handed over (it waits for a GPU
    # with room for what it held plus what it asked), then end (they held a fixed 40 s)
    deadline = time.time() + 240
    while time.time() < deadline and not any(r.try_number == 2 for r in store.latest_for(DAG_ID, "grower", run_id=run)):
        time.sleep(0.5)
    (stack.home / f"release-{run}").write_text("")
    assert stack.wait_run(DAG_ID, run, timeout=400) == "success", stack.tail("scheduler")
    assert stack.task_states(DAG_ID, run)["grower"] == ("success", 2)
    first = "".join(p.read_text() for p in stack.run_log(DAG_ID, run, "grower", 1))
    assert "CUDA out of memory" in first and "it needed at least 1800" in first, first[-3000:]  # the listener's
    deadline = time.time() + 30  # the executor's writer records a try a heartbeat after Airflow sees it end
    tries: dict[int, PlacementRecord] = {}
    while len(tries) < 2 and time.time() < deadline:
        tries = {r.try_number: r for r in store.latest_for(DAG_ID, "grower", run_id=run) if r.outcome.finished}
        time.sleep(0.5)
    assert tries[1].outcome is TryOutcome.OOM and tries[1].peak_mib is not None and tries[1].peak_mib >= 18000
    # held + asked as the message words them (4.88 + 12.70 GiB: 18002 MiB), grown: never the 5000 it held
    assert tries[2].outcome is TryOutcome.SUCCESS and tries[2].estimate_mib is not None
    assert tries[2].estimate_mib >= 5000 + 13003 - 8, tries[2]
