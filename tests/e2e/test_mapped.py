"""Mapped GPU tasks in a real Airflow 3: each instance placed with its own memory (issue 11)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.db]

DAG_ID = "carma_mapped"


def _placements(stack: Any, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    out = stack.airflow("carma", "placements", "--dag-id", DAG_ID, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout[out.stdout.index("[") :])
    return {(r["task_id"], r["map_index"]): r for r in rows if r["run_id"] == run_id and r["try_number"] == 1}


def _states(stack: Any, run_id: str) -> dict[tuple[str, int], str]:
    rows = stack.query(
        "select task_id, map_index, state from task_instance where dag_id = :d and run_id = :r", d=DAG_ID, r=run_id
    )
    return {(t, m): s for t, m, s in rows}


def test_each_mapped_instance_is_placed_with_its_own_memory(default_stack) -> None:
    stack = default_stack
    run = stack.trigger(DAG_ID)
    assert stack.wait_run(DAG_ID, run) == "success", _states(stack, run)
    assert set(_states(stack, run).values()) == {"success"} and len(_states(stack, run)) == 9
    placed = _placements(stack, run)
    estimate = {key: (row["estimate_mib"], row["outcome"]) for key, row in placed.items()}
    assert estimate == {
        ("finetune", 0): (2048, "success"),
        ("finetune", 1): (6144, "success"),
        ("finetune", 2): (10240, "success"),
        ("bash_finetune", 0): (3072, "success"),
        ("bash_finetune", 1): (5120, "success"),
        ("bash_finetune", 2): (7168, "success"),  # past the end of memory_by_index: memory
        ("learn", 0): (5120, "success"),  # nothing known yet: the floor
        ("learn", 1): (5120, "success"),
        ("learn", 2): (5120, "success"),
    }
    assert {placed[("finetune", i)]["estimate_source"] for i in range(3)} == {"declared"}
    assert all(placed[("finetune", i)]["gpu_uuids"] for i in range(3))
    log = next(p for p in stack.run_log(DAG_ID, run, "bash_finetune") if p.parent.name == "map_index=2").read_text()
    assert "large GPU-SIM-000" in log  # the classic operator ran its own command on its GPU

    # the second run: each undeclared instance sized from its own first run (peak x 1.1, to 256 MiB)
    again = stack.trigger(DAG_ID)
    assert stack.wait_run(DAG_ID, again) == "success", _states(stack, again)
    learned = _placements(stack, again)
    # a learned peak above the floor is taken at once; one below it (1,792 MiB for instance 0) waits
    # for the interference fit to learn this cluster's GPUs, which a few tries do not teach it
    # (core/vouch.py: learned peaks buy collocations only where the fit can vouch for them)
    assert [learned[("learn", i)]["estimate_mib"] for i in range(3)] == [5120, 5632, 9984]
    assert learned[("learn", 0)]["estimate_source"].endswith(
        "learned peaks (1792 MiB) are used once the interference model has learned this cluster's GPUs"
    )
    assert learned[("learn", 2)]["estimate_source"] == "history of map index 2 (1 run(s), max 9000 MiB)"
    assert [learned[("finetune", i)]["estimate_mib"] for i in range(3)] == [2048, 6144, 10240]  # declared wins
