"""A try's progress reports (taskrun/progress.py): written atomically where the executor said,
at most every MIN_INTERVAL_S (the last always), read back; bad figures fail loudly, an unreadable
file reads as no report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from carma_airflow.launching.taskenv import gpu_task_env
from carma_airflow.taskrun import progress
from carma_airflow.taskrun.progress import PROGRESS_ENV, read_progress, report_progress


def test_a_report_is_read_back_with_its_total_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.progress"
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    assert report_progress(12, 100)
    got = read_progress(path)
    assert got is not None and (got.done, got.total) == (12.0, 100.0) and got.at > 0
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, renamed over it


def test_reports_are_rate_limited_but_the_last_is_always_written(tmp_path: Path) -> None:
    path = tmp_path / "t.progress"
    progress._last_written.clear()
    assert report_progress(1, 10, path=path)
    assert not report_progress(2, 10, path=path)  # within MIN_INTERVAL_S of the last write
    got = read_progress(path)
    assert got is not None and got.done == 1.0
    assert report_progress(10, 10, path=path)  # done: always written
    got = read_progress(path)
    assert got is not None and got.done == 10.0


def test_outside_a_carma_try_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert not report_progress(5)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("done", "total"), [(-1.0, None), (math.nan, None), (5.0, 4.0), (1.0, 0.0), (1.0, math.inf)])
def test_a_bad_figure_says_what_is_wrong(done: float, total: float | None, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="report_progress"):
        report_progress(done, total, path=tmp_path / "t.progress")


@pytest.mark.parametrize("text", ["", "abc", "1.0", "-1 None 5", "1 0 5", "nan None 5", "1 None inf"])
def test_an_unreadable_report_is_no_report(text: str, tmp_path: Path) -> None:
    path = tmp_path / "t.progress"
    path.write_text(text)
    assert read_progress(path) is None
    assert read_progress(tmp_path / "missing") is None


def test_the_executor_tells_a_placed_try_where_to_report() -> None:
    env = gpu_task_env(["GPU-a"], result_path="/r.json", placement="p", progress_path="/s/results/ti.progress")
    assert env[PROGRESS_ENV] == "/s/results/ti.progress"
    assert PROGRESS_ENV not in gpu_task_env(["GPU-a"], result_path="/r.json", placement="p")


def test_a_report_that_cannot_be_written_never_fails_the_training(tmp_path: Path) -> None:
    # a try on a worker host where the executor's folder does not exist
    assert not report_progress(1, 10, path=tmp_path / "no" / "such" / "t.progress")
