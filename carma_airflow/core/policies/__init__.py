"""Placement policies by name.  Descriptive names in code; the paper's short names as aliases."""

from __future__ import annotations

import re

from carma_airflow.core.errors import UnknownPolicyError
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.best_fit import BestFit
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.exclusive import Exclusive
from carma_airflow.core.policies.first_fit import FirstFit
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.policies.least_utilised import LeastUtilised
from carma_airflow.core.policies.most_free_memory import MostFreeMemory
from carma_airflow.core.policies.predictive import Predictive
from carma_airflow.core.policies.round_robin import RoundRobin
from carma_airflow.core.policies.static_share import StaticShare

DEFAULT_POLICY = CompletionTime.name
_FIXED: tuple[type[Policy], ...] = (
    Exclusive,
    FirstFit,
    BestFit,
    MostFreeMemory,
    LeastUtilised,
    RoundRobin,
    InterferenceAware,
    Predictive,
    CompletionTime,
)
_STATIC = re.compile(r"^static-(\d+)$")


def policy_names() -> list[str]:
    """Canonical names, for help texts."""
    return [cls.name for cls in _FIXED] + ["static-K"]


def make_policy(name: str) -> Policy:
    """A fresh policy instance (policies such as round-robin carry a cursor)."""
    wanted = name.strip().lower()
    for cls in _FIXED:
        if wanted == cls.name or wanted in cls.aliases:
            return cls()
    match = _STATIC.match(wanted)
    if match:
        slots = int(match.group(1))
        if not 1 <= slots <= 64:
            raise UnknownPolicyError(f"static-K needs K between 1 and 64, got {slots}")
        return StaticShare(slots)
    aliases = ", ".join(a for cls in _FIXED for a in cls.aliases[:1])
    raise UnknownPolicyError(f"unknown policy {name!r}; use one of {', '.join(policy_names())} (short: {aliases})")


__all__ = ["DEFAULT_POLICY", "GpuFacts", "Policy", "make_policy", "policy_names"]
