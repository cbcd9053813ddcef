"""CarmaExecutor inside a real Airflow 3: api-server, scheduler and dag-processor processes,
simulated 2xA100-40GB GPUs, the exact executor line the docs give, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from oom_checks import oom_retried_elsewhere

from carma_airflow.dev.devstack import EXECUTOR_LINE

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def test_docs_give_this_executor_line() -> None:
    assert EXECUTOR_LINE == "LocalExecutor,carma_airflow.executor.CarmaExecutor"


def test_collocation_visibility_cpu_tasks_and_bad_config(default_stack) -> None:
    stack = default_stack
    run = stack.trigger("carma_collocate")
    assert stack.wait_run("carma_collocate", run) == "failed"  # only because of bad_config
    states = stack.task_states("carma_collocate", run)
    assert {t: s for t, (s, _) in states.items()} == {
        "train_a": "success",
        "train_b": "success",
        "train_c": "success",
        "on_cpu": "success",
        "bad_config": "failed",
    }
    seen = [stack.xcom("carma_collocate", run, t)["visible"] for t in ("train_a", "train_b", "train_c")]
    assert all(v in ("GPU-SIM-0000", "GPU-SIM-0001") for v in seen)  # one GPU each, by UUID
    assert len(set(seen)) == 2  # three 8 GiB tasks on two GPUs: two of them share one
    assert stack.xcom("carma_collocate", run, "train_a")["order"] == "PCI_BUS_ID"
    assert stack.xcom("carma_collocate", run, "on_cpu") == "<unset>"  # LocalExecutor task, no GPU env
    logs = stack.run_log("carma_collocate", run, "bad_config")
    text = logs[0].read_text()
    assert "executor_config['carma']['gpus']" in text and "write an integer" in text
    shared = [t for t, v in zip(("train_a", "train_b", "train_c"), seen, strict=True) if seen.count(v) == 2]
    placed_text = stack.run_log("carma_collocate", run, shared[-1])[0].read_text()
    assert "[carma] placed on GPU" in placed_text and "co-tenants: carma_collocate." in placed_text


# its own deployment: where the OOM's next try lands depends on which big tenant the first try
# met, and on a deployment shared with earlier tests (their history, their timing) it met the
# short one and the next try went back to the same, emptied GPU.  SQLite here; on PostgreSQL the
# same run is checked with two schedulers, the next try taken by the other one
# (test_schedulers.py::test_the_next_try_after_an_oom_follows_the_plan_on_the_other_scheduler).
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_underdeclared_task_ooms_then_succeeds_elsewhere_with_retries_zero(airflow_stack) -> None:
    stack = airflow_stack(simulated_gpus="2xA100-40GB")
    run = stack.trigger("carma_oom")
    assert stack.wait_run("carma_oom", run) == "success"
    oom_retried_elsewhere(stack, run)


# SQLite only: what is checked is Airflow's queued-timeout path against the executor, which does
# not depend on the metadata database; the PostgreSQL store's waiting tries are covered by
# test_citizen.py's SIGTERM backlog and test_schedulers.py, both on PostgreSQL.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_waiting_past_task_queued_timeout_loses_nothing(airflow_stack) -> None:
    # 15 s: above a try's start-up on a loaded 2-core machine (with 8 s the first try, started but
    # not yet reported as running 8 s after its placement at load average 10, was struck too, and
    # the second ran out of Airflow's requeues), below the 20 s the second waits for the GPU
    stack = airflow_stack(
        simulated_gpus="1xA100-40GB",
        AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT="15",
        AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL="2",
    )
    run = stack.trigger("carma_queue_wait")
    assert stack.wait_run("carma_queue_wait", run) == "success"
    states = stack.task_states("carma_queue_wait", run)
    # waited ~20 s > the 15 s timeout: struck once, handed over again (same try), run once, fresh token
    assert states["second"] == ("success", 1)
