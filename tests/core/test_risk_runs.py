"""The paper's window score from runs of equal samples equals the score of the samples."""

from __future__ import annotations

import random

from carma_airflow.core.risk import MetricWindow, runs_score, window_score


def test_runs_score_equals_the_samples_score() -> None:
    rng = random.Random(5)
    for _ in range(500):
        runs = []
        left = rng.randint(1, 40)
        while left > 0:
            c = rng.randint(1, left)
            runs.append((rng.random(), c))
            left -= c
        samples = [v for v, c in runs for _ in range(c)]
        assert abs(runs_score(runs) - window_score(samples)) < 1e-12


def test_window_from_runs_has_the_samples_and_the_scores_of_a_window() -> None:
    runs = [((0.9, 0.5, 0.1), 20), ((0.2, 0.1, 0.0), 10)]
    w = MetricWindow.from_runs(runs)
    plain = MetricWindow((0.9,) * 20 + (0.2,) * 10, (0.5,) * 20 + (0.1,) * 10, (0.1,) * 20 + (0.0,) * 10)
    assert (w.smact, w.smocc, w.drama) == (plain.smact, plain.smocc, plain.drama)
    for a, b in (
        (w.smact_score, plain.smact_score),
        (w.smocc_score, plain.smocc_score),
        (w.drama_score, plain.drama_score),
    ):
        assert abs(a - b) < 1e-12  # the same score, to rounding
    assert w.high_risk == plain.high_risk
    assert runs_score([]) == 0.0
