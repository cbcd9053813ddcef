"""The paper's collocation risk analysis: window scores and the high-risk rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from carma_airflow.core import MetricWindow, RiskSettings, is_high_risk, window_score

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
windows = st.lists(unit, min_size=1, max_size=60)


DEFAULT = RiskSettings()


def reference_score(samples: list[float], settings: RiskSettings = DEFAULT) -> float:
    """Independent implementation with numpy (linear percentiles) and an explicit EMA."""
    arr = np.asarray(samples, dtype=float)
    alpha = 2.0 / (len(samples) + 1)
    ema = samples[0]
    for value in samples[1:]:
        ema = alpha * value + (1 - alpha) * ema
    return (
        settings.weight_mean * float(arr.mean())
        + settings.weight_median * float(np.median(arr))
        + settings.weight_p95 * float(np.percentile(arr, 95))
        + settings.weight_ema * ema
    )


@pytest.mark.parametrize("value", [0.0, 0.1, 0.37, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("length", [1, 2, 7, 30])
def test_constant_window_scores_the_constant(value: float, length: int) -> None:
    assert window_score([value] * length) == pytest.approx(value, abs=1e-12)


def test_constant_window_helper_scores_equal_values() -> None:
    w = MetricWindow.constant(0.3, 0.6, 0.25)
    assert w.smact_score == pytest.approx(0.3)
    assert w.smocc_score == pytest.approx(0.6)
    assert w.drama_score == pytest.approx(0.25)


def test_empty_window_scores_zero() -> None:
    assert window_score([]) == 0.0
    assert MetricWindow().smact_score == 0.0
    assert not MetricWindow().high_risk


def test_hand_computed_score() -> None:
    # W = 4: sorted 0.1 0.3 0.5 0.9
    # mean 0.45; median (linear) 0.4; p95 at position 2.85 -> 0.5 + 0.85 * 0.4 = 0.84
    # EMA alpha 2/5: 0.1 -> 0.26 -> 0.276 -> 0.5256
    samples = [0.1, 0.5, 0.3, 0.9]
    expected = 0.2 * 0.45 + 0.3 * 0.4 + 0.3 * 0.84 + 0.2 * 0.5256
    assert expected == pytest.approx(0.56712)
    assert window_score(samples, RiskSettings(window=4)) == pytest.approx(expected, abs=1e-12)


def test_second_hand_computed_score_with_thirty_samples() -> None:
    # 29 zeros then a one (W = 30): mean 1/30, median 0, p95 at 27.55 -> 0, EMA = alpha = 2/31
    samples = [0.0] * 29 + [1.0]
    expected = 0.2 * (1 / 30) + 0.2 * (2 / 31)
    assert window_score(samples) == pytest.approx(expected, abs=1e-12)


def test_ema_weights_recent_samples() -> None:
    rising = window_score([0.0, 0.0, 0.0, 1.0])
    falling = window_score([1.0, 0.0, 0.0, 0.0])
    # mean/median/p95 are order-free; only the EMA term tells them apart
    assert rising > falling
    assert rising - falling == pytest.approx(0.2 * (0.4 - 0.6**3), abs=1e-12)


def test_custom_weights_are_used() -> None:
    only_mean = RiskSettings(weight_mean=1.0, weight_median=0.0, weight_p95=0.0, weight_ema=0.0)
    only_p95 = RiskSettings(weight_mean=0.0, weight_median=0.0, weight_p95=1.0, weight_ema=0.0)
    samples = [0.0, 0.2, 0.4, 1.0]
    assert window_score(samples, only_mean) == pytest.approx(0.4)
    assert window_score(samples, only_p95) == pytest.approx(0.4 + 0.6 * 0.85)


@pytest.mark.parametrize(
    ("smact", "smocc", "drama", "high"),
    [
        (0.80, 0.45, 0.00, True),  # both at threshold
        (0.80, 0.00, 0.40, True),  # DRAM branch at threshold
        (0.80, 0.44, 0.40, True),
        (0.80, 0.45, 0.39, True),
        (1.00, 1.00, 1.00, True),
        (0.80, 0.44, 0.39, False),  # neither secondary metric busy
        (0.79, 0.45, 0.40, False),  # SM activity just under
        (0.79, 1.00, 1.00, False),
        (0.00, 0.00, 0.00, False),
        (0.99, 0.10, 0.10, False),
    ],
)
def test_is_high_risk_truth_table(smact: float, smocc: float, drama: float, high: bool) -> None:
    assert is_high_risk(smact, smocc, drama) is high


def test_custom_thresholds_respected() -> None:
    loose = RiskSettings(smact_threshold=0.5, smocc_threshold=0.2, drama_threshold=0.9)
    strict = RiskSettings(smact_threshold=0.9)
    assert not is_high_risk(0.6, 0.3, 0.0)
    assert is_high_risk(0.6, 0.3, 0.0, loose)
    assert not is_high_risk(0.6, 0.1, 0.5, loose)  # occupancy under 0.2, DRAM under 0.9
    assert is_high_risk(0.85, 0.5, 0.5)
    assert not is_high_risk(0.85, 0.5, 0.5, strict)
    assert MetricWindow.constant(0.6, 0.3, 0.0, loose).high_risk
    assert not MetricWindow.constant(0.6, 0.3, 0.0).high_risk
    assert not MetricWindow.constant(0.85, 0.5, 0.5, strict).high_risk


def test_metric_window_scores_each_metric_separately() -> None:
    w = MetricWindow(smact=(0.9, 0.9), smocc=(0.1, 0.1), drama=(0.5, 0.5))
    assert w.smact_score == pytest.approx(0.9)
    assert w.smocc_score == pytest.approx(0.1)
    assert w.drama_score == pytest.approx(0.5)
    assert w.high_risk  # SM busy and DRAM busy


@given(windows)
def test_window_score_between_min_and_max(samples: list[float]) -> None:
    score = window_score(samples)
    assert min(samples) - 1e-9 <= score <= max(samples) + 1e-9


@given(windows)
def test_window_score_matches_numpy_reference(samples: list[float]) -> None:
    assert window_score(samples) == pytest.approx(reference_score(samples), abs=1e-9)


@given(windows, st.floats(min_value=0.0, max_value=0.5))
def test_window_score_monotone_under_shift(samples: list[float], delta: float) -> None:
    shifted = [s + delta for s in samples]
    assert window_score(shifted) == pytest.approx(window_score(samples) + delta, abs=1e-9)
