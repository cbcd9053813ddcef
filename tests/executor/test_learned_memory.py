"""A declaration the task's runs outgrew (issue 22): an executor with its real parts (simulated
GPUs, placer, SQLite store) places the next run with the learned peak, and says why."""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow.utils.state import TaskInstanceState
from executor_helpers import make_workload, run_until, seen_env, submit

from carma_airflow.executor import CarmaExecutor

# declared 8 GiB, grows to 30000 MiB: what its last two runs peaked at
GROWER = {"peak_mib": 8192, "seconds": 1.5, "ramp_s": 0.2, "grow_to_mib": 30000, "grow_after_s": 0.5}
# each try held to what it was placed with (+ the 2048 MiB margin): placed with 8 GiB, the growth OOMs
FENCED = {"isolation": "framework", "isolation_cap": "promise"}


def _two_runs_at_30000(executor_factory: Callable[..., CarmaExecutor]) -> None:
    first = executor_factory(gpus="1xA100-40GB")
    now = time.time()
    first.store.add_peak("dag", "grower", 30000, now - 7200, "day1", None)
    first.store.add_peak("dag", "grower", 30000, now - 3600, "day2", None)
    first.end()  # SQLite: one executor places at a time


def test_a_task_that_outgrew_its_declaration_is_placed_with_its_peak_and_does_not_oom(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    _two_runs_at_30000(executor_factory)
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"grower": {"train": GROWER}}, **FENCED)  # reads the peaks
    w = make_workload("grower", run_id="day3", config={"memory": "8GiB"})
    submit(ex, w)
    assert w.key in ex.active
    run_until(ex, lambda: not ex.active, timeout=60)
    assert ex.get_event_buffer()[w.key][0] == TaskInstanceState.SUCCESS  # try 1, no OOM
    placement = seen_env("grower")["CARMA_PLACEMENT"]  # what the try's log prints
    assert (
        "memory outgrew its declaration: declared 8192 MiB; its last 2 runs peaked at 30000, 30000 MiB: "
        "reserving 33024 MiB (30000 + 10 %)"
    ) in placement
    rec = next(p for p in ex.store.placements(dag_id="dag") if p.run_id == "day3")
    assert rec.estimate_mib == 33024 and rec.outcome.value == "success" and rec.estimate_source is not None
    assert rec.estimate_source.startswith("outgrew its declaration")


def test_a_kept_declaration_holds_the_try_to_it_and_it_ooms(executor_factory: Callable[..., CarmaExecutor]) -> None:
    """The same task with memory_policy='declared': placed with 8 GiB, its growth is stopped."""
    _two_runs_at_30000(executor_factory)
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"grower": {"train": GROWER}}, oom_retries="0", **FENCED)
    w = make_workload("grower", run_id="day3", config={"memory": "8GiB", "memory_policy": "declared"})
    submit(ex, w)
    assert w.key in ex.active
    run_until(ex, lambda: not ex.active, timeout=60)
    placement = seen_env("grower")["CARMA_PLACEMENT"]
    assert "memory outgrew its declaration, kept: declared 8192 MiB (memory_policy='declared')" in placement
    rec = next(p for p in ex.store.placements(dag_id="dag") if p.run_id == "day3")
    assert rec.estimate_mib == 8192 and rec.outcome.value == "oom"  # its growth stopped at 8192 + 2048 MiB
