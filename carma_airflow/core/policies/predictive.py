"""Predictive: collocate where the GPU's summed progress rate rises most, by the learned model.

For each candidate GPU the policy predicts, with the interference model learned for the GPU's
model (:mod:`carma_airflow.core.interference`) and the tasks' learned activities
(:mod:`carma_airflow.core.activity`), every tenant's speed relative to solo with and without
the newcomer.  The *gain* is the change in their sum: an idle GPU gains 1.0 (the newcomer at
full speed); a GPU whose tenants would all slow down may gain little or lose.  The newcomer's
own predicted slowdown is part of the gain and has its own limit.

* Candidates are ordered by gain, compared in steps of ``gain_step / confidence`` (the less
  sure the prediction, the coarser the comparison), most free memory first within a step.
* Collocation "pays" when the gain is at least ``min_gain`` and the newcomer's predicted
  slowdown at most ``max_slowdown``; GPUs where it does not pay sort after those where it does,
  and :meth:`Predictive.refuses` says why, for a placer that lets a policy refuse a GPU.
* Unsure (the newcomer's activity or the interference fit below ``min_confidence``): no
  refusals, and the order of the default policy (``fallback="interference-aware"``: projected
  SM activity in bands of ``fallback_band``, then tightest memory fit), so a wrong or empty
  model costs nothing against it; ``fallback="most-free-memory"`` is the paper's best policy's
  order instead (measured against each other in ``bench/learned_interference.py``).
* The paper's rules stay: idle GPUs first, the memory checks and the risk rule of the placer,
  reserved memory of unseen tenants counted (no lock), at most ``max_tenants`` per GPU.

Tenants placed earlier in the same pass carry no activity in the placer's facts (only their
labels): they count at the activity prior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from carma_airflow.core.activity import (
    DEFAULT_ACTIVITY_SETTINGS,
    ActivityEstimate,
    ActivitySettings,
    unknown_activity,
)
from carma_airflow.core.decision import Reason
from carma_airflow.core.interference import InterferenceFit, InterferenceModel, SpeedPrediction
from carma_airflow.core.policies.base import GpuFacts, Policy, Refusal
from carma_airflow.core.task import TaskRequest


@dataclass(frozen=True, slots=True)
class PredictiveSettings:
    """The policy's knobs."""

    min_gain: float = 0.25  # collocate only where the summed progress rate rises by this much
    max_slowdown: float = 2.5  # ... and the newcomer runs at most this much slower than alone
    min_confidence: float = 0.3  # below: most-free-memory order, no refusals
    gain_step: float = 0.05  # gains closer than this (at full confidence) tie; memory decides
    max_tenants: int = 3
    fallback: str = "interference-aware"  # order while unsure: or "most-free-memory"
    fallback_band: float = 0.25  # interference-aware's activity band

    def __post_init__(self) -> None:
        if self.fallback not in _FALLBACKS:
            raise ValueError(f"fallback must be one of {', '.join(_FALLBACKS)}, got {self.fallback!r}")


_FALLBACKS = ("interference-aware", "most-free-memory")


DEFAULT_PREDICTIVE_SETTINGS = PredictiveSettings()


@dataclass(frozen=True, slots=True)
class Assessment:
    """What the policy predicts for one request on one GPU."""

    gain: float  # summed progress rate after minus before
    rate_before: float
    rate_after: float
    newcomer: SpeedPrediction
    neighbour: str | None  # label of the heaviest co-tenant, for reason texts
    confidence: float  # the least sure of: newcomer, tenants, interference fit
    sure: bool  # newcomer and fit both at least min_confidence: the prediction decides
    pays: bool

    def describe(self) -> str:
        """Reason text: "predicted 1.18x slower beside train_bert; summed rate 1.00 -> 1.62 ..."."""
        if self.neighbour is None:
            head = "alone: full speed"
        else:
            head = f"predicted {self.newcomer.slowdown:.2f}x slower beside {self.neighbour}"
        return (
            f"{head}; summed rate {self.rate_before:.2f} -> {self.rate_after:.2f} ({self.gain:+.2f}), "
            f"confidence {self.confidence:.2f}"
        )


class Predictive(Policy):
    name = "predictive"
    aliases = ("learned", "pred")
    description = (
        "idle GPUs first; then the GPU whose summed progress rate rises most with the newcomer, by the "
        "learned activities and interference; the default's order while the model is unsure"
    )
    uses_lock = False
    uses_reservations = True
    stable_keys = False  # the order depends on the newcomer's activity
    refuses_gpus = True

    def __init__(
        self,
        model: InterferenceModel | None = None,
        settings: PredictiveSettings = DEFAULT_PREDICTIVE_SETTINGS,
        activity: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS,
    ) -> None:
        self.model = model if model is not None else InterferenceModel()
        self.settings = settings
        self.max_tenants = settings.max_tenants
        self._unknown = unknown_activity(activity)
        self._fits: dict[str, InterferenceFit] = {}  # per spec name, for the model held now
        self._fits_of: InterferenceModel = self.model

    def use_model(self, model: InterferenceModel) -> None:
        """Decide with a newer learned model from now on (the driver calls it as tries end)."""
        self.model = model

    def _fit(self, spec_name: str) -> InterferenceFit:
        if self._fits_of is not self.model:
            self._fits = {}
            self._fits_of = self.model
        fit = self._fits.get(spec_name)
        if fit is None:
            fit = self._fits[spec_name] = self.model.fit_for(spec_name)
        return fit

    # -- the prediction --------------------------------------------------------------------
    def _tenant_activities(self, facts: GpuFacts) -> list[tuple[str, ActivityEstimate]]:
        unknown = self._unknown
        tenants = [(t.label, t.activity or unknown) for t in facts.state.tenants]
        if facts.joined:
            tenants += [(label, unknown) for label in facts.joined]
        return tenants

    @staticmethod
    def _rates(fit: InterferenceFit, acts: list[float], own: float) -> tuple[float, float, float]:
        """Summed speed of the tenants before, after (newcomer included), and the newcomer's speed."""
        beta, scale = fit.beta, fit.activity_scale
        total = sum(acts)
        before = after = 0.0
        grown = total + own
        for a in acts:  # the sharing rule inlined: the hot loop of a decision
            before += 1.0 / (max(1.0, scale * total) * (1.0 + beta * scale * (total - a)))
            after += 1.0 / (max(1.0, scale * grown) * (1.0 + beta * scale * (grown - a)))
        mine = 1.0 / (max(1.0, scale * grown) * (1.0 + beta * scale * total))
        return before, after + mine, mine

    def _pays(self, has_tenants: bool, gain: float, mine: float) -> bool:
        s = self.settings
        return not has_tenants or (gain >= s.min_gain and 1.0 / mine <= s.max_slowdown)

    def assess(self, facts: GpuFacts, request: TaskRequest) -> Assessment:
        """Predicted effect of placing ``request`` on this GPU."""
        fit = self._fit(facts.state.spec.name)
        newcomer = request.activity or self._unknown
        tenants = self._tenant_activities(facts)
        acts = [a.sm_activity for _, a in tenants]
        before, after, _ = self._rates(fit, acts, newcomer.sm_activity)
        mine = fit.predict(newcomer.sm_activity, acts)
        confidence = min([newcomer.confidence, mine.confidence, *(a.confidence for _, a in tenants)])
        sure = min(newcomer.confidence, fit.confidence) >= self.settings.min_confidence
        gain = after - before
        neighbour = max(tenants, key=lambda t: t[1].sm_activity)[0] if tenants else None
        pays = self._pays(bool(tenants), gain, mine.speed)
        return Assessment(gain, before, after, mine, neighbour, confidence, sure, pays)

    # -- the policy hooks ------------------------------------------------------------------
    def _fallback_key(self, facts: GpuFacts) -> tuple[float, ...]:
        s = self.settings
        if s.fallback == "most-free-memory":
            return (0.0, 0.0, -float(facts.usable_free_mib), float(facts.index))
        band = float(int(facts.smact / s.fallback_band)) if s.fallback_band > 0 else 0.0
        return (0.0, band, float(facts.usable_free_mib), float(facts.index))

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        free_first = -float(facts.usable_free_mib)
        newcomer = request.activity
        min_confidence = self.settings.min_confidence
        if newcomer is None or newcomer.confidence < min_confidence:
            return self._fallback_key(facts)  # no prediction without the newcomer
        fit = self._fit(facts.state.spec.name)
        sureness = min(newcomer.confidence, fit.confidence)
        if sureness < min_confidence:
            return self._fallback_key(facts)
        acts = [a.sm_activity for _, a in self._tenant_activities(facts)]
        before, after, mine = self._rates(fit, acts, newcomer.sm_activity)
        gain = after - before
        band = -float(math.floor(gain * sureness / self.settings.gain_step))  # steps of gain_step / sureness
        return (0.0 if self._pays(bool(acts), gain, mine) else 1.0, band, free_first, float(facts.index))

    def refuses(self, facts: GpuFacts, request: TaskRequest) -> Refusal | None:
        """Why collocating ``request`` here does not pay, or None (also None while unsure)."""
        a = self.assess(facts, request)
        if not a.sure or a.pays:
            return None
        s = self.settings
        if a.newcomer.slowdown > s.max_slowdown:
            return Refusal(Reason.INTERFERENCE, f"{a.describe()}: over the {s.max_slowdown:.2f}x slowdown limit")
        return Refusal(Reason.INTERFERENCE, f"{a.describe()}: gain under {s.min_gain:+.2f}")

    def describe(self, facts: GpuFacts, request: TaskRequest) -> str:
        """Reason text for choosing this GPU (prediction, or that the model was unsure)."""
        a = self.assess(facts, request)
        if a.sure:
            return a.describe()
        order = "most free memory first" if self.settings.fallback == "most-free-memory" else "default order"
        return f"model unsure (confidence {a.confidence:.2f}): {order}; {a.describe()}"


__all__ = ["DEFAULT_PREDICTIVE_SETTINGS", "Assessment", "Predictive", "PredictiveSettings"]
