"""The residual scale (core/interference_spread.py): erratic task types and partners get wider
scales, shrunk toward the typical one; standardised residuals are taken leave-one-out."""

from __future__ import annotations

import random

import pytest

from carma_airflow.core.interference_spread import ScaleRow, fit_scale

TYPES = ("calm", "usual", "wild")
JITTER = {"calm": 0.01, "usual": 0.04, "wild": 0.16}


def rows(seed: int, n: int = 300) -> list[ScaleRow]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = TYPES[i % 3]
        partner = TYPES[(i // 3) % 3]
        noise = JITTER[task] * (2.0 if partner == "wild" else 1.0)
        out.append(ScaleRow(rng.gauss(0.0, noise), 0.3, task, ((partner, 1.0),)))
    return out


def test_erratic_types_and_partners_get_wider_scales() -> None:
    scale = fit_scale(rows(1))
    assert scale is not None
    assert scale.own["calm"] < scale.own["usual"] < scale.own["wild"]
    assert scale.partner["wild"] > 1.3 * max(scale.partner["calm"], scale.partner["usual"])
    calm = scale.scale(0.3, "calm", ("calm",), (0.5,))
    wild = scale.scale(0.3, "wild", ("wild",), (0.5,))
    never_seen = scale.scale(0.3, "new", ("other",), (0.5,))
    assert calm < never_seen < wild
    assert scale.within(calm, 0.05) > 0.8 and scale.within(wild, 0.05) < 0.4
    lo, hi = scale.quantiles(wild, 0.9)
    lo2, hi2 = scale.quantiles(2 * wild, 0.9)
    assert lo < 0.0 < hi and (lo2, hi2) == pytest.approx((2 * lo, 2 * hi))
    assert scale.mean_abs == pytest.approx(1.0, abs=0.15)  # standardised: about unit scale


def test_constant_contention_leaves_the_exponent_at_zero_and_too_few_rows_give_nothing() -> None:
    scale = fit_scale(rows(2))
    assert scale is not None and scale.exponent == 0.0  # no contention varies: nothing to fit it on
    assert fit_scale(rows(3)[:3]) is None
    assert fit_scale([ScaleRow(0.0, 0.3, "t", ()) for _ in range(10)]) is None  # no scatter at all


def test_a_residual_does_not_explain_itself() -> None:
    # one try of a type, far off: its own factor would shrink its standardised residual if it
    # counted; taken out, the try stands out as the extreme it is
    data = rows(4)
    data.append(ScaleRow(0.5, 0.3, "lonely", (("calm", 1.0),)))
    scale = fit_scale(data)
    assert scale is not None
    in_sample = 0.5 / scale.scale(0.3, "lonely", ("calm",), (1.0,))
    assert max(scale.standardized) > 3.0 * in_sample
    assert scale.own["lonely"] > 1.0  # while its factor, for later predictions, moved toward it
