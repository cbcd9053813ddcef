"""The kill guard against the installed Airflow's supervisor: a try that dies of a signal is
retried only while the author's retries allow (RETRY_ON_KILL_ENV), never by CARMA's OOM tries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.supervisor import ActivitySubprocess
from airflow.utils.state import TaskInstanceState

from carma_airflow.taskrun.killguard import (
    KILL_BUDGET_ENV,
    RETRY_ON_KILL_ENV,
    _wrap_start,
    install_kill_guard,
    may_retry_killed,
    retry_on_kill_env,
)


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
    fget = vars(ActivitySubprocess)["final_state"].fget
    assert install_kill_guard()
    assert vars(ActivitySubprocess)["final_state"].fget is fget


def _killed_try(try_number: int, ti_id: str = "ti-1") -> ActivitySubprocess:
    proc = _ended(-9, should_retry=True)
    proc.ti = SimpleNamespace(id=ti_id, try_number=try_number)  # type: ignore[assignment]
    return proc


def _started(ti_id: str, max_tries: int) -> None:
    """What the Execution API's start answered for this try (the guard reads its max_tries)."""

    class Operations:
        def start(self, id: str, pid: int, when: object) -> SimpleNamespace:
            return SimpleNamespace(max_tries=max_tries)

    _wrap_start(Operations)
    Operations().start(ti_id, 1, None)


def _budget(monkeypatch: pytest.MonkeyPatch, author: int, oom: int, prior_ooms: int, estimate: bool) -> None:
    for key, value in retry_on_kill_env(estimate, author, oom, prior_ooms).items():
        monkeypatch.setenv(key, value)


def test_a_killed_try_after_a_restarts_reset_keeps_the_authors_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    # retries 1 + 2 OOM retries: max_tries 3; try 1 only waited when the scheduler restarted and
    # its reset raised max_tries to 4 (restart.keep_retries_of_unrun).  Try 2 is the first that
    # ran: killed by a signal, it has the author's one retry.  The executor's estimate (counted
    # from try 1) said no; the guard counts the round from max_tries.
    _budget(monkeypatch, author=1, oom=2, prior_ooms=0, estimate=False)
    _started("ti-restart", 4)
    assert _killed_try(2, "ti-restart").final_state == TaskInstanceState.UP_FOR_RETRY
    assert may_retry_killed(3, 4) is False  # and a second killed try has spent it


def test_a_killed_try_without_a_reset_counts_from_try_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _budget(monkeypatch, author=1, oom=2, prior_ooms=0, estimate=False)
    _started("ti-plain", 3)
    assert _killed_try(2, "ti-plain").final_state == TaskInstanceState.FAILED  # try 1 failed: the retry is spent
    assert may_retry_killed(1, 3) is True


def test_oom_tries_do_not_count_against_the_authors_retries_of_a_killed_try(monkeypatch: pytest.MonkeyPatch) -> None:
    _budget(monkeypatch, author=1, oom=2, prior_ooms=1, estimate=True)
    assert may_retry_killed(2, 3) is True  # try 1 OOMed, try 2 killed: the author's retry is left
    assert may_retry_killed(3, 3) is False


def test_without_max_tries_the_executors_estimate_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    _budget(monkeypatch, author=1, oom=2, prior_ooms=0, estimate=False)
    assert _killed_try(2, "ti-never-started").final_state == TaskInstanceState.FAILED
    monkeypatch.delenv(KILL_BUDGET_ENV)
    monkeypatch.setenv(RETRY_ON_KILL_ENV, "1")
    assert may_retry_killed(2, 4) is True


def test_the_guard_wraps_the_api_clients_start() -> None:
    from airflow.sdk.api.client import TaskInstanceOperations

    assert getattr(TaskInstanceOperations.start, "_carma_kill_guard", False)
