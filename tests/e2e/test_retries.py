"""Failures of GPU tasks follow the author's ``retries`` in a real Airflow; only a CUDA OOM gets
CARMA's extra tries (that case: test_e2e.py::test_underdeclared_task_ooms_then_succeeds_...).

A try that can never be placed fails on its first try, with the reason in that try's log in the
words ``carma why`` uses.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _log_of(stack, run: str, task_id: str, try_number: int) -> str:
    logs = stack.run_log("carma_retries", run, task_id, try_number)
    assert logs, f"no log for {task_id} try {try_number}"
    return logs[0].read_text()


def test_failures_get_exactly_the_authors_retries(default_stack) -> None:
    stack = default_stack
    run = stack.trigger("carma_retries")
    assert stack.wait_run("carma_retries", run, timeout=240) == "failed"
    states = stack.task_states("carma_retries", run)
    assert states == {
        "killed_no_retries": ("failed", 1),  # SIGKILL, retries=0: one try (it was 3, 5 minutes apart)
        "killed_one_retry": ("failed", 2),
        "too_much_memory": ("failed", 1),  # never fits, retries=0: its first try fails
        "too_many_gpus": ("failed", 1),
        "too_much_memory_one_retry": ("failed", 2),
        "bad_config_one_retry": ("failed", 2),
        "plain_error": ("failed", 1),
    }
    # the reason is in the try's own log (what the Airflow UI shows), in the words of `carma why`
    memory_log = _log_of(stack, run, "too_much_memory", 1)
    assert "CARMA cannot run this task: never fits: needs 100.0 GiB per GPU but the largest GPU offers" in memory_log
    gpus_log = _log_of(stack, run, "too_many_gpus", 1)
    assert "never fits: asks for 3 GPUs" in gpus_log
    why = stack.airflow("carma", "why", "carma_retries.too_much_memory")
    assert why.returncode == 0, why.stderr
    headline = memory_log.split("CARMA cannot run this task: ", 1)[1].split("GiB (", 1)[0]
    assert headline in why.stdout
