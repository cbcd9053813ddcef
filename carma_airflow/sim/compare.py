"""Run several policies on one workload and compare each with exclusive allocation."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from carma_airflow.core.policies import make_policy
from carma_airflow.sim.engine import SimConfig, simulate
from carma_airflow.sim.metrics import SimResult
from carma_airflow.sim.workload import Arrival

PAPER_POLICIES = ("exclusive", "first-fit", "best-fit", "most-free-memory", "least-utilised", "round-robin")
DEFAULT_COMPARISON = (*PAPER_POLICIES[1:], "static-2", "static-3", "interference-aware")
RATIO_KEYS = (
    "makespan_s",
    "mean_wait_s",
    "mean_jct_s",
    "energy_kwh",
    "sm_activity_mean",
    "sm_occupancy_mean",
    "memory_used_mean",
)


def natural_queue(policy: str) -> str:
    """The queue a policy runs with when none is given: the paper's FIFO for the paper's
    policies, backfilling for static sharing (an Airflow pool does not block) and ours."""
    return "fifo" if make_policy(policy).name in PAPER_POLICIES else "backfill"


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: SimResult
    results: tuple[SimResult, ...]

    def rows(self) -> list[dict[str, Any]]:
        base = self.baseline.summary()
        out = []
        for r in (self.baseline, *self.results):
            s = r.summary()
            row = dict(s)
            for key in RATIO_KEYS:
                b = base[key]
                row[f"{key}_ratio"] = round(s[key] / b, 3) if b else None
            out.append(row)
        return out


def compare(
    arrivals: list[Arrival],
    base: SimConfig,
    policies: list[str],
    queue: str | None = None,
    baseline_estimator: str = "oracle",
) -> Comparison:
    """Exclusive (FIFO, as in the paper) first, then each policy with its natural or the given queue."""
    excl = replace(base, policy="exclusive", estimator=baseline_estimator, queue=queue or "fifo", recovery=None)
    baseline = simulate(excl, arrivals)
    results = []
    for name in policies:
        cfg = replace(base, policy=name, queue=queue or natural_queue(name), recovery=None)
        results.append(simulate(cfg, arrivals))
    return Comparison(baseline, tuple(results))
