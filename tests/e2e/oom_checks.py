"""What an OOM retry placed by the recovery plan looks like in a real Airflow (test_e2e.py on
one scheduler, test_schedulers.py with the next try taken by the other scheduler)."""

from __future__ import annotations

import json
from typing import Any

from carma_airflow.dev.devstack import AirflowStack

PLACEMENT_KEYS = (
    "dag_id",
    "task_id",
    "run_id",
    "map_index",
    "try_number",
    "gpu_uuids",
    "decided_at",
    "started_at",
    "ended_at",
    "outcome",
    "estimate_mib",
    "peak_mib",
    "reasons",
)


def oom_retried_elsewhere(stack: AirflowStack, run: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``carma_oom``'s underdeclared task OOMed on try 1 and succeeded on try 2, planned from what
    the crash reached on the other GPU, the retry and its reason in Airflow's history as the UI
    shows them; the two tries' placement rows (``carma placements --json``)."""
    assert stack.task_states("carma_oom", run)["underdeclared"] == ("success", 2)
    history = stack.query(
        "select try_number, state, retry_reason from task_instance_history "
        "where dag_id = 'carma_oom' and task_id = 'underdeclared' and run_id = :r",
        r=run,
    )
    assert len(history) == 1 and history[0][0] == 1
    assert "CUDA out of memory" in history[0][2]
    out = stack.airflow("carma", "placements", "--dag-id", "carma_oom", "--json")
    assert out.returncode == 0, out.stderr
    placed = json.loads(out.stdout[out.stdout.index("[") :])
    rows = {(r["task_id"], r["try_number"]): r for r in placed if r["run_id"] == run}
    first, second = rows[("underdeclared", 1)], rows[("underdeclared", 2)]
    assert first["outcome"] == "oom" and first["peak_mib"] is not None
    assert second["outcome"] == "success" and second["gpu_uuids"] != first["gpu_uuids"], (first, second)
    assert second["estimate_mib"] > first["peak_mib"]  # planned from what the crash reached
    for key in PLACEMENT_KEYS:
        assert key in second
    return first, second
