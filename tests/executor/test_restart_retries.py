"""A try Airflow resets after a restart keeps the task's retries when it never ran."""

from __future__ import annotations

from types import SimpleNamespace

from airflow.utils.state import TaskInstanceState

from carma_airflow.executor.flow import declined_keeping_retries


def _ti(task_id: str, state: TaskInstanceState, max_tries: int) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, state=state, max_tries=max_tries)


def test_a_queued_try_that_is_reset_gets_one_more_try_and_a_running_one_does_not() -> None:
    waited = _ti("waited", TaskInstanceState.QUEUED, 2)  # never ran: only waited for a GPU
    ran = _ti("ran", TaskInstanceState.RUNNING, 2)  # its process is gone: it ran, the try counts
    adopted = _ti("adopted", TaskInstanceState.RUNNING, 2)
    reset = declined_keeping_retries([waited, ran, adopted], lambda ti: ti is adopted)
    assert reset == [waited, ran]
    assert (waited.max_tries, ran.max_tries, adopted.max_tries) == (3, 2, 2)


def test_on_standby_every_try_is_reset_and_the_queued_ones_keep_their_retries() -> None:
    waited = _ti("waited", TaskInstanceState.QUEUED, 0)  # retries=0: its one real try is the next
    assert declined_keeping_retries([waited], None) == [waited]
    assert waited.max_tries == 1
