"""Per-task interference terms on top of a GPU model's pooled fit, and the observation scatter.

The pooled fit (:mod:`carma_airflow.core.interference_estimate`) gives every tenant the same
contention coefficient.  Measured pairs say otherwise: some jobs suffer much more than others
beside the same partner (their *sensitivity*), and some partners hurt much more than others
(their *pressure*).  Per segment of a try with co-tenants of summed activity ``C``, the pooled
fit's log slowdown is ``log max(1, k (a + C)) / max(1, k a)`` (saturation, kept) plus the contention
part ``g = log(1 + beta k C)``.  With terms, the contention part of task ``i`` beside co-tenants
``j`` becomes

    g * (1 + u_i + sum_j w_j v_j)        (w_j: co-tenant j's share of the activity C)

``u_i`` (sensitivity) and ``v_j`` (pressure) are offsets per task type, 0 for the pooled fit.
The model stays linear in ``u`` and ``v`` for a steady co-tenancy, so the fit is a ridge
regression of the pooled fit's log-stretch residuals, solved by Gauss-Seidel sweeps: each term
is shrunk toward 0 (the pooled fit) by an empirical-Bayes penalty ``sigma^2 / tau^2``, with
``tau^2`` the spread of the terms across task types and ``sigma^2`` the observation scatter.  A
type seen a few times stays near the pooled fit; an unseen type gets the pooled fit, with the
spread ``tau^2`` as its uncertainty.  The multiplier is clipped to ``[0, MAX_MULTIPLIER]``.

Outliers are one-sided: a try that stalled on I/O, was preempted or waited on a lock runs
*longer*, never faster, than its co-tenants explain, so only observations slower than predicted
by more than ``reject_at`` robust standard deviations (at least ``3 * huber_delta``) are left
out, once, after a first fit.

Uncertainty comes from the observations themselves: the fit keeps its leave-one-out residuals
of log speed (each observation against a fit without it, approximated by its leverage).  A
prediction's interval is the residuals' central ``interval_level`` quantiles (90 % by default),
widened where the co-tenants' terms are less certain than the typical observation's.  A task
type never seen is held to the residuals its seen peers leave with their own sensitivity taken
out (``TaskTerms.unseen``: what a type with no observations is predicted with), a type seen a few
times partly so, by the share of ``tau^2`` its term's variance still is.  The residuals are
not alike: their scale is fitted against the contention predicted and the task types involved
(:mod:`~carma_airflow.core.interference_spread`), and a prediction's interval and ``confidence``
(the share of tries within +-5 % of its speed) are those of the residuals standardised by that
scale, at the prediction's own scale.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from carma_airflow.core.interference_form import CollocationObservation, speed
from carma_airflow.core.interference_spread import ResidualScale, ScaleRow, fit_scale, quantile

MAX_MULTIPLIER = 8.0  # contention at most 8x the pooled fit's for one pair of task types
TERM_BOUNDS = (-1.0, 6.0)  # one term's offset: its own multiplier 1 + u within 0 .. 7
WITHIN = math.log(1.05)  # what "confidence" counts: predictions within +-5 % of speed
MIN_SCATTER = 0.005**2  # log-speed residual variance: below 0.5 % it is telemetry noise, not knowledge
_SWEEPS = 40


@dataclass(frozen=True, slots=True)
class Term:
    """One task type's offset (0: the pooled fit), its variance, and the observations behind it."""

    value: float
    variance: float
    count: int


@dataclass(frozen=True, slots=True)
class _Row:
    """One observation, linearised at the pooled fit."""

    task: str
    target: float  # log stretch observed minus the pooled fit's
    g: float  # d log stretch / d u (the contention part, rate-weighted over segments)
    weights: tuple[tuple[str, float], ...]  # (co-tenant type, d log stretch / d v)
    unnamed: float  # sum of squared activity shares of co-tenants without a type (their v unknown)


def _row(obs: CollocationObservation, beta: float, scale: float) -> _Row:
    total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
    rates = []
    for s in obs.segments:
        rates.append(max(0.0, s.share) / total * speed(obs.own_activity, (sum(s.co_tenants),), beta, scale))
    rate = sum(rates) or 1.0
    g = 0.0
    weights: dict[str, float] = {}
    unnamed = 0.0
    for s, r in zip(obs.segments, rates, strict=True):
        contention = sum(s.co_tenants)
        if contention <= 0.0:
            continue
        part = (r / rate) * math.log1p(beta * scale * contention)
        g += part
        names = (*s.co_tasks, *([""] * (len(s.co_tenants) - len(s.co_tasks))))
        for name, a in zip(names, s.co_tenants, strict=False):
            if name and a > 0.0:
                weights[name] = weights.get(name, 0.0) + part * a / contention
            elif a > 0.0:
                unnamed += (r / rate) * (a / contention) ** 2
    target = math.log(obs.stretch) + math.log(rate)  # observed minus the pooled fit's log stretch
    return _Row(obs.task, target, g, tuple(sorted(weights.items())), unnamed)


@dataclass(frozen=True, slots=True)
class TaskTerms:
    """The terms of one GPU model's fit, and the leave-one-out residuals of log speed (sorted)."""

    sensitivity: Mapping[str, Term]
    pressure: Mapping[str, Term]
    tau2_sensitivity: float
    tau2_pressure: float
    residuals: tuple[float, ...]  # log speed observed - predicted, leave-one-out, sorted
    typical_variance: float  # mean variance of the terms over the observations fitted
    outliers: int = 0
    scatter: float = 0.0  # variance of the residuals (kept: a prediction must not recount it)
    scale: ResidualScale | None = None  # how the residuals' scale varies by prediction
    # the residuals of the observations with their own type's sensitivity taken out (as a type
    # never seen would be predicted), their scale by contention and partner types: a prediction
    # for an unseen type is held to these, not to a normal guess at the terms' error
    unseen: ResidualScale | None = None
    typical_partner_variance: float = 0.0  # the co-tenants' terms' share of typical_variance

    @classmethod
    def empty(cls) -> TaskTerms:
        return cls({}, {}, 0.0, 0.0, (), 0.0)

    def multiplier(
        self, task: str | None, co_tasks: Sequence[str | None], co_tenants: Sequence[float]
    ) -> tuple[float, float]:
        """The contention multiplier ``1 + u + sum w v`` and its variance (from the terms)."""
        u = self.sensitivity.get(task or "")
        value = u.value if u is not None else 0.0
        var = u.variance if u is not None else self.tau2_sensitivity
        total = sum(co_tenants)
        if total > 0.0:
            for name, a in zip(co_tasks, co_tenants, strict=False):
                w = a / total
                v = self.pressure.get(name or "")
                value += w * (v.value if v is not None else 0.0)
                var += w * w * (v.variance if v is not None else self.tau2_pressure)
        return min(MAX_MULTIPLIER, max(0.0, 1.0 + value)), var

    def spread(self, g: float, term_variance: float, level: float) -> tuple[float, float, float]:
        """Interval quantiles (lower, upper) of log speed about the point, and the confidence,
        for a prediction whose contention part is ``g`` and whose terms' variance is
        ``term_variance``."""
        res = self.residuals
        if not res:
            return 0.0, 0.0, 0.0
        # a scatter below telemetry's own noise is a fit on too few tries, not a sure one: widening
        # by it would blow a near-zero residual up to any size (3 tries: quantiles of 1e11)
        spread2 = max(self.scatter, MIN_SCATTER)
        extra = max(0.0, g * g * (term_variance - self.typical_variance))
        widen = math.sqrt(1.0 + extra / spread2)
        lo = quantile(res, (1.0 - level) / 2.0) * widen
        hi = quantile(res, (1.0 + level) / 2.0) * widen
        inside = bisect.bisect_right(res, WITHIN / widen) - bisect.bisect_left(res, -WITHIN / widen)
        return lo, hi, inside / len(res)

    def interval(
        self,
        g: float,
        multiplier: float,
        term_variance: float,
        level: float,
        task: str | None,
        co_tasks: Sequence[str | None],
        co_tenants: Sequence[float],
    ) -> tuple[float, float, float]:
        """As :meth:`spread`, at this prediction's own residual scale (its contention part
        ``g * multiplier``, its task types): lower, upper quantiles of log speed, confidence."""
        sc = self.scale
        if sc is None:
            return self.spread(g, term_variance, level)
        c = g * max(1.0, multiplier)  # an unknown term errs in proportion to the contention it scales
        unseen = self.unseen
        if unseen is None:
            s = sc.scale(g * multiplier, task, co_tasks, co_tenants)
            return sc.band(s, c * c * (term_variance - self.typical_variance), level, WITHIN)
        # the own term's uncertainty: a type never seen is predicted as the residuals its seen peers
        # leave with their own sensitivity taken out (``unseen``) say; a type seen a few times
        # partly so, by how much of the unseen type's variance its term still has; the co-tenants'
        # terms less certain than typical widen either
        own = self.sensitivity.get(task or "")
        own_variance = own.variance if own is not None else self.tau2_sensitivity
        typical_own = self.typical_variance - self.typical_partner_variance
        room = self.tau2_sensitivity - typical_own
        unknown = 1.0 if own is None else _clip01((own.variance - typical_own) / room) if room > 0.0 else 0.0
        extra = c * c * (term_variance - own_variance - self.typical_partner_variance)
        lo = hi = inside = 0.0
        cm = g * multiplier
        if unknown < 1.0:  # the blends written out: a generator per prediction cost a tenth of it
            s_lo, s_hi, s_in = sc.band(sc.scale(cm, task, co_tasks, co_tenants), extra, level, WITHIN)
            lo, hi, inside = (1.0 - unknown) * s_lo, (1.0 - unknown) * s_hi, (1.0 - unknown) * s_in
        if unknown > 0.0:
            n_lo, n_hi, n_in = unseen.band(unseen.scale(cm, None, co_tasks, co_tenants), extra, level, WITHIN)
            lo, hi, inside = lo + unknown * n_lo, hi + unknown * n_hi, inside + unknown * n_in
        return lo, hi, inside


def _clip01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _variance(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return sum((x - mean) ** 2 for x in values) / (n - 1)


def _clip(x: float) -> float:
    lo, hi = TERM_BOUNDS
    return lo if x < lo else hi if x > hi else x


def _solve(
    rows: Sequence[_Row], lam_u: float, lam_v: float
) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float], list[float]]:
    """Ridge fit of the terms by Gauss-Seidel sweeps; returns u, v, their information (sum of
    squared features) and the in-sample residuals (log stretch)."""
    u: dict[str, float] = {}
    v: dict[str, float] = {}
    info_u: dict[str, float] = {}
    info_v: dict[str, float] = {}
    # per type its rows as (row, feature, target): the sweeps below read no row's attributes
    by_task: dict[str, list[tuple[int, float, float]]] = {}
    by_partner: dict[str, list[tuple[int, float, float]]] = {}
    for n, r in enumerate(rows):
        if r.task and r.g > 0.0:
            by_task.setdefault(r.task, []).append((n, r.g, r.target))
            info_u[r.task] = info_u.get(r.task, 0.0) + r.g * r.g
        for name, w in r.weights:
            by_partner.setdefault(name, []).append((n, w, r.target))
            info_v[name] = info_v.get(name, 0.0) + w * w
    fitted = [0.0] * len(rows)  # the terms' part of each row's prediction
    for _ in range(_SWEEPS):
        moved = 0.0
        for task, idx in by_task.items():
            old = u.get(task, 0.0)
            num = sum([g * (target - fitted[n] + g * old) for n, g, target in idx])  # a list: no generator
            new = _clip(num / (info_u[task] + lam_u))
            if new != old:
                for n, g, _target in idx:
                    fitted[n] += g * (new - old)
                u[task] = new
                moved = max(moved, abs(new - old))
        for name, pairs in by_partner.items():
            old = v.get(name, 0.0)
            num = sum([w * (target - fitted[n] + w * old) for n, w, target in pairs])
            new = _clip(num / (info_v[name] + lam_v))
            if new != old:
                for n, w, _target in pairs:
                    fitted[n] += w * (new - old)
                v[name] = new
                moved = max(moved, abs(new - old))
        if moved < 1e-7:
            break
    # a term the sweeps left at exactly 0.0 is fitted all the same (docs/model.md, round 40)
    u.update({task: u.get(task, 0.0) for task in by_task})
    v.update({name: v.get(name, 0.0) for name in by_partner if info_v[name] > 0.0})  # 0.0: no information
    residuals = [r.target - f for r, f in zip(rows, fitted, strict=True)]
    return u, v, info_u, info_v, residuals


def fit_terms(
    observations: Sequence[CollocationObservation],
    beta: float,
    scale: float,
    *,
    reject_at: float = 4.0,
    huber_delta: float = 0.10,
    tau2_start: float = 0.25,
) -> TaskTerms:
    """Terms per task type over a pooled fit ``(beta, scale)``, with the residual scatter.

    Observations without task names still give the scatter (their rows carry no terms).
    """
    rows = [_row(o, beta, scale) for o in observations if o.informative]
    if not rows:
        return TaskTerms.empty()
    terms, kept_rows = _fit_rows(rows, tau2_start, tau2_start)
    # one-sided outliers: slower than the fit explains by far (stalls), never faster
    scale_r = max(0.01, 1.4826 * _median_abs(terms[4]))
    cut = max(reject_at * scale_r, 3.0 * huber_delta)
    kept = [r for r, res in zip(kept_rows, terms[4], strict=True) if res >= -cut]  # log speed: slow is negative
    outliers = len(kept_rows) - len(kept)
    if outliers and len(kept) >= max(2, len(kept_rows) // 2):
        terms, kept_rows = _fit_rows(kept, terms[5], terms[6])
    else:
        outliers = 0
    sens, pres, tau_u, tau_v, loo, _, _, typical, typical_partner = terms
    residual_scale = fit_scale([_scale_row(r, res, sens, pres) for r, res in zip(kept_rows, loo, strict=True)])
    unseen = fit_scale([_unseen_row(r, pres) for r in kept_rows if r.g > 0.0]) if sens else None
    return TaskTerms(
        sens,
        pres,
        tau_u,
        tau_v,
        tuple(sorted(loo)),
        typical,
        outliers,
        _variance(loo),
        residual_scale,
        unseen,
        typical_partner,
    )


def _scale_row(r: _Row, loo: float, sens: Mapping[str, Term], pres: Mapping[str, Term]) -> ScaleRow:
    """A fitted row as the residual scale sees it: its contention part ``g (1 + u + sum w v)``."""
    u = sens[r.task].value if r.task in sens else 0.0
    contention = max(0.0, r.g * (1.0 + u) + sum(w * pres[n].value if n in pres else 0.0 for n, w in r.weights))
    shares = tuple((n, w / r.g) for n, w in r.weights) if r.g > 0.0 else ()
    return ScaleRow(loo, contention, r.task, shares)


def _unseen_row(r: _Row, pres: Mapping[str, Term]) -> ScaleRow:
    """A fitted row as a type never seen would have been predicted: its own sensitivity taken
    out (the pooled fit's and its co-tenants' pressures kept), with no type of its own."""
    pressure = sum(w * pres[n].value if n in pres else 0.0 for n, w in r.weights)
    residual = -(r.target - pressure)  # log speed observed minus predicted without the own term
    shares = tuple((n, w / r.g) for n, w in r.weights)
    return ScaleRow(residual, max(0.0, r.g + pressure), "", shares)


_Fitted = tuple[dict[str, Term], dict[str, Term], float, float, list[float], float, float, float, float]


def _fit_rows(rows: Sequence[_Row], tau2_u: float, tau2_v: float) -> tuple[_Fitted, Sequence[_Row]]:
    """Empirical-Bayes ridge: fit, re-estimate the scatter and the terms' spread, refit (three
    rounds).  Returns (terms u, terms v, tau2 u, tau2 v, leave-one-out residuals of log speed,
    tau2 u, tau2 v, typical term variance, its co-tenants' part) and the rows."""
    g2 = [r.g * r.g for r in rows if r.g > 0.0]
    mean_g2 = sum(g2) / len(g2) if g2 else 1.0
    sigma2 = 0.01
    u: dict[str, float] = {}
    v: dict[str, float] = {}
    info_u: dict[str, float] = {}
    info_v: dict[str, float] = {}
    residuals: list[float] = []
    for _ in range(3):
        lam_u = min(50.0 * mean_g2, max(0.2 * mean_g2, sigma2 / max(tau2_u, 1e-9)))
        lam_v = min(50.0 * mean_g2, max(0.2 * mean_g2, sigma2 / max(tau2_v, 1e-9)))
        u, v, info_u, info_v, residuals = _solve(rows, lam_u, lam_v)
        sigma2 = max(1e-4, (1.4826 * _median_abs(residuals)) ** 2)
        tau2_u = _spread(u, info_u, sigma2, lam_u)
        tau2_v = _spread(v, info_v, sigma2, lam_v)
    lam_u = min(50.0 * mean_g2, max(0.2 * mean_g2, sigma2 / max(tau2_u, 1e-9)))
    lam_v = min(50.0 * mean_g2, max(0.2 * mean_g2, sigma2 / max(tau2_v, 1e-9)))
    sens = {k: Term(x, sigma2 / (info_u[k] + lam_u), 0) for k, x in u.items()}
    pres = {k: Term(x, sigma2 / (info_v[k] + lam_v), 0) for k, x in v.items()}
    counts_u: dict[str, int] = {}
    counts_v: dict[str, int] = {}
    loo = []
    variances = []
    partner_variances = []
    for r, res in zip(rows, residuals, strict=True):
        h = 0.0
        var = 0.0
        if r.task in info_u:
            h += r.g * r.g / (info_u[r.task] + lam_u)
            var += sens[r.task].variance
            counts_u[r.task] = counts_u.get(r.task, 0) + 1
        elif r.g > 0.0:
            var += tau2_u
        for name, w in r.weights:
            h += w * w / (info_v[name] + lam_v)
            counts_v[name] = counts_v.get(name, 0) + 1
        own_var = var
        for name, w in r.weights:
            if r.g > 0.0:  # a partner with no information (its weights 0.0 or underflowed) has no term
                var += (w / r.g) ** 2 * (pres[name].variance if name in pres else tau2_v)
        var += r.unnamed * tau2_v
        loo.append(-res / (1.0 - min(h, 0.9)))  # log speed = -log stretch
        variances.append(var)
        partner_variances.append(var - own_var)
    sens = {k: Term(t.value, t.variance, counts_u.get(k, 0)) for k, t in sens.items()}
    pres = {k: Term(t.value, t.variance, counts_v.get(k, 0)) for k, t in pres.items()}
    typical = sum(variances) / len(variances) if variances else 0.0
    typical_partner = sum(partner_variances) / len(partner_variances) if partner_variances else 0.0
    return (sens, pres, tau2_u, tau2_v, loo, tau2_u, tau2_v, typical, typical_partner), rows


def _spread(values: Mapping[str, float], info: Mapping[str, float], sigma2: float, lam: float) -> float:
    """Between-type variance of the terms: their mean square plus their mean posterior variance
    (0 where no type has terms: the pooled fit's residuals then hold all of its uncertainty)."""
    if not values:
        return 0.0
    ms = sum(x * x for x in values.values()) / len(values)
    pv = sum(sigma2 / (info[k] + lam) for k in values) / len(values)
    return min(4.0, max(0.005, ms + pv))


def _median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(x) for x in values) if values else 0.0


__all__ = ["MAX_MULTIPLIER", "WITHIN", "TaskTerms", "Term", "fit_terms"]
