"""Our default: interference-aware packing with reserved-memory accounting.

Differences from the paper's policies, each measured in ``bench/`` (see docs):

* Memory of a tenant that the monitor has not seen yet is counted at its reservation
  (the estimate), so the placer needs no 30 s lock after each placement and two tasks can
  start on one GPU in the same pass without racing for the same free memory.
* A tenant the metric window has not seen yet adds an activity prior to the GPU's
  SM-activity score, so a GPU that just got a task does not look idle.
* Candidates are ordered first by projected SM activity in coarse bands (less interference),
  then by tightest memory fit (best-fit inside a band keeps large holes for large tasks).
* At most ``max_tenants`` tasks share a GPU: per-task slowdown grows with every co-tenant.
* Optionally (``activity_cap``), no collocation once projected SM demand would pass a cap.
  Off by default: on the paper's traces every cap from 0.8 to 1.5 lengthened the makespan
  (bench/tune_default.py prints the sweep).
"""

from __future__ import annotations

from carma_airflow.core.filtering import Filter
from carma_airflow.core.filters.utilisation_cap import UtilisationCap
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import TaskRequest


class InterferenceAware(Policy):
    name = "interference-aware"
    aliases = ("carma", "default", "ia")
    description = (
        "idle GPUs first; then the GPU with the least projected SM activity, tightest memory fit "
        "within an activity band; reserved memory counted, at most max_tenants per GPU (default)"
    )
    uses_lock = False
    uses_reservations = True
    free_key_at = 1  # key: (band, usable MiB, index)

    def __init__(self, max_tenants: int = 3, activity_band: float = 0.25, activity_cap: float | None = None) -> None:
        self.max_tenants = max_tenants
        self.activity_band = activity_band
        self.activity_cap = activity_cap

    def extra_filters(self, settings: PlacementSettings) -> tuple[Filter, ...]:
        """Collocate only while projected SM demand, the newcomer included, stays under the cap."""
        return () if self.activity_cap is None else (UtilisationCap(self.activity_cap, settings.activity_prior),)

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        band = int(facts.smact / self.activity_band) if self.activity_band > 0 else 0
        return (float(band), float(facts.usable_free_mib), float(facts.index))
