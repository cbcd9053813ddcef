"""Solo run times per task and GPU model, and learned cross-model ratios (core/model_speed.py)."""

from __future__ import annotations

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
    assert d is not None and d.source == "learned" and d.seconds == pytest.approx(200.0)
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
