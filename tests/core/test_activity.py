"""Activity estimates: history, hint, prior, and how sure each is."""

from __future__ import annotations

import math

import pytest

from carma_airflow.core.activity import (
    ActivitySample,
    ActivitySettings,
    estimate_activity,
    hinted_activity,
    unknown_activity,
)


def test_nothing_known_is_the_prior_with_no_confidence() -> None:
    est = estimate_activity([])
    assert est == unknown_activity()
    assert est.sm_activity == 0.5
    assert est.confidence == 0.0
    assert not est.known
    assert (est.low, est.high) == (0.0, 1.0)


def test_median_ignores_a_stalled_try() -> None:
    tries = [0.30, 0.31, 0.29, 0.30, 0.02]  # the last try stalled on its input pipeline
    est = estimate_activity([ActivitySample(v, "process") for v in tries])
    assert est.sm_activity == pytest.approx(0.30)
    assert est.count == 5
    assert est.low < 0.30 < est.high


def test_only_the_last_window_tries_count() -> None:
    old_pipeline = [0.9] * 20
    new_pipeline = [0.3] * 10
    est = estimate_activity(old_pipeline + new_pipeline, settings=ActivitySettings(window=10))
    assert est.sm_activity == pytest.approx(0.3)


def test_more_and_steadier_tries_are_surer() -> None:
    one = estimate_activity([0.4])
    five_noisy = estimate_activity([0.2, 0.6, 0.4, 0.3, 0.5])
    five_steady = estimate_activity([0.40, 0.41, 0.39, 0.40, 0.42])
    assert 0.0 < one.confidence < five_noisy.confidence < five_steady.confidence < 1.0
    assert five_steady.spread < five_noisy.spread


def test_hint_is_a_prior_that_history_outweighs() -> None:
    hint_only = hinted_activity(0.8)
    assert hint_only.sm_activity == pytest.approx(0.8)
    assert hint_only.count == 0
    assert 0.0 < hint_only.confidence < 0.6
    assert "hint" in hint_only.source
    # two tries' worth of hint against ten tries at 0.3
    est = estimate_activity([0.3] * 10, hint=0.8)
    assert est.sm_activity == pytest.approx((2 * 0.8 + 10 * 0.3) / 12)
    assert est.confidence > hint_only.confidence


def test_bad_readings_are_clipped_or_dropped() -> None:
    est = estimate_activity([1.7, -0.2, math.nan, 0.5])
    assert est.count == 3
    assert 0.0 <= est.low <= est.sm_activity <= est.high <= 1.0
    assert estimate_activity([math.inf]).confidence == 0.0


def test_a_never_seen_task_borrows_from_the_most_alike_learned_tasks() -> None:
    from carma_airflow.core.activity import TaskTraits, similar_activity

    resnet_32 = (TaskTraits("resnet34_cifar100", "cnn", 32), estimate_activity([0.25] * 4))
    resnet_128 = (TaskTraits("resnet34_cifar100", "cnn", 128), estimate_activity([0.37] * 4))
    vgg_128 = (TaskTraits("vgg", "cnn", 128), estimate_activity([0.57] * 4))
    bert = (TaskTraits("bert", "transformer", 32), estimate_activity([0.55] * 4))
    known = [resnet_32, resnet_128, vgg_128, bert]
    # the same code and batch size: that task's figure, trusted less than its own
    same = similar_activity(TaskTraits("resnet34_cifar100", "cnn", 128), known)
    assert same is not None and same.sm_activity == pytest.approx(0.37)
    assert same.count == 0 and 0.0 < same.confidence <= 0.6 < resnet_128[1].confidence
    assert "same code and batch size" in same.source
    # the same code, another batch size: the median of its batch sizes, less sure
    code = similar_activity(TaskTraits("resnet34_cifar100", "cnn", 64), known)
    assert code is not None and code.sm_activity == pytest.approx(0.31)
    assert code.confidence < same.confidence
    # only the family in common: surer of the same batch size than of any
    fam_batch = similar_activity(TaskTraits("xception", "cnn", 128), known)
    fam = similar_activity(TaskTraits("xception", "cnn", 16), known)
    assert fam_batch is not None and fam is not None
    assert fam_batch.sm_activity == pytest.approx(0.47) and fam.sm_activity == pytest.approx(0.37)
    assert fam.confidence <= fam_batch.confidence <= code.confidence
    # nothing in common, or nothing learned (a hint is not borrowed): no estimate
    assert similar_activity(TaskTraits("dlrm", "recsys", 32), known) is None
    assert (
        similar_activity(TaskTraits("vgg", "cnn", 128), [(TaskTraits("vgg", "cnn", 128), hinted_activity(0.9))]) is None
    )
