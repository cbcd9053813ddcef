"""Interference, learned: how much slower a task runs beside co-tenants, fitted per GPU model.

The functional form is the sharing model's (:mod:`carma_airflow.core.sharing`), with two
coefficients.  A tenant whose reported solo SM activity is ``a``, beside co-tenants whose
reported activities sum to ``C``, runs slower by

    slowdown = max(1, k * (a + C)) / max(1, k * a) * (1 + beta * k * C)

(1.0 alone: a try alone on its GPU runs at its solo speed). ``beta`` is contention below saturation;
``k`` (the *activity scale*) is how much of the reported activity is real demand (NVML busy time
over-states it: a job that leaves most SMs idle reads near 100 %). With no observations ``beta`` is
the cold prior's (0.1, mild: see ``COLD_PRIOR_BETA``) and ``k = 1``, with a wide range and a low
confidence.

Every ended try that had co-tenants is an observation: its *stretch* (duration over its solo
duration from history) against the co-tenants it had.  A try whose co-tenants changed during its
run is described by segments (share of its run time, co-tenant activities); under the model its
stretch is then ``1 / sum(share_j / slowdown_j)``.

The fit is robust and bounded: a Huber loss on log-stretch residuals (a try that stalled on
I/O pulls linearly, not quadratically), both coefficients clipped to hard bounds, the prior
counted as ``prior_weight`` observations' worth of evidence (so ``k`` and ``beta`` stay put
where the data cannot tell them apart), and nothing moves until ``min_observations``
informative observations are in.  Only the last ``window`` observations count (a driver update
changes a GPU's behaviour).  ``beta_range``/``scale_range`` are about two standard errors of
the coefficients either side.

Over the pooled fit, per task type: its sensitivity and the pressure it puts on others
(:mod:`carma_airflow.core.task_terms`), shrunk toward the pooled fit, for observations that name
their task types.  A prediction's ``low``/``high`` is a prediction interval for one try's speed:
``interval_level`` (90 %) of the fit's leave-one-out residuals at the prediction's own residual
scale (its task types, the contention it predicts: :mod:`carma_airflow.core.interference_spread`),
widened for task types it has not seen; at the prior, the bounds.  **Confidence** is the
probability that the speed is within +-5 % of the prediction, counted on those residuals at that
scale (at the prior: ``prior_confidence``), so it tells the predictions likely to land close from
the others; a fit's ``confidence`` is that of a typical observation.  ``bench/interference_eval.py``
checks both on held-out measured pairs, with the hit rate per fifth of predictions by confidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from carma_airflow.core.interference_estimate import (
    COLD_PRIOR_BETA,
    DEFAULT_INTERFERENCE_SETTINGS,
    Covariance,
    InterferenceSettings,
    robust_fit,
)
from carma_airflow.core.interference_form import (
    PRIOR_BETA,
    PRIOR_SCALE,
    CollocationObservation,
    Segment,
    log_saturation,
    predicted_stretch,
    slowdown,
    speed,
)
from carma_airflow.core.task_terms import TaskTerms, Term, fit_terms

# a prediction's range of log speed is held within +-this about the point: a fit on wild tries
# (residuals of log speed scattered by 20 and more: a try timed against another model's run, a
# stall) widens its quantiles past what ``math.exp`` can take (about 709), which raised in the
# placement pass; e**20 (about 5e8) either way already says the speed is not known
MAX_LOG_RANGE = 20.0


class SpeedPrediction(NamedTuple):
    """A predicted speed relative to solo (1.0 = as fast as alone), with a plausible range.  A
    named tuple, not a frozen dataclass: a placement pass makes thousands (tuple's constructor)."""

    speed: float
    low: float
    high: float
    confidence: float

    @property
    def slowdown(self) -> float:
        return 1.0 / self.speed if self.speed > 0 else math.inf


@dataclass(frozen=True, slots=True)
class InterferenceFit:
    """The learned coefficients of one GPU model, and the observations they rest on.

    Immutable: :meth:`observe` returns a new fit.  ``count`` is every informative observation
    ever seen; ``observations`` the last ``settings.window`` of them (``outliers`` of which the
    fit left out).  ``covariance`` is None at the prior (its ranges are the bounds).
    ``terms``: per-task terms and the residual scatter (None at the prior).  ``confidence``: the
    prior's before enough observations, then the share of the fit's leave-one-out predictions
    within +-5 %.
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
    terms: TaskTerms | None = field(default=None, compare=False)

    @classmethod
    def prior(cls, gpu_model: str, settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> InterferenceFit:
        """A fit with no observations: the cold prior (``settings.cold_beta``, mild and unsure)."""
        return cls(
            gpu_model, settings.cold_beta, settings.prior_scale, None, settings.prior_confidence, 0, (), settings
        )

    @property
    def learned(self) -> bool:
        """Whether the coefficients have left the prior (enough observations)."""
        return self.covariance is not None

    def known_types(self) -> frozenset[str]:
        """The task types :meth:`predict` tells apart: those some term or residual scale names.
        Any other (non-empty) type is predicted as every other such type is, to the bit."""
        t = self.terms
        if t is None:
            return frozenset()
        scales = [s for s in (t.scale, t.unseen) if s is not None]
        return frozenset().union(t.sensitivity, t.pressure, *(s.own for s in scales), *(s.partner for s in scales))

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
        beta, scale, cov, outliers = robust_fit(kept, s)
        fitted = kept if s.task_terms else tuple(_anonymous(o) for o in kept)
        terms = fit_terms(fitted, beta, scale, reject_at=s.reject_at, huber_delta=s.huber_delta)
        confidence = terms.spread(0.0, 0.0, s.interval_level)[2]
        return InterferenceFit(
            self.gpu_model, beta, scale, cov, confidence, count, kept, s, max(outliers, terms.outliers), terms
        )

    def speed(self, own: float, co_tenants: Sequence[float]) -> float:
        """Point prediction of speed relative to solo (cheap: no range)."""
        return speed(own, co_tenants, self.beta, self.activity_scale)

    def predict(
        self,
        own: float,
        co_tenants: Sequence[float],
        task: str | None = None,
        co_tasks: Sequence[str | None] = (),
    ) -> SpeedPrediction:
        """Speed of a tenant with activity ``own`` beside ``co_tenants``, with its prediction
        interval and confidence.  ``task``/``co_tasks``: the task types, where known (their terms;
        an unknown type gets the pooled fit and a wider interval)."""
        contention = sum(co_tenants)
        if not co_tenants or contention <= 0.0:
            point = self.speed(own, co_tenants)
            return SpeedPrediction(point, point, point, 1.0 if self.learned else self.settings.prior_confidence)
        s = self.settings
        if self.covariance is None or self.terms is None:
            point = self.speed(own, co_tenants)
            low = speed(own, co_tenants, s.beta_upper, s.scale_upper)
            high = speed(own, co_tenants, s.beta_lower, s.scale_lower)
            return SpeedPrediction(point, low, high, s.prior_confidence)
        beta, scale = self.beta, self.activity_scale
        g = math.log1p(beta * scale * contention)
        multiplier, variance = self.terms.multiplier(task, co_tasks, co_tenants)
        point = math.exp(-log_saturation(own, contention, scale) - g * multiplier)
        lo, hi, confidence = self.terms.interval(g, multiplier, variance, s.interval_level, task, co_tasks, co_tenants)
        lo, hi = max(lo, -MAX_LOG_RANGE), min(hi, MAX_LOG_RANGE)
        # of a try: noise too.  The range holds the point: residuals all of one sign (a fit on alike
        # tries that all ran faster than it says) would put it beside the point, and the caution
        # rule, which pulls a speed toward the low end, would then make the speed faster
        return SpeedPrediction(point, point * math.exp(min(lo, 0.0)), point * math.exp(max(hi, 0.0)), confidence)

    def task_terms(self) -> dict[str, dict[str, float | int]]:
        """Per task type: its sensitivity and pressure multipliers (1.0: the pooled fit) and how
        many observations each rests on."""
        if self.terms is None:
            return {}
        t = self.terms
        out: dict[str, dict[str, float | int]] = {}
        for name in sorted({*t.sensitivity, *t.pressure}):
            u = t.sensitivity.get(name, Term(0.0, t.tau2_sensitivity, 0))
            v = t.pressure.get(name, Term(0.0, t.tau2_pressure, 0))
            out[name] = {
                "sensitivity": 1.0 + u.value,
                "pressure": 1.0 + v.value,
                "n_own": u.count,
                "n_partner": v.count,
            }
        return out

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
            "prior": {"beta": self.settings.cold_beta, "activity_scale": self.settings.prior_scale},
            "interval_level": self.settings.interval_level,
            "tasks": self.task_terms(),
            "observations": [
                [
                    o.stretch,
                    o.own_activity,
                    [[seg.share, list(seg.co_tenants), list(seg.co_tasks)] for seg in o.segments],
                    o.task,
                ]
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
            for item in raw:  # [stretch, own, segments] (before task terms) or [..., task]
                stretch, own, segs = item[:3]
                task = str(item[3]) if len(item) > 3 else ""
                segments = []
                for seg in segs:
                    names = tuple(str(n) for n in seg[2]) if len(seg) > 2 else ()
                    segments.append(Segment(float(seg[0]), tuple(float(a) for a in seg[1]), names))
                observations.append(CollocationObservation(float(stretch), float(own), tuple(segments), task))
        raw_count = data.get("count", len(observations))
        count = int(raw_count) if isinstance(raw_count, int | float | str) else len(observations)
        fit = cls.prior(model, settings).observe_all(observations)
        return replace(fit, count=max(count, len(fit.observations)))


def _anonymous(obs: CollocationObservation) -> CollocationObservation:
    """The observation without task names (the pooled fit's scatter only)."""
    return CollocationObservation(
        obs.stretch, obs.own_activity, tuple(Segment(s.share, s.co_tenants) for s in obs.segments)
    )


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
    "COLD_PRIOR_BETA",
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
