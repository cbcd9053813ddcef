"""Interference, learned: how much slower a task runs beside co-tenants, fitted per GPU model.

The functional form is the sharing model's (:mod:`carma_airflow.core.sharing`): a tenant with
solo SM activity ``a`` beside co-tenants whose activities sum to ``C`` (demand ``D = a + C``)
runs slower by

    slowdown = max(1, D) * (1 + beta * C)

and with no observations ``beta`` is the sharing model's (0.5), so the predictions are exactly
what ``SharingModel.slowdowns`` says.  Every ended try that had co-tenants is an observation:
its *stretch* (duration over its solo duration from history) against the co-tenants it had.
A try whose co-tenants changed during its run is described by segments (share of its run time,
co-tenant activities); under the model its stretch is then ``1 / sum(share_k / slowdown_k)``.

The fit is robust and bounded: a Huber loss on log-stretch residuals (a try that stalled on
I/O pulls linearly, not quadratically), ``beta`` clipped to ``[lower, upper]``, shrunk toward
the prior as if the prior were ``prior_weight`` observations, and left at the prior until
``min_observations`` informative observations are in.  Only the last ``window`` observations
count (a driver update changes a GPU's behaviour).  ``beta_low``/``beta_high`` are about two
standard errors either side; ``confidence`` is the share of the bounds' range they exclude.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from carma_airflow.core.sharing import SharingModel

PRIOR_BETA = SharingModel().beta


def slowdown(own: float, co_tenants: Iterable[float], beta: float) -> float:
    """Slowdown of a tenant with solo activity ``own`` beside ``co_tenants`` (1.0 = solo speed)."""
    contention = sum(co_tenants)
    return max(1.0, own + contention) * (1.0 + beta * contention)


def speed(own: float, co_tenants: Iterable[float], beta: float) -> float:
    """Progress rate relative to solo (1 / slowdown)."""
    return 1.0 / slowdown(own, co_tenants, beta)


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a try's run with one set of co-tenants: its share of the run time, their activities."""

    share: float
    co_tenants: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class CollocationObservation:
    """One ended try: its stretch (run time over solo run time) and what it shared the GPU with.

    ``segments``' shares are of the try's wall time and should sum to 1 (they are normalised).
    A try that never shared its GPU says nothing about ``beta`` and is ignored by the fit.
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


def predicted_stretch(obs: CollocationObservation, beta: float) -> float:
    """The stretch the model predicts for an observation's co-tenancy at ``beta``."""
    total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
    rate = sum(max(0.0, s.share) / total * speed(obs.own_activity, s.co_tenants, beta) for s in obs.segments)
    return 1.0 / rate


def _log_stretch_and_slope(obs: CollocationObservation, beta: float) -> tuple[float, float]:
    """log predicted stretch and its derivative in beta."""
    total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
    rate = 0.0
    drate = 0.0  # d rate / d beta
    for s in obs.segments:
        share = max(0.0, s.share) / total
        contention = sum(s.co_tenants)
        sat = max(1.0, obs.own_activity + contention)
        inner = 1.0 + beta * contention
        rate += share / (sat * inner)
        drate -= share * contention / (sat * inner * inner)
    return -math.log(rate), -drate / rate


@dataclass(frozen=True, slots=True)
class InterferenceSettings:
    """How the interference coefficient is learned; every number a knob."""

    prior_beta: float = PRIOR_BETA  # the sharing model's calibrated value
    lower: float = 0.0  # hard bounds: contention never speeds a task up, and never more than 2x per unit
    upper: float = 2.0
    min_observations: int = 10  # informative observations before beta leaves the prior
    prior_weight: float = 5.0  # the prior counts as this many observations once beta may move
    window: int = 128  # only the most recent observations count
    huber_delta: float = 0.10  # residuals (log stretch) beyond ~10 % count linearly: outliers
    prior_confidence: float = 0.5  # how far the calibrated prior is trusted before observations

    def clip(self, beta: float) -> float:
        return min(self.upper, max(self.lower, beta))


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


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def _robust_fit(
    observations: Sequence[CollocationObservation], start: float, s: InterferenceSettings
) -> tuple[float, float]:
    """Huber-weighted Gauss-Newton fit of beta in [lower, upper]; (beta, its standard error)."""
    beta = s.clip(start)
    targets = [math.log(o.stretch) for o in observations]
    for _ in range(30):
        num = den = 0.0
        for obs, target in zip(observations, targets, strict=True):
            pred, slope = _log_stretch_and_slope(obs, beta)
            r = target - pred
            w = _huber_weight(r, s.huber_delta)
            num += w * slope * r
            den += w * slope * slope
        if den <= 0.0:
            break
        new = s.clip(beta + num / den)
        if abs(new - beta) < 1e-7:
            beta = new
            break
        beta = new
    residuals = []
    info = 0.0
    for obs, target in zip(observations, targets, strict=True):
        pred, slope = _log_stretch_and_slope(obs, beta)
        residuals.append(target - pred)
        info += slope * slope
    scale = max(0.01, 1.4826 * _median([abs(r) for r in residuals]))
    stderr = scale / math.sqrt(info) if info > 0 else math.inf
    return beta, stderr


@dataclass(frozen=True, slots=True)
class InterferenceFit:
    """The learned coefficient of one GPU model, and the observations it rests on.

    Immutable: :meth:`observe` returns a new fit.  ``count`` is every informative observation
    ever seen; ``observations`` the last ``settings.window`` of them.
    """

    gpu_model: str
    beta: float = PRIOR_BETA
    beta_low: float = 0.0
    beta_high: float = 2.0
    count: int = 0
    observations: tuple[CollocationObservation, ...] = ()
    settings: InterferenceSettings = field(default=DEFAULT_INTERFERENCE_SETTINGS, compare=False)

    @classmethod
    def prior(cls, gpu_model: str, settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> InterferenceFit:
        """A fit with no observations: the sharing model's beta, range the whole bounds."""
        return cls(gpu_model, settings.prior_beta, settings.lower, settings.upper, 0, (), settings)

    @property
    def learned(self) -> bool:
        """Whether beta has left the prior (enough observations)."""
        return len(self.observations) >= self.settings.min_observations

    @property
    def confidence(self) -> float:
        """0..1: the calibrated prior's trust before enough observations, then how narrow beta's range is."""
        s = self.settings
        if not self.learned:
            return s.prior_confidence
        span = s.upper - s.lower
        return 1.0 if span <= 0 else max(0.0, 1.0 - (self.beta_high - self.beta_low) / span)

    def observe(self, obs: CollocationObservation) -> InterferenceFit:
        """The fit with one more ended try; observations without co-tenants change nothing."""
        if not obs.informative:
            return self
        s = self.settings
        kept = (*self.observations, obs)[-s.window :] if s.window > 0 else ()
        return self._refit(kept, self.count + 1)

    def observe_all(self, observations: Iterable[CollocationObservation]) -> InterferenceFit:
        """The fit after many observations (refits once)."""
        s = self.settings
        new = [o for o in observations if o.informative]
        if not new:
            return self
        kept = (*self.observations, *new)[-s.window :] if s.window > 0 else ()
        return self._refit(kept, self.count + len(new))

    def _refit(self, kept: tuple[CollocationObservation, ...], count: int) -> InterferenceFit:
        s = self.settings
        if len(kept) < s.min_observations:
            return InterferenceFit(self.gpu_model, s.prior_beta, s.lower, s.upper, count, kept, s)
        fitted, stderr = _robust_fit(kept, self.beta, s)
        n = float(len(kept))
        weight = n / (n + s.prior_weight)
        beta = s.clip(weight * fitted + (1.0 - weight) * s.prior_beta)
        half = 2.0 * stderr * weight  # the shrunk estimate varies only as much as its data part
        low, high = s.clip(beta - half), s.clip(beta + half)
        return InterferenceFit(self.gpu_model, beta, low, high, count, kept, s)

    def predict(self, own: float, co_tenants: Sequence[float]) -> SpeedPrediction:
        """Speed of a tenant with activity ``own`` beside ``co_tenants``; range from beta's range."""
        return SpeedPrediction(
            speed(own, co_tenants, self.beta),
            speed(own, co_tenants, self.beta_high),
            speed(own, co_tenants, self.beta_low),
            self.confidence,
        )

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        """Plain data for the store and for display (JSON-ready)."""
        return {
            "gpu_model": self.gpu_model,
            "beta": self.beta,
            "beta_low": self.beta_low,
            "beta_high": self.beta_high,
            "confidence": self.confidence,
            "count": self.count,
            "prior_beta": self.settings.prior_beta,
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
        base = cls.prior(model, settings)
        fit = base.observe_all(observations)
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
