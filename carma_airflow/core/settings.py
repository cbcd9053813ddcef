"""Placement constants, all configurable, with the CARMA paper's values as defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from carma_airflow.core.risk import DEFAULT_RISK, RiskSettings


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    reserve_mib: int = 512  # kept free on every GPU (paper)
    headroom_mib: int = 2048  # free memory above the estimate a GPU must have (paper)
    floor_mib: int = 5120  # free memory demanded when no estimator is used (paper)
    lock_s: float = 30.0  # paper: no new decision on a GPU this long after its last placement
    idle_used_mib: int = 1024  # a GPU with no tenants and less used memory than this is idle
    activity_prior: float = 0.5  # SM activity assumed for a tenant the window has not seen yet
    risk: RiskSettings = field(default_factory=lambda: DEFAULT_RISK)


DEFAULT_SETTINGS = PlacementSettings()
