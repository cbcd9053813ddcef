"""The demo's report names every try that did not succeed, so a bad run cannot hide under the
run's final state (issue 24: 'success in 386 s' above a table with a failed task)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from carma_airflow.dev.demo import _failures
from carma_airflow.store.records import PlacementRecord, TryOutcome

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def _record(
    task: str, try_number: int, outcome: TryOutcome, summary: str = "", started: bool = True
) -> PlacementRecord:
    return PlacementRecord(
        key=f"{task}:{try_number}",
        dag_id="carma_demo",
        task_id=task,
        run_id="r",
        try_number=try_number,
        decided_at=T0,
        outcome=outcome,
        summary=summary,
        started_at=T0 + timedelta(seconds=1) if started else None,
        ended_at=T0 + timedelta(seconds=9),
    )


def test_failed_and_oom_tries_are_listed_with_their_reason() -> None:
    records = [
        _record("train_maskrcnn", 1, TryOutcome.OOM, "CUDA out of memory: past its cap of 10.00 GiB"),
        _record("train_maskrcnn", 2, TryOutcome.SUCCESS),
        _record("train_bert", 1, TryOutcome.FAILED, "httpx.ReadTimeout: timed out\nTraceback ..."),
        _record("train_bert", 2, TryOutcome.SUCCESS),
        _record("train_unet", 1, TryOutcome.SUCCESS),
    ]
    lines = _failures(records, {"train_maskrcnn": ("success", 2), "train_bert": ("success", 2)})
    assert lines == [
        "bert try 1: failed (ran): httpx.ReadTimeout: timed out",
        "maskrcnn try 1: oom (ran): CUDA out of memory: past its cap of 10.00 GiB",
    ]


def test_a_cpu_task_that_failed_in_airflow_is_listed() -> None:
    lines = _failures(
        [_record("train_unet", 1, TryOutcome.SUCCESS)], {"summarise": ("failed", 1), "train_unet": ("success", 1)}
    )
    assert lines == ["summarise try 1: failed in Airflow (see its log in the UI)"]


def test_a_clean_run_lists_nothing() -> None:
    assert _failures([_record("train_unet", 1, TryOutcome.SUCCESS)], {"train_unet": ("success", 1)}) == []


def test_a_long_reason_is_cut_between_clauses_never_mid_sentence() -> None:
    clauses = [f"clause {i} says what happened to this try on its GPU in some detail" for i in range(6)]
    summary = "; ".join(clauses)  # 6 clauses, about 380 characters
    lines = _failures([_record("train_bert", 1, TryOutcome.FAILED, summary)], {"train_bert": ("success", 2)})
    why = lines[0].removeprefix("bert try 1: failed (ran): ")
    assert len(why) <= 200 and why.endswith(" more clauses)")
    kept = why.rsplit(" (+", 1)[0]
    assert kept.split("; ") == clauses[: len(kept.split("; "))]  # whole clauses, in order


def test_the_makespan_table_names_the_policy_the_demo_runs(monkeypatch) -> None:
    from rich.console import Console

    from carma_airflow.config.options import option_default
    from carma_airflow.dev import demo

    monkeypatch.setattr(demo, "_simulated_makespans", lambda startup_s=0.0: (100.0, 80.0))
    console = Console(record=True, width=200)
    demo._makespans(console, 4, 90.0, [])
    text = console.export_text()
    assert f"{option_default('policy')} / exclusive" in text  # the executor's default, completion-time
    assert "interference-aware" not in text
