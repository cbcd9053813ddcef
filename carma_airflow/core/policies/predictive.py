"""Predictive: collocate where the GPU's summed progress rate rises most, by the learned model.

For each candidate GPU the policy predicts, with the interference model learned for the GPU's
model (:mod:`carma_airflow.core.interference`) and the tasks' learned activities
(:mod:`carma_airflow.core.activity`), every tenant's speed relative to solo with and without
the newcomer.  The *gain* is the change in their sum: an idle GPU gains 1.0 (the newcomer at
full speed); a GPU whose tenants would all slow down may gain little or lose.  The newcomer's
own predicted slowdown is part of the gain and has its own limit.

* Every speed is predicted with the task types' own terms where the fit has them (their
  sensitivity and pressure, :mod:`carma_airflow.core.task_terms`) and with a prediction interval.
  The *lower end* of the gain sums the lower ends of the tenants' and the newcomer's speeds (a
  pessimistic bound: each at the low end of its 90 % interval).
* Candidates are ordered by the lower end of the gain, in steps of ``gain_step``, most free
  memory first within a step.
* Collocation "pays" when the lower end of the gain is at least ``min_gain`` and the newcomer's
  slowdown at the low end of its interval at most ``max_slowdown``; GPUs where it does not pay
  sort after those where it does, and :meth:`Predictive.refuses` says why, for a placer that lets
  a policy refuse a GPU.
* Unsure (the newcomer's activity below ``min_confidence``, or the GPU model's fit still at its
  cold prior): no refusals, and the order of the default policy (``fallback="interference-aware"``: projected
  SM activity in bands of ``fallback_band``, then tightest memory fit), so a wrong or empty
  model costs nothing against it; ``fallback="most-free-memory"`` is the paper's best policy's
  order instead (measured against each other in ``bench/learned_interference.py``).
* The paper's risk rule stays the rule while the model is unsure; with ``override_risk`` a
  collocation whose lower end of the gain pays may go to a GPU the rule calls high-risk (the
  rule then lives in :meth:`Predictive.refuses`, with its own reason).
* The paper's rules stay: idle GPUs first, the memory checks and (by default) the risk rule,
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
from carma_airflow.core.filtering import Rejection
from carma_airflow.core.interference import InterferenceFit, InterferenceModel, SpeedPrediction
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.task import TaskRequest, task_type


@dataclass(frozen=True, slots=True)
class PredictiveSettings:
    """The policy's knobs."""

    min_gain: float = 0.25  # collocate only where the summed progress rate rises by this much
    max_slowdown: float = 2.5  # ... and the newcomer runs at most this much slower than alone
    min_confidence: float = 0.3  # the newcomer's activity below this: the fallback order, no refusals
    gain_step: float = 0.05  # gains closer than this (at full confidence) tie; memory decides
    max_tenants: int = 3
    fallback: str = "interference-aware"  # order while unsure: or "most-free-memory"
    fallback_band: float = 0.25  # interference-aware's activity band
    # the paper's risk rule refuses a busy GPU; True: where the fit is learned and the lower end of
    # the gain pays, the prediction overrides it (while unsure the rule stays); measured both
    override_risk: bool = False

    def __post_init__(self) -> None:
        if self.fallback not in _FALLBACKS:
            raise ValueError(f"fallback must be one of {', '.join(_FALLBACKS)}, got {self.fallback!r}")


_FALLBACKS = ("interference-aware", "most-free-memory")


DEFAULT_PREDICTIVE_SETTINGS = PredictiveSettings()


@dataclass(frozen=True, slots=True)
class Assessment:
    """What the policy predicts for one request on one GPU."""

    gain: float  # summed progress rate after minus before (point predictions)
    rate_before: float
    rate_after: float
    newcomer: SpeedPrediction
    neighbour: str | None  # label of the heaviest co-tenant, for reason texts
    confidence: float  # the least sure of: the activities, and the newcomer's speed (P within +-5 %)
    sure: bool  # the newcomer's activity sure and the fit learned: the prediction decides
    pays: bool
    gain_low: float = 0.0  # the gain with every speed at the low end of its interval

    def describe(self) -> str:
        """Reason text: "predicted 1.18x slower beside train_bert; summed rate 1.00 -> 1.62 ..."."""
        if self.neighbour is None:
            head = "alone: full speed"
        else:
            head = f"predicted {self.newcomer.slowdown:.2f}x slower beside {self.neighbour}"
        return (
            f"{head}; summed rate {self.rate_before:.2f} -> {self.rate_after:.2f} ({self.gain:+.2f}, "
            f"at worst {self.gain_low:+.2f}), confidence {self.confidence:.2f}"
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
        self.checks_risk = not settings.override_risk  # overridden: refuses() applies the rule

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
    def _rates(
        fit: InterferenceFit, tenants: list[tuple[str, float]], own: float, name: str
    ) -> tuple[float, float, float, SpeedPrediction]:
        """Summed speed of the tenants before, after (newcomer included; point and low end), and
        the newcomer's predicted speed.  ``tenants``: (task type, activity)."""
        acts = [a for _, a in tenants]
        names = [n for n, _ in tenants]
        before = after = low = 0.0
        for i, (tname, a) in enumerate(tenants):
            others = acts[:i] + acts[i + 1 :]
            other_names = names[:i] + names[i + 1 :]
            before += fit.predict(a, others, tname, other_names).speed
            p = fit.predict(a, [*others, own], tname, [*other_names, name])
            after += p.speed
            low += p.low
        mine = fit.predict(own, acts, name, names)
        return before, after + mine.speed, low + mine.low, mine

    def _pays(self, has_tenants: bool, gain_low: float, mine: SpeedPrediction) -> bool:
        s = self.settings
        return not has_tenants or (gain_low >= s.min_gain and mine.low > 0 and 1.0 / mine.low <= s.max_slowdown)

    def _sure(self, newcomer: ActivityEstimate | None, fit: InterferenceFit) -> bool:
        return newcomer is not None and newcomer.confidence >= self.settings.min_confidence and fit.learned

    def assess(self, facts: GpuFacts, request: TaskRequest) -> Assessment:
        """Predicted effect of placing ``request`` on this GPU."""
        fit = self._fit(facts.state.spec.name)
        newcomer = request.activity or self._unknown
        tenants = self._tenant_activities(facts)
        typed = [(task_type(label), a.sm_activity) for label, a in tenants]
        before, after, after_low, mine = self._rates(fit, typed, newcomer.sm_activity, task_type(request.label))
        confidence = min([newcomer.confidence, mine.confidence, *(a.confidence for _, a in tenants)])
        sure = self._sure(request.activity, fit)
        gain = after - before
        neighbour = max(tenants, key=lambda t: t[1].sm_activity)[0] if tenants else None
        pays = self._pays(bool(tenants), after_low - before, mine)
        return Assessment(gain, before, after, mine, neighbour, confidence, sure, pays, after_low - before)

    # -- the policy hooks ------------------------------------------------------------------
    def _fallback_key(self, facts: GpuFacts) -> tuple[float, ...]:
        s = self.settings
        if s.fallback == "most-free-memory":
            return (0.0, 0.0, -float(facts.usable_free_mib), float(facts.index))
        band = float(int(facts.smact / s.fallback_band)) if s.fallback_band > 0 else 0.0
        return (0.0, band, float(facts.usable_free_mib), float(facts.index))

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        newcomer = request.activity
        fit = self._fit(facts.state.spec.name)
        if not self._sure(newcomer, fit):
            return self._fallback_key(facts)  # no prediction without the newcomer or a learned fit
        assert newcomer is not None
        typed = [(task_type(label), a.sm_activity) for label, a in self._tenant_activities(facts)]
        before, _, after_low, mine = self._rates(fit, typed, newcomer.sm_activity, task_type(request.label))
        gain_low = after_low - before
        band = -float(math.floor(gain_low / self.settings.gain_step))
        pays = self._pays(bool(typed), gain_low, mine)
        return (0.0 if pays else 1.0, band, -float(facts.usable_free_mib), float(facts.index))

    def refuses(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        """Why collocating ``request`` here does not pay, or None (also None while unsure): the
        paper's risk rule where the model is unsure or the collocation does not pay (with
        ``override_risk``), the slowdown limit, the collocation floor (``min_gain``), each with
        its numbers."""
        a = self.assess(facts, request)
        s = self.settings
        if s.override_risk and facts.high_risk and facts.tenants and not (a.sure and a.pays):
            return Rejection(
                "risk-rule",
                Reason.RISK,
                "SM activity {have:.2f}, occupancy {occupancy:.2f}, DRAM {dram:.2f}"
                + ("" if a.sure else " (model unsure: the risk rule holds)"),
                "activity",
                have=facts.smact,
                more=(("occupancy", facts.smocc), ("dram", facts.drama)),
            )
        if not a.sure or a.pays:
            return None
        prediction = (("prediction", a.describe()),)
        if a.newcomer.low <= 0 or 1.0 / a.newcomer.low > s.max_slowdown:
            return Rejection(
                "slowdown-limit",
                Reason.INTERFERENCE,
                "{prediction}: may pass the {limit:.2f}x slowdown limit",
                "x",
                have=1.0 / a.newcomer.low if a.newcomer.low > 0 else float("inf"),
                limit=s.max_slowdown,
                more=prediction,
            )
        return Rejection(
            "collocation-floor",
            Reason.INTERFERENCE,
            "{prediction}: gain may be under {limit:+.2f}",
            "summed rate",
            have=a.gain_low,
            limit=s.min_gain,
            more=prediction,
        )

    def describe(self, facts: GpuFacts, request: TaskRequest) -> str:
        """Reason text for choosing this GPU (prediction, or that the model was unsure)."""
        a = self.assess(facts, request)
        if a.sure:
            return a.describe()
        order = "most free memory first" if self.settings.fallback == "most-free-memory" else "default order"
        return f"model unsure (confidence {a.confidence:.2f}): {order}; {a.describe()}"


__all__ = ["DEFAULT_PREDICTIVE_SETTINGS", "Assessment", "Predictive", "PredictiveSettings", "task_type"]
