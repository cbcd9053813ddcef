"""Interference, learned: how much slower a task runs beside co-tenants, fitted per GPU model.

The functional form is the sharing model's (:mod:`carma_airflow.core.sharing`), with two
coefficients.  A tenant whose reported solo SM activity is ``a``, beside co-tenants whose
reported activities sum to ``C``, runs slower by

    slowdown = max(1, k * (a + C)) * (1 + beta * k * C)

``beta`` is contention below saturation; ``k`` (the *activity scale*) is how much of the
reported activity is real demand (NVML busy time over-states it: a job that leaves most SMs
idle reads near 100 %).  With no observations ``beta`` is the sharing model's (0.5) and
``k = 1``, so the predictions are exactly what ``SharingModel.slowdowns`` says.

Every ended try that had co-tenants is an observation: its *stretch* (duration over its solo
duration from history) against the co-tenants it had.  A try whose co-tenants changed during its
run is described by segments (share of its run time, co-tenant activities); under the model its
stretch is then ``1 / sum(share_j / slowdown_j)``.

The fit is robust and bounded: a Huber loss on log-stretch residuals (a try that stalled on
I/O pulls linearly, not quadratically), both coefficients clipped to hard bounds, the prior
counted as ``prior_weight`` observations' worth of evidence (so ``k`` and ``beta`` stay put
where the data cannot tell them apart), and nothing moves until ``min_observations``
informative observations are in.  Only the last ``window`` observations count (a driver update
changes a GPU's behaviour).  Ranges are about two standard errors either side; a prediction's
``confidence`` is ``1 - 4 * (standard error of its log speed)``, so a prediction good to +-5 %
has confidence 0.8 and one good only to +-25 % has none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from carma_airflow.core.sharing import SharingModel

PRIOR_BETA = SharingModel().beta
PRIOR_SCALE = 1.0  # reported activity taken at face value, as the sharing model does


def slowdown(own: float, co_tenants: Iterable[float], beta: float, scale: float = PRIOR_SCALE) -> float:
    """Slowdown of a tenant with activity ``own`` beside ``co_tenants`` (1.0 = solo speed)."""
    contention = sum(co_tenants)
    return max(1.0, scale * (own + contention)) * (1.0 + beta * scale * contention)


def speed(own: float, co_tenants: Iterable[float], beta: float, scale: float = PRIOR_SCALE) -> float:
    """Progress rate relative to solo (1 / slowdown)."""
    return 1.0 / slowdown(own, co_tenants, beta, scale)


def _log_speed_gradient(own: float, contention: float, beta: float, scale: float) -> tuple[float, float]:
    """d log(speed) / d beta and d log(speed) / d scale for one set of co-tenants."""
    inner = 1.0 + beta * scale * contention
    saturated = scale * (own + contention) > 1.0
    return -scale * contention / inner, -(1.0 / scale if saturated else 0.0) - beta * contention / inner


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a try's run with one set of co-tenants: its share of the run time, their activities."""

    share: float
    co_tenants: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class CollocationObservation:
    """One ended try: its stretch (run time over solo run time) and what it shared the GPU with.

    ``segments``' shares are of the try's wall time and should sum to 1 (they are normalised).
    A try that never shared its GPU says nothing about interference and is ignored by the fit.
    """

    stretch: float
    own_activity: float
    segments: tuple[Segment, ...]

    @classmethod
    def steady(cls, stretch: float, own_activity: float, co_tenants: Sequence[float]) -> CollocationObservation:
        """A try that had the same co-tenants for its whole run."""
        return cls(stretch, own_activity, (Segment(1.0, tuple(co_tenants)),))

    @property
    def informative(self) -> bool:
        """Whether it tells anything about contention: valid numbers and co-tenants some of the time."""
        if not (math.isfinite(self.stretch) and self.stretch > 0.0 and math.isfinite(self.own_activity)):
            return False
        return any(s.share > 0.0 and sum(s.co_tenants) > 0.0 for s in self.segments)


def _log_stretch(obs: CollocationObservation, beta: float, scale: float) -> tuple[float, float, float]:
    """log predicted stretch and its derivatives in beta and scale."""
    total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
    rate = d_beta = d_scale = 0.0
    for s in obs.segments:
        share = max(0.0, s.share) / total
        contention = sum(s.co_tenants)
        r = share * speed(obs.own_activity, (contention,), beta, scale)
        g_beta, g_scale = _log_speed_gradient(obs.own_activity, contention, beta, scale)
        rate += r
        d_beta += r * g_beta
        d_scale += r * g_scale
    return -math.log(rate), -d_beta / rate, -d_scale / rate


def predicted_stretch(obs: CollocationObservation, beta: float, scale: float = PRIOR_SCALE) -> float:
    """The stretch the model predicts for an observation's co-tenancy."""
    return math.exp(_log_stretch(obs, beta, scale)[0])


@dataclass(frozen=True, slots=True)
class InterferenceSettings:
    """How the interference coefficients are learned; every number a knob."""

    prior_beta: float = PRIOR_BETA  # the sharing model's calibrated value
    prior_scale: float = PRIOR_SCALE
    beta_lower: float = 0.0  # contention never speeds a task up ...
    beta_upper: float = 2.0  # ... nor triples its run time beside one full-GPU co-tenant
    scale_lower: float = 0.3  # reported activity at least 30 % real ...
    scale_upper: float = 1.5  # ... and at most 1.5x under-stated
    min_observations: int = 10  # informative observations before anything leaves the prior
    prior_weight: float = 1.0  # the prior counts as this many observations' worth of evidence
    reject_at: float = 4.0  # residuals beyond this many robust standard deviations: left out
    window: int = 128  # only the most recent observations count
    huber_delta: float = 0.10  # residuals (log stretch) beyond ~10 % count linearly: outliers
    prior_confidence: float = 0.5  # how far the calibrated prior is trusted before observations

    def clip(self, beta: float, scale: float) -> tuple[float, float]:
        return (
            min(self.beta_upper, max(self.beta_lower, beta)),
            min(self.scale_upper, max(self.scale_lower, scale)),
        )


DEFAULT_INTERFERENCE_SETTINGS = InterferenceSettings()


@dataclass(frozen=True, slots=True)
class SpeedPrediction:
    """A predicted speed relative to solo (1.0 = as fast as alone), with a plausible range."""

    speed: float
    low: float
    high: float
    confidence: float

    @property
    def slowdown(self) -> float:
        return 1.0 / self.speed if self.speed > 0 else math.inf


def _huber_weight(residual: float, delta: float) -> float:
    a = abs(residual)
    return 1.0 if a <= delta else delta / a


def _huber_loss(residual: float, delta: float) -> float:
    a = abs(residual)
    return 0.5 * a * a if a <= delta else delta * (a - 0.5 * delta)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


Covariance = tuple[float, float, float]  # var(beta), cov(beta, scale), var(scale)


def _robust_fit(
    observations: Sequence[CollocationObservation], s: InterferenceSettings
) -> tuple[float, float, Covariance, int]:
    """Fit, then refit without the observations the first fit cannot explain (outliers).

    Outliers of this kind are one-sided (a try that stalled on I/O or was preempted runs longer,
    never faster) and even a Huber loss leans toward them; beyond ``reject_at`` robust standard
    deviations (at least ``3 * huber_delta``) an observation is left out of the second fit.
    Returns the coefficients, covariance and how many observations were left out.
    """
    beta, scale, cov = _huber_fit(observations, s)
    residuals = [math.log(o.stretch) - _log_stretch(o, beta, scale)[0] for o in observations]
    sigma = max(0.01, 1.4826 * _median([abs(r) for r in residuals]))
    cut = max(s.reject_at * sigma, 3.0 * s.huber_delta)
    kept = [o for o, r in zip(observations, residuals, strict=True) if abs(r) <= cut]
    if len(kept) == len(observations) or len(kept) < s.min_observations:
        return beta, scale, cov, 0
    beta, scale, cov = _huber_fit(kept, s)
    return beta, scale, cov, len(observations) - len(kept)


def _huber_fit(
    observations: Sequence[CollocationObservation], s: InterferenceSettings
) -> tuple[float, float, Covariance]:
    """Huber-weighted Gauss-Newton fit of (beta, scale) within bounds, the prior as pseudo-evidence.

    The prior's weight per coefficient is ``prior_weight`` times the average information one
    observation carries about it at the prior, so it is unit-free.  Returns the coefficients and
    their covariance (residual scale from the median absolute residual).
    """
    targets = [math.log(o.stretch) for o in observations]
    b0, k0 = s.prior_beta, s.prior_scale
    n = len(observations)
    info_b = info_k = 0.0
    for obs in observations:
        _, gb, gk = _log_stretch(obs, b0, k0)
        info_b += gb * gb
        info_k += gk * gk
    lam_b = max(1e-9, s.prior_weight * info_b / n)
    lam_k = max(1e-9, s.prior_weight * info_k / n)
    delta = s.huber_delta

    def objective(beta: float, scale: float) -> float:
        pairs = zip(observations, targets, strict=True)
        loss = sum(_huber_loss(t - _log_stretch(o, beta, scale)[0], delta) for o, t in pairs)
        return loss + 0.5 * (lam_b * (beta - b0) ** 2 + lam_k * (scale - k0) ** 2)

    beta, scale = b0, k0
    current = objective(beta, scale)
    damping = 1e-3  # Levenberg-Marquardt: raised when a step does not lower the loss
    for _ in range(60):
        a11 = a12 = a22 = g1 = g2 = 0.0
        for obs, target in zip(observations, targets, strict=True):
            pred, jb, jk = _log_stretch(obs, beta, scale)
            r = target - pred
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
    for obs, target in zip(observations, targets, strict=True):
        pred, jb, jk = _log_stretch(obs, beta, scale)
        residuals.append(target - pred)
        a11 += jb * jb
        a12 += jb * jk
        a22 += jk * jk
    a11 += lam_b
    a22 += lam_k
    sigma2 = max(0.01, 1.4826 * _median([abs(r) for r in residuals])) ** 2
    det = a11 * a22 - a12 * a12
    cov = (sigma2 * a22 / det, -sigma2 * a12 / det, sigma2 * a11 / det)
    return beta, scale, cov


def _log_speed_stderr(own: float, co_tenants: Sequence[float], beta: float, scale: float, cov: Covariance) -> float:
    gb, gk = _log_speed_gradient(own, sum(co_tenants), beta, scale)
    var = gb * gb * cov[0] + 2.0 * gb * gk * cov[1] + gk * gk * cov[2]
    return math.sqrt(max(0.0, var))


def _clip01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


@dataclass(frozen=True, slots=True)
class InterferenceFit:
    """The learned coefficients of one GPU model, and the observations they rest on.

    Immutable: :meth:`observe` returns a new fit.  ``count`` is every informative observation
    ever seen; ``observations`` the last ``settings.window`` of them (``outliers`` of which the
    fit left out).  ``covariance`` is None at
    the prior (its ranges are the bounds).  ``confidence``: the prior's trust before enough
    observations, then that of a typical prediction (over the kept observations' co-tenancies).
    """

    gpu_model: str
    beta: float = PRIOR_BETA
    activity_scale: float = PRIOR_SCALE
    covariance: Covariance | None = None
    confidence: float = DEFAULT_INTERFERENCE_SETTINGS.prior_confidence
    count: int = 0
    observations: tuple[CollocationObservation, ...] = ()
    settings: InterferenceSettings = field(default=DEFAULT_INTERFERENCE_SETTINGS, compare=False)
    outliers: int = 0  # kept observations the fit left out as unexplained

    @classmethod
    def prior(cls, gpu_model: str, settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> InterferenceFit:
        """A fit with no observations: the sharing model's coefficients."""
        return cls(
            gpu_model, settings.prior_beta, settings.prior_scale, None, settings.prior_confidence, 0, (), settings
        )

    @property
    def learned(self) -> bool:
        """Whether the coefficients have left the prior (enough observations)."""
        return self.covariance is not None

    def _range(self, value: float, var_index: int, lower: float, upper: float) -> tuple[float, float]:
        if self.covariance is None:
            return lower, upper
        half = 2.0 * math.sqrt(self.covariance[var_index])
        return max(lower, value - half), min(upper, value + half)

    @property
    def beta_range(self) -> tuple[float, float]:
        """About 95 % of plausible beta (the bounds at the prior)."""
        s = self.settings
        return self._range(self.beta, 0, s.beta_lower, s.beta_upper)

    @property
    def scale_range(self) -> tuple[float, float]:
        s = self.settings
        return self._range(self.activity_scale, 2, s.scale_lower, s.scale_upper)

    def observe(self, obs: CollocationObservation) -> InterferenceFit:
        """The fit with one more ended try; observations without co-tenants change nothing."""
        return self.observe_all((obs,))

    def observe_all(self, observations: Iterable[CollocationObservation]) -> InterferenceFit:
        """The fit after many observations (refits once)."""
        s = self.settings
        new = [o for o in observations if o.informative]
        if not new:
            return self
        kept = (*self.observations, *new)[-s.window :] if s.window > 0 else ()
        count = self.count + len(new)
        if len(kept) < s.min_observations:
            return replace(self.prior(self.gpu_model, s), count=count, observations=kept)
        beta, scale, cov, outliers = _robust_fit(kept, s)
        errors = []
        for o in kept:
            for seg in o.segments:
                errors.append(_log_speed_stderr(o.own_activity, seg.co_tenants, beta, scale, cov) ** 2)
        typical = math.sqrt(sum(errors) / len(errors))
        confidence = _clip01(1.0 - 4.0 * typical)
        return InterferenceFit(self.gpu_model, beta, scale, cov, confidence, count, kept, s, outliers)

    def speed(self, own: float, co_tenants: Sequence[float]) -> float:
        """Point prediction of speed relative to solo (cheap: no range)."""
        return speed(own, co_tenants, self.beta, self.activity_scale)

    def predict(self, own: float, co_tenants: Sequence[float]) -> SpeedPrediction:
        """Speed of a tenant with activity ``own`` beside ``co_tenants``, with range and confidence."""
        point = self.speed(own, co_tenants)
        if not co_tenants or sum(co_tenants) <= 0.0:
            return SpeedPrediction(point, point, point, 1.0 if self.learned else self.settings.prior_confidence)
        if self.covariance is None:
            s = self.settings
            low = speed(own, co_tenants, s.beta_upper, s.scale_upper)
            high = speed(own, co_tenants, s.beta_lower, s.scale_lower)
            return SpeedPrediction(point, low, high, s.prior_confidence)
        se = _log_speed_stderr(own, co_tenants, self.beta, self.activity_scale, self.covariance)
        return SpeedPrediction(
            point, point * math.exp(-2.0 * se), min(1.0, point * math.exp(2.0 * se)), _clip01(1 - 4 * se)
        )

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        """Plain data for the store and for display (JSON-ready)."""
        return {
            "gpu_model": self.gpu_model,
            "beta": self.beta,
            "beta_range": list(self.beta_range),
            "activity_scale": self.activity_scale,
            "activity_scale_range": list(self.scale_range),
            "confidence": self.confidence,
            "count": self.count,
            "outliers": self.outliers,
            "prior": {"beta": self.settings.prior_beta, "activity_scale": self.settings.prior_scale},
            "observations": [
                [o.stretch, o.own_activity, [[seg.share, list(seg.co_tenants)] for seg in o.segments]]
                for o in self.observations
            ],
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, object], settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS
    ) -> InterferenceFit:
        """Rebuild from :meth:`to_dict`, refitting the observations under ``settings`` (today's knobs)."""
        model = str(data.get("gpu_model", ""))
        raw = data.get("observations", [])
        observations = []
        if isinstance(raw, list):
            for item in raw:
                stretch, own, segs = item
                observations.append(
                    CollocationObservation(
                        float(stretch),
                        float(own),
                        tuple(Segment(float(share), tuple(float(a) for a in co)) for share, co in segs),
                    )
                )
        raw_count = data.get("count", len(observations))
        count = int(raw_count) if isinstance(raw_count, int | float | str) else len(observations)
        fit = cls.prior(model, settings).observe_all(observations)
        return replace(fit, count=max(count, len(fit.observations)))


def gpu_model_key(spec_name: str) -> str:
    """The key fits are kept under: the GPU model's name, case-folded and trimmed."""
    return spec_name.strip().lower()


@dataclass(frozen=True, slots=True)
class InterferenceModel:
    """One fit per GPU model; a model never seen uses the prior."""

    fits: Mapping[str, InterferenceFit] = field(default_factory=dict)
    settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS

    def fit_for(self, gpu_model: str) -> InterferenceFit:
        key = gpu_model_key(gpu_model)
        fit = self.fits.get(key)
        return fit if fit is not None else InterferenceFit.prior(key, self.settings)

    def observe(self, gpu_model: str, obs: CollocationObservation) -> InterferenceModel:
        """The model with one more ended try on a GPU of ``gpu_model``."""
        key = gpu_model_key(gpu_model)
        fit = self.fit_for(key).observe(obs)
        return InterferenceModel({**self.fits, key: fit}, self.settings)

    def to_dict(self) -> dict[str, object]:
        return {key: fit.to_dict() for key, fit in sorted(self.fits.items())}

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Mapping[str, object]], settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS
    ) -> InterferenceModel:
        fits = {gpu_model_key(k): InterferenceFit.from_dict({**v, "gpu_model": k}, settings) for k, v in data.items()}
        return cls(fits, settings)


__all__ = [
    "DEFAULT_INTERFERENCE_SETTINGS",
    "PRIOR_BETA",
    "PRIOR_SCALE",
    "CollocationObservation",
    "InterferenceFit",
    "InterferenceModel",
    "InterferenceSettings",
    "Segment",
    "SpeedPrediction",
    "gpu_model_key",
    "predicted_stretch",
    "slowdown",
    "speed",
]
