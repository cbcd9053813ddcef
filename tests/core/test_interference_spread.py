"""The residual scale (core/interference_spread.py): erratic task types and partners get wider
scales, shrunk toward the typical one; standardised residuals are taken leave-one-out."""

from __future__ import annotations

import math
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


# -- the fit, written out for speed, against the plain formulas ---------------------------------
def _plain_fit(data: list[ScaleRow]) -> tuple[float, float, dict[str, float], dict[str, float], tuple[float, ...]]:
    """The module doc's fit as first written (dictionaries by type name, one function per
    formula): (A, b, F, P, standardised residuals).  The module's fit reads the rows once and
    keeps the types by number, for speed; it must add and multiply the same floats in the same
    order, so its results are these to the bit."""
    lo, hi = (0.25, 8.0)

    def factor(own: dict[str, float], partner: dict[str, float], r: ScaleRow) -> float:
        total = sum(w for _, w in r.partners)
        p = sum([w * partner.get(n, 1.0) for n, w in r.partners]) / total if total > 0.0 else 1.0
        return own.get(r.task, 1.0) * p

    def own_sums(absr: list[float], rest: list[float]) -> dict[str, tuple[float, float]]:
        sums: dict[str, tuple[float, float]] = {}
        for r, a, x in zip(data, absr, rest, strict=True):
            if r.task:
                s, n = sums.get(r.task, (0.0, 0.0))
                sums[r.task] = (s + (a / x if x > 0.0 else 1.0), n + 1.0)
        return sums

    def partner_sums(absr: list[float], rest: list[float]) -> dict[str, tuple[float, float]]:
        sums: dict[str, tuple[float, float]] = {}
        for r, a, x in zip(data, absr, rest, strict=True):
            total = sum(w for _, w in r.partners)
            for name, w in r.partners if total > 0.0 else ():
                s, n = sums.get(name, (0.0, 0.0))
                sums[name] = (s + w / total * (a / x if x > 0.0 else 1.0), n + w / total)
        return sums

    def shrink_k(sums: dict[str, tuple[float, float]]) -> float:
        means = [s / n for s, n in sums.values() if n > 0.0]
        if len(means) < 2:
            return 50.0
        avg = sum(means) / len(means)
        spread = sum((m - avg) ** 2 for m in means) / (len(means) - 1)
        noise = sum(1.0 / n for _, n in sums.values() if n > 0.0) / len(means)
        between = spread - noise
        return 50.0 if between <= 0.0 else min(50.0, max(2.0, 1.0 / between))

    def shrunk(sums: dict[str, tuple[float, float]]) -> dict[str, float]:
        k = shrink_k(sums)
        return {name: (s + k) / (n + k) for name, (s, n) in sums.items()}

    absr = [abs(r.residual) for r in data]
    positive = sorted(r.contention for r in data if r.contention > 0.0)
    c_ref = positive[len(positive) // 2] if positive else 0.0
    best = None
    for b in (0.0, 0.25, 0.5, 0.75, 1.0) if c_ref > 0.0 else (0.0,):
        cf = [float((min(hi, max(lo, r.contention / c_ref)) if c_ref > 0.0 else 1.0) ** b) for r in data]
        own: dict[str, float] = {}
        partner: dict[str, float] = {}
        base = sum(absr) / sum(cf)
        for _ in range(6):
            rest = [base * c * factor({}, partner, r) for r, c in zip(data, cf, strict=True)]
            own = shrunk(own_sums(absr, rest))
            rest = [base * c * own.get(r.task, 1.0) for r, c in zip(data, cf, strict=True)]
            partner = shrunk(partner_sums(absr, rest))
            fitted = sum([c * factor(own, partner, r) for r, c in zip(data, cf, strict=True)])
            base = sum(absr) / fitted if fitted > 0.0 else base
        scales = [base * c * factor(own, partner, r) for r, c in zip(data, cf, strict=True)]
        loglik = -sum(math.log(s) + a / s for s, a in zip(scales, absr, strict=True) if s > 0.0)
        if best is None or loglik > best[0]:
            best = (loglik, b, own, partner, base, cf)
    assert best is not None
    _, b, own, partner, base, cf = best
    rest_own = [base * c * factor({}, partner, r) for r, c in zip(data, cf, strict=True)]
    rest_partner = [base * c * own.get(r.task, 1.0) for r, c in zip(data, cf, strict=True)]
    o_sums, p_sums = own_sums(absr, rest_own), partner_sums(absr, rest_partner)
    k_own, k_partner = shrink_k(o_sums), shrink_k(p_sums)
    loo = []
    for r, a, c, x_own, x_partner in zip(data, absr, cf, rest_own, rest_partner, strict=True):
        f = 1.0
        if r.task in o_sums:
            s, n = o_sums[r.task]
            f = (s - (a / x_own if x_own > 0.0 else 1.0) + k_own) / (n - 1.0 + k_own)
        p = 1.0
        total = sum(w for _, w in r.partners)
        if total > 0.0:
            p = 0.0
            for name, w in r.partners:
                s, n = p_sums[name]
                share = w / total
                mine = share * (a / x_partner if x_partner > 0.0 else 1.0)
                p += share * (s - mine + k_partner) / (n - share + k_partner)
        loo.append(base * c * f * p)
    standardized = tuple(sorted(r.residual / s for r, s in zip(data, loo, strict=True) if s > 0.0))
    return base, b, own, partner, standardized


def _messy_rows(seed: int) -> list[ScaleRow]:
    """Rows with what a fit meets: types missing, partners without a name or a share, several
    partners of one type, no contention, residuals of 0."""
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(rng.randint(1, 9))]
    out = []
    for _ in range(rng.choice([4, 12, 60, 300])):
        partners = tuple(
            (rng.choice([*names, ""]), rng.choice([0.0, rng.random(), rng.random()]))
            for _ in range(rng.choice([0, 1, 1, 2, 3]))
        )
        residual = rng.choice([0.0, rng.gauss(0.0, 0.1), rng.gauss(0.0, 0.02)])
        out.append(
            ScaleRow(residual, rng.choice([0.0, rng.random(), 3.0 * rng.random()]), rng.choice([*names, ""]), partners)
        )
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_fit_is_the_plain_formulas_to_the_bit(seed: int) -> None:
    data = _messy_rows(seed)
    scale = fit_scale(data)
    if scale is None:  # no scatter or nothing left standardised: the plain fit has none either
        assert sum(abs(r.residual) for r in data) <= 0.0 or not _plain_fit(data)[4]
        return
    base, b, own, partner, standardized = _plain_fit(data)
    assert (scale.base, scale.exponent, scale.standardized) == (base, b, standardized)
    assert list(scale.own.items()) == list(own.items())  # the same factors, in the same order
    assert list(scale.partner.items()) == list(partner.items())
