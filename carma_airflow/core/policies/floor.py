"""The completion-time policy's opt-in floor on a collocation's gain (``CompletionSettings.min_gain``).

Once run times are known, a collocation must raise its GPU's summed predicted speed (the tenants'
and the newcomer's, solo = 1.0 each) by at least the floor, else it is refused and the try waits or
goes elsewhere.  The speeds are the forecast's scoring speeds (cautious where the model is unsure),
so an unsure gain must clear the floor at the low end of what is likely.  A deep queue asks the
same GPUs about the same newcomers pass after pass: with the learned forecast the verdicts are kept
per facts object and newcomer type and activity while the GPU's rows, the forecast (its version and
model) and the floor stay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.forecast import LearnedForecast, Occupant

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime

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
        less than the policy's ``min_gain`` (the collocation is refused), else None."""
        fc, floor = policy.forecast, policy.settings.min_gain
        if floor is not None and policy.settings.lift_floor_saturated and policy.saturated:
            return None  # lifted while the cluster is saturated (CompletionSettings.lift_floor_saturated)
        if floor is None or not isinstance(fc, LearnedForecast):
            return short(policy, f, new)
        by = self._by
        if not (isinstance(by, tuple) and by[0] is fc and by[1] == fc.version and by[2] is fc.model) or (
            by[3] != floor or len(self._kept) > 20_000
        ):
            self._kept, self._by = {}, (fc, fc.version, fc.model, floor)
        rows = fc.rows_of(f)
        got = self._kept.get(id(f))
        if got is None or got[0] is not f or got[1] is not rows:
            got = self._kept[id(f)] = (f, rows, {})  # the facts and rows kept alive: their ids stay theirs
        at = (new.kind, new.activity)
        if at not in got[2]:
            got[2][at] = short(policy, f, new)
        return got[2][at]


def short(policy: CompletionTime, f: GpuFacts, new: Occupant) -> Refusal:
    """:meth:`GainFloor.refuses`, worked out afresh."""
    floor, fc = policy.settings.min_gain, policy.forecast
    if floor is None or not fc.timed() or (policy.settings.lift_floor_saturated and policy.saturated):
        return None
    occ = policy.occupants_of(f)
    if not occ:
        return None
    spec = f.state.spec.name
    gain = sum(fc.speeds(spec, [*occ, new])) - sum(fc.speeds(spec, occ))
    return None if gain >= floor else (gain, floor)


__all__ = ["FLOORED_POLICIES", "GainFloor", "Refusal", "set_floor", "short"]
