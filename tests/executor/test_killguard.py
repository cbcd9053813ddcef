"""The kill guard against the installed Airflow's supervisor: a try that dies of a signal is
retried only while the author's retries allow (RETRY_ON_KILL_ENV), never by CARMA's OOM tries."""

from __future__ import annotations

import pytest
from airflow.sdk.execution_time.supervisor import ActivitySubprocess
from airflow.utils.state import TaskInstanceState

from carma_airflow.taskrun.killguard import RETRY_ON_KILL_ENV, install_kill_guard


def _ended(exit_code: int, *, should_retry: bool, terminal: str | None = None) -> ActivitySubprocess:
    """A supervisor whose task process has ended (the fields final_state reads, nothing started)."""
    proc = object.__new__(ActivitySubprocess)
    proc._exit_code = exit_code
    proc._should_retry = should_retry
    proc._terminal_state = terminal
    return proc


@pytest.fixture(autouse=True)
def guard() -> None:
    assert install_kill_guard(), "this Airflow's supervisor changed shape: see killguard.py"


def test_a_killed_try_fails_when_the_author_has_no_retry_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRY_ON_KILL_ENV, "0")
    assert _ended(-9, should_retry=True).final_state == TaskInstanceState.FAILED


def test_a_killed_try_is_retried_while_the_author_has_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRY_ON_KILL_ENV, "1")
    assert _ended(-9, should_retry=True).final_state == TaskInstanceState.UP_FOR_RETRY


def test_outside_carma_airflow_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RETRY_ON_KILL_ENV, raising=False)
    assert _ended(-9, should_retry=True).final_state == TaskInstanceState.UP_FOR_RETRY
    assert _ended(1, should_retry=False).final_state == TaskInstanceState.FAILED


def test_what_the_task_itself_reported_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # an OOM retry the task asked for (RetryTask), and a success, are not the guard's business
    monkeypatch.setenv(RETRY_ON_KILL_ENV, "0")
    asked = _ended(0, should_retry=True, terminal=TaskInstanceState.UP_FOR_RETRY)
    assert asked.final_state == TaskInstanceState.UP_FOR_RETRY
    assert _ended(0, should_retry=True).final_state == TaskInstanceState.SUCCESS


def test_installing_twice_wraps_once() -> None:
    assert install_kill_guard()
    fget = ActivitySubprocess.final_state.fget
    assert install_kill_guard()
    assert ActivitySubprocess.final_state.fget is fget
