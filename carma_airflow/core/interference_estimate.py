"""The fit of the two interference coefficients: robust (Huber), bounded, the prior as evidence.

A Huber loss on log-stretch residuals (a try that stalled on I/O pulls linearly, not
quadratically), both coefficients clipped to hard bounds, the prior counted as ``prior_weight``
observations' worth of evidence, and a second fit without the observations the first cannot
explain.  Also the coefficients' covariance and a prediction's standard error from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from carma_airflow.core.interference_form import (
    PRIOR_BETA,
    PRIOR_SCALE,
    CollocationObservation,
    log_speed_gradient,
)

# The cold prior's contention: speed 0.95 for two tenants of activity 0.5 each.  On measured pairs
# of older GPUs (gavel_pairs.csv, mean speed 0.60) it is closer than "no interference"; on a newer
# GPU (mean speed about 0.94) it is about as close, where 0.5 is twice as far (docs/model.md).
COLD_PRIOR_BETA = 0.1


@dataclass(frozen=True, slots=True)
class InterferenceSettings:
    """How the interference coefficients are learned; every number a knob."""

    prior_beta: float = PRIOR_BETA  # the fit's anchor: the sharing model's calibration (k and beta trade off)
    # what a GPU model with too few observations predicts: mild interference, unsure (COLD_PRIOR_BETA);
    # the calibration (0.5) is twice as wrong as "no interference" on a newer GPU
    cold_beta: float = COLD_PRIOR_BETA
    prior_scale: float = PRIOR_SCALE
    beta_lower: float = 0.0  # contention never speeds a task up ...
    beta_upper: float = 2.0  # ... nor triples its run time beside one full-GPU co-tenant
    scale_lower: float = 0.3  # reported activity at least 30 % real ...
    scale_upper: float = 1.5  # ... and at most 1.5x under-stated
    min_observations: int = 10  # informative observations before anything leaves the prior
    prior_weight: float = 1.0  # the prior counts as this many observations' worth of evidence
    reject_at: float = 4.0  # residuals beyond this many robust standard deviations: left out
    window: int = 512  # only the most recent observations count (per-task terms need a few per type)
    huber_delta: float = 0.10  # residuals (log stretch) beyond ~10 % count linearly: outliers
    # the prior's confidence: the share of predictions within +-5 % it can promise (few: it is a guess)
    prior_confidence: float = 0.1
    one_sided_outliers: bool = True  # only tries slower than explained are left out (False: both sides)
    task_terms: bool = True  # per-task sensitivity and pressure over the pooled fit (core/task_terms.py)
    interval_level: float = 0.90  # SpeedPrediction.low/high: this central share of observations

    def clip(self, beta: float, scale: float) -> tuple[float, float]:
        return (
            min(self.beta_upper, max(self.beta_lower, beta)),
            min(self.scale_upper, max(self.scale_lower, scale)),
        )


DEFAULT_INTERFERENCE_SETTINGS = InterferenceSettings()


def _huber_weight(residual: float, delta: float) -> float:
    a = abs(residual)
    return 1.0 if a <= delta else delta / a


def _huber_loss(residual: float, delta: float) -> float:
    a = abs(residual)
    return 0.5 * a * a if a <= delta else delta * (a - 0.5 * delta)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


Covariance = tuple[float, float, float]  # var(beta), cov(beta, scale), var(scale)


def robust_fit(
    observations: Sequence[CollocationObservation], s: InterferenceSettings
) -> tuple[float, float, Covariance, int]:
    """Fit, then refit without the observations the first fit cannot explain (outliers).

    Outliers of this kind are one-sided (a try that stalled on I/O or was preempted runs longer,
    never faster) and even a Huber loss leans toward them; beyond ``reject_at`` robust standard
    deviations (at least ``3 * huber_delta``) *slower* than the fit explains, an observation is
    left out of the second fit (both sides with ``one_sided_outliers=False``, as before).
    Returns the coefficients, covariance and how many observations were left out.
    """
    rows = [_Row.of(o) for o in observations]
    beta, scale, cov = _huber_fit(rows, s)
    residuals = [r.target - _log_stretch(r, beta, scale)[0] for r in rows]
    sigma = max(0.01, 1.4826 * median([abs(r) for r in residuals]))
    cut = max(s.reject_at * sigma, 3.0 * s.huber_delta)
    if s.one_sided_outliers:
        kept = [o for o, r in zip(rows, residuals, strict=True) if r <= cut]
    else:
        kept = [o for o, r in zip(rows, residuals, strict=True) if abs(r) <= cut]
    if len(kept) == len(rows) or len(kept) < s.min_observations:
        return beta, scale, cov, 0
    beta, scale, cov = _huber_fit(kept, s)
    return beta, scale, cov, len(rows) - len(kept)


@dataclass(frozen=True, slots=True)
class _Row:
    """An observation as the fit reads it, read once (a fit reads each a few hundred times): its
    log stretch, own activity, and per segment its share of the run time (normalised) and its
    summed co-tenant activity."""

    target: float
    own: float
    segments: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, obs: CollocationObservation) -> _Row:
        total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
        segments = tuple((max(0.0, s.share) / total, sum(s.co_tenants)) for s in obs.segments)
        return cls(math.log(obs.stretch), obs.own_activity, segments)


def _log_stretch(row: _Row, beta: float, scale: float) -> tuple[float, float, float]:
    """:func:`~carma_airflow.core.interference_form.log_stretch` of the row's observation, the same
    floats (its speed and gradient written out, the shares and contentions read once)."""
    own = row.own
    alone = scale * own
    log_alone = math.log(alone) if alone > 1.0 else 0.0
    own_saturated = alone > 1.0
    rate = d_beta = d_scale = 0.0
    for share, contention in row.segments:
        if contention <= 0.0:  # alone: solo speed, no gradient
            rate += share * 1.0
            d_beta += share * 1.0 * 0.0
            d_scale += share * 1.0 * 0.0
            continue
        total = scale * (own + contention)
        inner = 1.0 + beta * scale * contention
        saturation = 0.0 if total <= 1.0 else math.log(total) - log_alone
        r = share * (1.0 / (math.exp(saturation) * inner))
        saturated = (total > 1.0) - own_saturated
        rate += r
        d_beta += r * (-scale * contention / inner)
        d_scale += r * (-saturated / scale - beta * contention / inner)
    return -math.log(rate), -d_beta / rate, -d_scale / rate


def huber_fit(
    observations: Sequence[CollocationObservation], s: InterferenceSettings
) -> tuple[float, float, Covariance]:
    """Huber-weighted Gauss-Newton fit of (beta, scale) within bounds, the prior as pseudo-evidence.

    The prior's weight per coefficient is ``prior_weight`` times the average information one
    observation carries about it at the prior, so it is unit-free.  Returns the coefficients and
    their covariance (residual scale from the median absolute residual).
    """
    return _huber_fit([_Row.of(o) for o in observations], s)


def _huber_fit(rows: Sequence[_Row], s: InterferenceSettings) -> tuple[float, float, Covariance]:
    b0, k0 = s.prior_beta, s.prior_scale
    n = len(rows)
    info_b = info_k = 0.0
    for row in rows:
        _, gb, gk = _log_stretch(row, b0, k0)
        info_b += gb * gb
        info_k += gk * gk
    lam_b = max(1e-9, s.prior_weight * info_b / n)
    lam_k = max(1e-9, s.prior_weight * info_k / n)
    delta = s.huber_delta
    half_delta = 0.5 * delta

    def objective(beta: float, scale: float) -> float:
        losses = []
        for row in rows:
            a = abs(row.target - _log_stretch(row, beta, scale)[0])  # _huber_loss, written out
            losses.append(0.5 * a * a if a <= delta else delta * (a - half_delta))
        return sum(losses) + 0.5 * (lam_b * (beta - b0) ** 2 + lam_k * (scale - k0) ** 2)

    beta, scale = b0, k0
    current = objective(beta, scale)
    damping = 1e-3  # Levenberg-Marquardt: raised when a step does not lower the loss
    for _ in range(60):
        a11 = a12 = a22 = g1 = g2 = 0.0
        for row in rows:
            pred, jb, jk = _log_stretch(row, beta, scale)
            r = row.target - pred
            w = _huber_weight(r, delta)
            a11 += w * jb * jb
            a12 += w * jb * jk
            a22 += w * jk * jk
            g1 += w * jb * r
            g2 += w * jk * r
        a11 += lam_b
        a22 += lam_k
        g1 -= lam_b * (beta - b0)
        g2 -= lam_k * (scale - k0)
        while damping < 1e8:
            d11, d22 = a11 * (1.0 + damping), a22 * (1.0 + damping)
            det = d11 * d22 - a12 * a12
            nb, nk = s.clip(beta + (d22 * g1 - a12 * g2) / det, scale + (d11 * g2 - a12 * g1) / det)
            value = objective(nb, nk)
            if value <= current:
                break
            damping *= 10.0
        else:
            break  # no step lowers the loss: a minimum (within the bounds)
        done = abs(nb - beta) + abs(nk - scale) < 1e-7
        beta, scale, current = nb, nk, value
        damping = max(1e-6, damping / 3.0)
        if done:
            break
    a11 = a12 = a22 = 0.0
    residuals = []
    for row in rows:
        pred, jb, jk = _log_stretch(row, beta, scale)
        residuals.append(row.target - pred)
        a11 += jb * jb
        a12 += jb * jk
        a22 += jk * jk
    a11 += lam_b
    a22 += lam_k
    sigma2 = max(0.01, 1.4826 * median([abs(r) for r in residuals])) ** 2
    det = a11 * a22 - a12 * a12
    cov = (sigma2 * a22 / det, -sigma2 * a12 / det, sigma2 * a11 / det)
    return beta, scale, cov


def log_speed_stderr(own: float, co_tenants: Sequence[float], beta: float, scale: float, cov: Covariance) -> float:
    gb, gk = log_speed_gradient(own, sum(co_tenants), beta, scale)
    var = gb * gb * cov[0] + 2.0 * gb * gk * cov[1] + gk * gk * cov[2]
    return math.sqrt(max(0.0, var))


def clip01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


__all__ = [
    "COLD_PRIOR_BETA",
    "DEFAULT_INTERFERENCE_SETTINGS",
    "Covariance",
    "InterferenceSettings",
    "clip01",
    "huber_fit",
    "log_speed_stderr",
    "median",
    "robust_fit",
]
