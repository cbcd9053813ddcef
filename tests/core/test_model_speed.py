"""Solo run times per task and GPU model, and learned cross-model ratios (core/model_speed.py)."""

from __future__ import annotations

import math

import pytest

from carma_airflow.core.model_speed import SoloRunTimes, prior_ratio


def test_before_any_task_ran_on_both_the_ratio_is_the_spec_prior_with_its_range() -> None:
    runs = SoloRunTimes()
    runs.add("a", "V100-32GB", 300.0)
    r = runs.ratio("V100-32GB", "H100-80GB")
    assert r.source == "spec" and r.tasks == 0
    assert r == prior_ratio("V100-32GB", "H100-80GB")
    assert 1.0 < r.low < r.ratio < r.high
    got = runs.predict("a", "H100-80GB")
    assert got is not None and got.source == "spec"
    assert got.seconds == pytest.approx(300.0 * runs.ratio("H100-80GB", "V100-32GB").ratio)
    assert got.seconds < 300.0 / 2
    assert got.low < got.seconds < got.high


def test_tasks_run_on_both_models_replace_the_prior_and_predict_the_others() -> None:
    runs = SoloRunTimes()
    for task, slow, fast in (("a", 400.0, 100.0), ("b", 330.0, 100.0), ("c", 360.0, 100.0)):
        runs.add(task, "V100-32GB", slow)
        runs.add(task, "H100-80GB", fast)
    runs.add("d", "V100-32GB", 720.0)  # ran only on the V100
    r = runs.ratio("V100-32GB", "H100-80GB")
    assert r.source == "learned" and r.tasks == 3
    assert r.ratio == pytest.approx(3.6, rel=1e-6)  # the median of 4.0, 3.3, 3.6
    assert r.low < 3.6 < r.high
    d = runs.predict("d", "H100-80GB")
    # one task's expectation: the median's 200 s times exp(var / 2) of the tasks' log ratios
    var = runs.ratio("H100-80GB", "V100-32GB").spread ** 2 * (1 + 1 / 3)
    assert d is not None and d.source == "learned" and d.seconds == pytest.approx(200.0 * math.exp(var / 2))
    assert 200.0 < d.seconds < 200.0 * 1.01  # three tasks that agree: barely above the median
    own = runs.predict("a", "V100-32GB")
    assert own is not None and own.source == "measured" and own.seconds == 400.0
    assert runs.predict("never", "V100-32GB") is None
    assert [p.slow for p in runs.ratios()] == ["V100-32GB"]
    assert "3.60x the run time" in runs.ratios()[0].text()


def test_a_task_whose_speed_up_differs_widens_the_interval_and_bad_times_are_dropped() -> None:
    alike, apart = SoloRunTimes(), SoloRunTimes()
    for i, ratio in enumerate((2.0, 2.1, 1.9, 2.0)):
        alike.add(f"t{i}", "T4", 100.0 * ratio)
        alike.add(f"t{i}", "A100-40GB", 100.0)
    for i, ratio in enumerate((1.0, 4.0, 1.5, 6.0)):
        apart.add(f"t{i}", "T4", 100.0 * ratio)
        apart.add(f"t{i}", "A100-40GB", 100.0)
    a, b = alike.ratio("T4", "A100-40GB"), apart.ratio("T4", "A100-40GB")
    assert b.high / b.low > a.high / a.low
    alike.add("x", "T4", float("nan"))
    alike.add("x", "T4", -1.0)
    assert alike.median("x", "T4") is None


def test_a_model_the_catalogue_lacks_is_alike_and_unsure() -> None:
    r = prior_ratio("mystery", "A100-40GB")
    assert (r.ratio, r.low, r.high) == (1.0, 0.5, 2.0)


def test_a_task_not_measured_on_both_is_priced_at_its_expectation_over_the_tasks_spread() -> None:
    """Issue 44: the ratios of the tasks measured on both spread widely (a compute-bound task gains
    the whole factor, a memory-bound one little): a task measured on one model only is priced on the
    other at its expectation for one task (log-normal around the median), above the median, with a
    prediction interval for one task, wider than the median's own."""
    runs = SoloRunTimes()
    for i, ratio in enumerate((0.7, 1.2, 1.6, 3.5, 7.0)):  # T4 over A100, task by task
        runs.add(f"t{i}", "T4", 100.0 * ratio)
        runs.add(f"t{i}", "A100-80GB", 100.0)
    runs.add("new", "A100-80GB", 1000.0)
    r = runs.ratio("T4", "A100-80GB")
    assert r.ratio == pytest.approx(1.6)
    expected, low, high = r.one_task()
    assert expected > 1.6 * 1.3  # the spread's log sd is about 0.9: exp(0.9^2 x 1.2 / 2) is about 1.6
    assert low < r.low and high > r.high
    got = runs.predict("new", "T4")
    assert got is not None and got.source == "learned"
    assert got.seconds == pytest.approx(1000.0 * expected)
    assert got.low == pytest.approx(1000.0 * low) and got.high == pytest.approx(1000.0 * high)
    # the prior and a single task carry no spread of their own: their point is the ratio itself
    assert prior_ratio("T4", "A100-80GB").one_task()[0] == prior_ratio("T4", "A100-80GB").ratio
