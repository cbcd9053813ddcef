"""The try's own log says when it grew past what it was placed with and its fence let it through
(taskrun/listener.py on success; the same words as `carma why`, core/grown.py)."""

from __future__ import annotations

import pytest

from carma_airflow.taskrun import listener
from carma_airflow.taskrun.fence_env import CAP_ENV, ISOLATION_ENV, LIVE_ENV, PROMISE_ENV, RULE_ENV
from carma_airflow.taskrun.outcome import RESULT_ENV, read_result

FENCED = {ISOLATION_ENV: "framework", PROMISE_ENV: "8192", CAP_ENV: "40448", LIVE_ENV: "1", RULE_ENV: "live"}


def test_a_grown_try_is_said_in_its_log(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    result = tmp_path / "result.json"
    monkeypatch.setattr(listener, "peak_mib_of_this_process", lambda: 30720)
    for name, value in {**FENCED, RESULT_ENV: str(result)}.items():
        monkeypatch.setenv(name, value)
    listener.on_task_instance_success(None, None)
    out = capsys.readouterr().out
    assert "[carma] this try grew to 30.0 GiB past its reserved 8.0 GiB and was not stopped: the live cap" in out
    saved = read_result(result)
    assert saved is not None and saved.peak_mib == 30720  # the result is written first, as before


def test_nothing_is_said_of_a_try_within_its_placement_or_unfenced() -> None:
    assert listener.grown_in_this_try(8500, FENCED) is None
    assert listener.grown_in_this_try(None, FENCED) is None
    assert listener.grown_in_this_try(30720, {ISOLATION_ENV: "none"}) is None
