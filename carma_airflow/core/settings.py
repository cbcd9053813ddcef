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
    # a fence's promise to each placed try (core/fencing.py FenceModel.kept_margin_mib): None,
    # unfenced: a tenant seen past the lock window counts at what it holds (paper), the rest of its
    # reservation is offered to newcomers; an int: each tenant counts at its reservation plus
    # this margin (or what it holds, if more) for its whole life, because its fence lets it grow
    # into that and a newcomer given the rest would be what stops it (docs/isolation.md)
    kept_margin_mib: int | None = None
    risk: RiskSettings = field(default_factory=lambda: DEFAULT_RISK)


DEFAULT_SETTINGS = PlacementSettings()
