"""The completion-time policy's floor on a collocation's gain.

A collocation must raise its GPU's summed predicted speed (the tenants' and the newcomer's, solo =
1.0 each) by at least the floor, else it is refused and the try waits or goes elsewhere.  Two
floors, both only once run times are known (:func:`floor_for`):

* ``CompletionSettings.learned_floor`` (default 0.0) on a GPU whose model the interference model
  has learned (its fit left the cold prior): a collocation may not lower what the GPU gets done per
  second.  The cold prior is mild by design and cannot say that; a learned fit can.  Decision
  (issue 41, round 54): exact peaks let more tenants in on a DAG's second day, and the
  completion-time rule, which weighs the queue's share of a collocation at 0.35, bought
  collocations its own learned model said lose throughput; fed the simulator's truth the rule
  without it lost to its own cold day one on t1 (1.10x), with it not (0.98x).
* ``CompletionSettings.min_gain`` (opt-in, ``[carma] min_gain``): on every GPU, prior or learned,
  instead of the learned floor.

The speeds are the forecast's scoring speeds (cautious where the model is unsure), so an unsure
gain must clear the floor at the low end of what is likely.  A deep queue asks the same GPUs about
the same newcomers pass after pass: with the learned forecast the verdicts are kept per facts
object and newcomer type and activity while the GPU's rows, the forecast (its version and model)
and the floors stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.forecast import LearnedForecast, Occupant

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime
    from carma_airflow.core.policies.priced import Option

Refusal = tuple[float, float] | None  # (the gain, the floor) of a refused collocation; None: not refused
FLOORED_POLICIES = ("completion-time", "predictive")  # the policies with a ``min_gain`` floor


def set_floor(policy: Policy, floor: float) -> None:
    """Set the ``min_gain`` of a policy with a floor (a deployment's ``[carma] min_gain``, a
    simulation's ``--min-gain``); ValueError for a policy without one."""
    settings = getattr(policy, "settings", None)
    if policy.name not in FLOORED_POLICIES or settings is None:
        raise ValueError(
            f"min_gain applies to the {' and '.join(FLOORED_POLICIES)} policies; {policy.name} has no floor"
        )
    policy.settings = replace(settings, min_gain=floor)  # type: ignore[attr-defined]  # each policy's own settings


class GainFloor:
    """The floor's verdicts, kept from pass to pass (see the module doc)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[GpuFacts, object, dict[tuple[str, float], Refusal]]] = {}
        self._by: object = None

    def refuses(self, policy: CompletionTime, f: GpuFacts, new: Occupant) -> Refusal:
        """(the gain, the floor) where the newcomer would raise ``f``'s summed predicted speed by
        less than the floor on ``f`` (:func:`floor_for`: the collocation is refused), else None."""
        fc, s = policy.forecast, policy.settings
        if not has_floor(policy) or not isinstance(fc, LearnedForecast):
            return short(policy, f, new)
        if floor_for(policy, f.state.spec.name) is None:
            return None  # lifted, or the learned floor on a model not learned yet: nothing to keep
        by = self._by
        floors = (s.min_gain, s.learned_floor)
        if not (isinstance(by, tuple) and by[0] is fc and by[1] == fc.version and by[2] is fc.model) or (
            by[3] != floors or len(self._kept) > 20_000
        ):
            self._kept, self._by = {}, (fc, fc.version, fc.model, floors)
        rows = fc.rows_of(f)
        got = self._kept.get(id(f))
        if got is None or got[0] is not f or got[1] is not rows:
            got = self._kept[id(f)] = (f, rows, {})  # the facts and rows kept alive: their ids stay theirs
        at = (new.kind, new.activity)
        if at not in got[2]:
            got[2][at] = short(policy, f, new)
        return got[2][at]


def has_floor(policy: CompletionTime) -> bool:
    """Whether a floor may refuse a collocation now: ``min_gain`` is set, or ``learned_floor`` is and
    the forecast has learned some GPU model (:func:`floor_for` says which GPUs)."""
    s = policy.settings
    if s.min_gain is not None:
        return True
    if s.learned_floor is None:
        return False
    fc = policy.forecast
    return not isinstance(fc, LearnedForecast) or fc.any_learned()


def floor_for(policy: CompletionTime, spec: str) -> float | None:
    """The floor a collocation on a GPU of model ``spec`` is held to, once run times are known:
    ``min_gain`` where set, else ``learned_floor`` where the forecast has learned ``spec``'s
    interference (a forecast that is not the learned one, the bench's truth, knows every model),
    else None; None as well while lifted (``lift_floor_saturated`` and the cluster saturated)."""
    s = policy.settings
    if s.lift_floor_saturated and policy.saturated:
        return None
    if s.min_gain is not None:
        return s.min_gain
    if s.learned_floor is None:
        return None
    fc = policy.forecast
    if isinstance(fc, LearnedForecast) and not fc.fit_learned(spec):
        return None
    return s.learned_floor


def floor_cheapest(policy: CompletionTime, options: list[Option], heres: Sequence[Occupant]) -> None:
    """The floor asked of one-GPU ``options`` (each newcomer in ``heres``) in the order
    :meth:`CompletionTime.choose` picks them, cheapest first, until one clears it; each refused is
    replaced by its refusal.  Only the cheapest that clears the floor can be chosen, so the decision
    is the one asking every option would make, with a floor's predictions for about one GPU a
    decision instead of every candidate's; the dearer options' texts give their costs.  With a
    ``tolerance`` every option is asked (a dearer one may be chosen)."""
    if not has_floor(policy):
        return
    inf = float("inf")
    if policy.settings.tolerance > 0:
        for k, (o, here) in enumerate(zip(options, heres, strict=True)):
            refused = policy.floor_refuses(o.gpus[0], here)
            if refused is not None:
                options[k] = replace(o, cost=inf, short=refused)
        return
    while True:
        k, best = -1, inf
        for i, o in enumerate(options):  # the first of the cheapest, as min() picks it
            if o.cost < best:
                k, best = i, o.cost
        if k < 0:
            return
        refused = policy.floor_refuses(options[k].gpus[0], heres[k])
        if refused is None:
            return
        options[k] = replace(options[k], cost=inf, short=refused)


def short(policy: CompletionTime, f: GpuFacts, new: Occupant) -> Refusal:
    """:meth:`GainFloor.refuses`, worked out afresh."""
    fc = policy.forecast
    if not fc.timed():
        return None
    spec = f.state.spec.name
    floor = floor_for(policy, spec)
    if floor is None:
        return None
    occ = policy.occupants_of(f)
    if not occ:
        return None
    gain = sum(fc.speeds(spec, [*occ, new])) - sum(fc.speeds(spec, occ))
    return None if gain >= floor else (gain, floor)


__all__ = ["FLOORED_POLICIES", "GainFloor", "Refusal", "floor_cheapest", "floor_for", "has_floor", "set_floor", "short"]
