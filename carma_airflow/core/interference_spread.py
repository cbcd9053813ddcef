"""How far one try's speed strays from the prediction, by what is predicted: the residual scale.

A fit's leave-one-out residuals of log speed are not alike.  Held out on measured pairs
(``bench/interference_eval.py``) the error of a prediction grows with how much contention it
predicts and, most of all, with the task types involved: some jobs run erratically beside any
partner, some partners make everyone beside them erratic.  A prediction that pooled every
residual into one distribution would promise every try the same chance of landing within +-5 %
(its ``confidence`` flat, whatever the prediction).  Here the typical absolute residual of one
prediction is

    s = A * (c / c_ref) ** b * F[task] * sum_j w_j P[co_task_j]

``c``: the contention part the prediction puts on log speed (``g`` times the terms' multiplier);
``c_ref``: its median over the observations fitted; ``b`` in 0..1; ``F`` the task type's
factor as the one that suffers, ``P`` a co-tenant type's factor as the one that disturbs (``w``
its share of the co-tenants' activity), both 1 for a type never seen and shrunk toward 1 by
empirical Bayes (how much the types' factors really differ against the scatter of one absolute
residual).  The factors are fitted on the absolute residuals (a Laplace likelihood: a few wild
tries do not dominate), ``b`` chosen on a grid by that likelihood.

Calibration: each residual divided by its own scale, the scale taken without the residual itself
(leave-one-out, so a type's factor does not explain its own residuals); a prediction's interval
is the central quantiles of those standardised residuals times its scale, and its confidence the
share of them within ``+-5 % / s``.  So coverage stays what the residuals show, and the
confidence separates the predictions likely to land close from those that are not.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # b: how the scale grows with the contention predicted
CONTENTION_RANGE = (0.25, 8.0)  # c / c_ref is clipped to this (no prediction is sure from c alone)
SHRINK_RANGE = (2.0, 50.0)  # pseudo-observations a type's factor is shrunk toward 1 with
_ROUNDS = 6
_ABS_OVER_SD2 = 2.0 / math.pi  # (mean absolute / standard deviation)^2 of a normal error


@dataclass(frozen=True, slots=True)
class ScaleRow:
    """One fitted observation: its leave-one-out residual of log speed, the contention part its
    prediction had, its task type and its co-tenants' types with their shares of the activity."""

    residual: float
    contention: float
    task: str
    partners: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class ResidualScale:
    """The fitted scale of residuals (see the module doc) and the standardised residuals, sorted."""

    base: float  # A
    contention_ref: float  # c_ref
    exponent: float  # b
    own: Mapping[str, float]  # F per task type (absent: 1)
    partner: Mapping[str, float]  # P per task type (absent: 1)
    standardized: tuple[float, ...]
    mean_abs: float = 1.0  # of the standardised residuals (about 1 by construction)
    sd: float = 1.0  # their standard deviation

    _levels: dict[float, tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)

    def scale(
        self, contention: float, task: str | None, co_tasks: Sequence[str | None], co_tenants: Sequence[float]
    ) -> float:
        """The typical absolute residual of log speed for one prediction (``co_tasks``: the
        co-tenants' types, in the order of their activities ``co_tenants``; None: unknown)."""
        s = self.base
        if self.exponent != 0.0 and self.contention_ref > 0.0:
            lo, hi = CONTENTION_RANGE
            ratio = contention / self.contention_ref
            s *= float((lo if ratio < lo else hi if ratio > hi else ratio) ** self.exponent)
        if task:
            s *= self.own.get(task, 1.0)
        if self.partner and co_tasks:
            total = acc = 0.0
            for name, a in zip(co_tasks, co_tenants, strict=False):
                if name and a > 0.0:
                    total += a
                    acc += a * self.partner.get(name, 1.0)
            if total > 0.0:
                s *= acc / total
        return s

    def quantiles(self, scale: float, level: float) -> tuple[float, float]:
        """The central ``level`` interval of log speed about the point, at this scale."""
        q = self._levels.get(level)
        if q is None:
            z = self.standardized
            q = self._levels[level] = (quantile(z, (1.0 - level) / 2.0), quantile(z, (1.0 + level) / 2.0))
        return q[0] * scale, q[1] * scale

    def within(self, scale: float, bound: float) -> float:
        """The share of tries whose log speed lands within ``+-bound`` of the point, at this scale."""
        z = self.standardized
        if not z or scale <= 0.0:
            return 1.0 if z else 0.0
        t = bound / scale
        return (bisect.bisect_right(z, t) - bisect.bisect_left(z, -t)) / len(z)

    def band(self, scale: float, extra: float, level: float, bound: float) -> tuple[float, float, float]:
        """Interval quantiles of log speed and the share within ``+-bound`` for residuals of this
        scale, with an error of variance ``extra`` added (the terms less certain than typical)."""
        if extra <= 0.0:
            lo, hi = self.quantiles(scale, level)
            return lo, hi, self.within(scale, bound)
        # that error is about normal (mean absolute 0.8 sd) and adds to the residual's in
        # quadrature; the interval and the share blend the residuals' shape with the normal one's,
        # each by its share of the variance
        widened = math.sqrt(scale * scale + _ABS_OVER_SD2 * extra / self.mean_abs**2)
        lo, hi = self.quantiles(widened, level)
        inside = self.within(widened, bound)
        total = (scale * self.sd) ** 2 + extra
        weight = extra / total
        half = _normal_quantile((1.0 + level) / 2.0) * math.sqrt(total)
        normal_inside = math.erf(bound / math.sqrt(2.0 * total))
        return (
            (1.0 - weight) * lo - weight * half,
            (1.0 - weight) * hi + weight * half,
            (1.0 - weight) * inside + weight * normal_inside,
        )


def fit_scale(rows: Sequence[ScaleRow]) -> ResidualScale | None:
    """The residual scale of these rows; None with fewer than 4 rows or no scatter."""
    if len(rows) < 4:
        return None
    absr = [abs(r.residual) for r in rows]
    if sum(absr) <= 0.0:
        return None
    positive = sorted(r.contention for r in rows if r.contention > 0.0)
    c_ref = positive[len(positive) // 2] if positive else 0.0
    best: tuple[float, float, list[float], list[float], float, list[float], list[float]] | None = None
    fixed = _Fixed.of(rows)
    ratios = [_clip_ratio(r.contention, c_ref) for r in rows]
    for b in EXPONENTS if c_ref > 0.0 else (0.0,):
        cf = [float(x**b) for x in ratios]
        base, own, partner, own_rows, p = _factors(fixed, absr, cf)
        scales = [base * c * (f * q) for c, f, q in zip(cf, own_rows, p, strict=True)]
        # Laplace log-likelihood of the absolute residuals at these scales
        loglik = -sum(math.log(s) + a / s for s, a in zip(scales, absr, strict=True) if s > 0.0)
        if best is None or loglik > best[0]:
            best = (loglik, b, own, partner, base, own_rows, p)
    assert best is not None
    _, b, own, partner, base, own_rows, p = best
    cf = [float(x**b) for x in ratios]
    loo = _leave_one_out(fixed, absr, cf, base, own_rows, p)
    standardized = sorted(r.residual / s for r, s in zip(rows, loo, strict=True) if s > 0.0)
    if not standardized:
        return None
    n = len(standardized)
    mean = sum(standardized) / n
    sd = math.sqrt(sum((z - mean) ** 2 for z in standardized) / max(1, n - 1))
    mean_abs = sum(abs(z) for z in standardized) / n
    return ResidualScale(
        base,
        c_ref,
        b,
        dict(zip(fixed.own_names, own, strict=True)),
        dict(zip(fixed.partner_names, partner, strict=True)),
        tuple(standardized),
        mean_abs or 1.0,
        sd or 1.0,
    )


def _clip_ratio(c: float, ref: float) -> float:
    lo, hi = CONTENTION_RANGE
    return min(hi, max(lo, c / ref)) if ref > 0.0 else 1.0


@dataclass(frozen=True, slots=True)
class _Fixed:
    """What the fits below read of the rows, the same in every round and for every exponent, read
    once (a refit fits 5 exponents x 6 rounds over 512 rows), the types by number: F's types
    (``own_names``, as they first come) and each row's (-1: none), P's types (``partner_names``,
    as they first come in rows whose shares sum above 0), each row's partners by number with their
    shares (``terms``) and their parts of the row's summed shares ``totals`` (``parts``: ``w /
    total``), both empty where that sum is 0.  The factors are lists in those orders; every sum
    adds what the same sum over dictionaries by name added, in the same order."""

    own_names: list[str]
    own_index: list[int]
    partner_names: list[str]
    terms: list[tuple[tuple[int, float], ...]]
    totals: list[float]
    parts: list[tuple[tuple[int, float], ...]]

    @classmethod
    def of(cls, rows: Sequence[ScaleRow]) -> _Fixed:
        own: dict[str, int] = {}
        partner: dict[str, int] = {}
        own_index, terms, totals, parts = [], [], [], []
        for r in rows:
            own_index.append(own.setdefault(r.task, len(own)) if r.task else -1)
            total = sum(w for _, w in r.partners)
            totals.append(total)
            if total > 0.0:
                numbered = tuple((partner.setdefault(n, len(partner)), w) for n, w in r.partners)
                terms.append(numbered)
                parts.append(tuple((i, w / total) for i, w in numbered))
            else:
                terms.append(())
                parts.append(())
        return cls(list(own), own_index, list(partner), terms, totals, parts)


def _partner_factors(fixed: _Fixed, partner: Sequence[float]) -> list[float]:
    """Each row's partners' factor (weighted by share), 1 where its shares sum to 0."""
    return [
        sum([w * partner[i] for i, w in terms]) / t if t > 0.0 else 1.0
        for terms, t in zip(fixed.terms, fixed.totals, strict=True)
    ]


_Sums = tuple[list[float], list[float]]  # per type: (sum of ratios, weight), by number


def _own_sums(fixed: _Fixed, absr: Sequence[float], rest: Sequence[float]) -> _Sums:
    sums = [0.0] * len(fixed.own_names)
    weights = [0.0] * len(fixed.own_names)
    for i, a, x in zip(fixed.own_index, absr, rest, strict=True):
        if i >= 0:
            sums[i] += a / x if x > 0.0 else 1.0
            weights[i] += 1.0
    return sums, weights


def _partner_sums(fixed: _Fixed, absr: Sequence[float], rest: Sequence[float]) -> _Sums:
    sums = [0.0] * len(fixed.partner_names)
    weights = [0.0] * len(fixed.partner_names)
    for parts, a, x in zip(fixed.parts, absr, rest, strict=True):
        if not parts:
            continue
        ratio = a / x if x > 0.0 else 1.0
        for i, share in parts:
            sums[i] += share * ratio
            weights[i] += share
    return sums, weights


def _factors(
    fixed: _Fixed, absr: Sequence[float], cf: Sequence[float]
) -> tuple[float, list[float], list[float], list[float], list[float]]:
    """A, F and P by alternating shrunk means of the absolute residuals (each over the others);
    also each row's own factor (1: no type) and its partners' factor (:func:`_partner_factors`)."""
    own_index = fixed.own_index
    total_abs = sum(absr)
    base = total_abs / sum(cf)
    own: list[float] = []
    partner = [1.0] * len(fixed.partner_names)  # none fitted yet: every P is 1
    own_rows = [1.0] * len(own_index)
    p = _partner_factors(fixed, partner)
    for _ in range(_ROUNDS):
        rest = [base * c * q for c, q in zip(cf, p, strict=True)]
        own = _shrunk(*_own_sums(fixed, absr, rest))
        own_rows = [own[i] if i >= 0 else 1.0 for i in own_index]
        rest = [base * c * f for c, f in zip(cf, own_rows, strict=True)]
        partner = _shrunk(*_partner_sums(fixed, absr, rest))
        p = _partner_factors(fixed, partner)
        fitted = sum([c * (f * q) for c, f, q in zip(cf, own_rows, p, strict=True)])
        base = total_abs / fitted if fitted > 0.0 else base
    return base, own, partner, own_rows, p


def _shrink_k(sums: Sequence[float], weights: Sequence[float]) -> float:
    """Pseudo-observations a type's mean ratio is shrunk toward 1 with: the within-type variance
    of one ratio (1: an absolute residual's sd is about its mean) over the between-type variance
    of the means (empirical Bayes), within ``SHRINK_RANGE``."""
    means = [s / n for s, n in zip(sums, weights, strict=True) if n > 0.0]
    if len(means) < 2:
        return SHRINK_RANGE[1]
    avg = sum(means) / len(means)
    spread = sum((m - avg) ** 2 for m in means) / (len(means) - 1)
    noise = sum(1.0 / n for n in weights if n > 0.0) / len(means)
    between = spread - noise
    return SHRINK_RANGE[1] if between <= 0.0 else min(SHRINK_RANGE[1], max(SHRINK_RANGE[0], 1.0 / between))


def _shrunk(sums: Sequence[float], weights: Sequence[float]) -> list[float]:
    k = _shrink_k(sums, weights)
    return [(s + k) / (n + k) for s, n in zip(sums, weights, strict=True)]


def _leave_one_out(
    fixed: _Fixed,
    absr: Sequence[float],
    cf: Sequence[float],
    base: float,
    own_rows: Sequence[float],
    p: Sequence[float],
) -> list[float]:
    """Each row's scale with its own residual taken out of its types' factors (their shrunk means
    without it, the shrinkage and the other factors kept); ``own_rows``, ``p``: each row's own and
    partners' factors (:func:`_factors`)."""
    rest_own = [base * c * q for c, q in zip(cf, p, strict=True)]
    rest_partner = [base * c * f for c, f in zip(cf, own_rows, strict=True)]
    own_s, own_n = _own_sums(fixed, absr, rest_own)
    partner_s, partner_n = _partner_sums(fixed, absr, rest_partner)
    k_own, k_partner = _shrink_k(own_s, own_n), _shrink_k(partner_s, partner_n)
    out = []
    for i, parts, a, c, x_own, x_partner, total in zip(
        fixed.own_index, fixed.parts, absr, cf, rest_own, rest_partner, fixed.totals, strict=True
    ):
        f = 1.0
        if i >= 0:
            f = (own_s[i] - (a / x_own if x_own > 0.0 else 1.0) + k_own) / (own_n[i] - 1.0 + k_own)
        q = 1.0
        if total > 0.0:
            q = 0.0
            ratio = a / x_partner if x_partner > 0.0 else 1.0
            for j, share in parts:
                mine = share * ratio
                q += share * (partner_s[j] - mine + k_partner) / (partner_n[j] - share + k_partner)
        out.append(base * c * f * q)
    return out


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (0 for none)."""
    n = len(ordered)
    if not n:
        return 0.0
    pos = min(max(q, 0.0), 1.0) * (n - 1)
    i = int(pos)
    j = min(i + 1, n - 1)
    return ordered[i] + (ordered[j] - ordered[i]) * (pos - i)


@functools.lru_cache(maxsize=8)
def _normal_quantile(q: float) -> float:
    return NormalDist().inv_cdf(q)


__all__ = ["ResidualScale", "ScaleRow", "fit_scale", "quantile"]
