"""The form of interference: how much slower a task runs beside co-tenants, given two coefficients.

A tenant whose reported solo SM activity is ``a``, beside co-tenants whose reported activities
sum to ``C``, runs slower by

    slowdown = max(1, k * (a + C)) / max(1, k * a) * (1 + beta * k * C)

``beta`` is contention below saturation; ``k`` (the *activity scale*) is how much of the reported
activity is real demand. The saturation term is relative to the tenant's own demand alone: a tenant
alone on its GPU runs at its solo speed (slowdown 1) whatever ``k * a`` is, and a co-tenant of
little activity costs little (before, ``max(1, k * a)`` made a try alone, or beside a near-idle
co-tenant, slower than solo whenever ``k * a > 1``). An ended try is an observation of its stretch
against the co-tenants it had (:class:`CollocationObservation`, by segments where they changed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from carma_airflow.core.sharing import SharingModel

PRIOR_BETA = SharingModel().beta
PRIOR_SCALE = 1.0  # reported activity taken at face value, as the sharing model does


def slowdown(own: float, co_tenants: Iterable[float], beta: float, scale: float = PRIOR_SCALE) -> float:
    """Slowdown of a tenant with activity ``own`` beside ``co_tenants`` (1.0 = solo speed)."""
    contention = sum(co_tenants)
    if contention <= 0.0:
        return 1.0  # alone: its solo speed, by definition
    return math.exp(log_saturation(own, contention, scale)) * (1.0 + beta * scale * contention)


def log_saturation(own: float, contention: float, scale: float) -> float:
    """log of the saturation part of the slowdown: ``max(1, k (a + C)) / max(1, k a)`` (0 alone)."""
    total = scale * (own + contention)
    if contention <= 0.0 or total <= 1.0:
        return 0.0
    alone = scale * own
    return math.log(total) - (math.log(alone) if alone > 1.0 else 0.0)


def speed(own: float, co_tenants: Iterable[float], beta: float, scale: float = PRIOR_SCALE) -> float:
    """Progress rate relative to solo (1 / slowdown)."""
    return 1.0 / slowdown(own, co_tenants, beta, scale)


def log_speed_gradient(own: float, contention: float, beta: float, scale: float) -> tuple[float, float]:
    """d log(speed) / d beta and d log(speed) / d scale for one set of co-tenants."""
    if contention <= 0.0:
        return 0.0, 0.0
    inner = 1.0 + beta * scale * contention
    saturated = (scale * (own + contention) > 1.0) - (scale * own > 1.0)  # 1: only with co-tenants
    return -scale * contention / inner, -saturated / scale - beta * contention / inner


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a try's run with one set of co-tenants: its share of the run time, their activities."""

    share: float
    co_tenants: tuple[float, ...]
    co_tasks: tuple[str, ...] = ()  # the co-tenants' task types, where known (same order)


@dataclass(frozen=True, slots=True)
class CollocationObservation:
    """One ended try: its stretch (run time over solo run time) and what it shared the GPU with.

    ``segments``' shares are of the try's wall time and should sum to 1 (they are normalised).
    A try that never shared its GPU says nothing about interference and is ignored by the fit.
    """

    stretch: float
    own_activity: float
    segments: tuple[Segment, ...]
    task: str = ""  # the try's task type, where known: its own terms (core/task_terms.py)

    @classmethod
    def steady(
        cls,
        stretch: float,
        own_activity: float,
        co_tenants: Sequence[float],
        *,
        task: str = "",
        co_tasks: Sequence[str] = (),
    ) -> CollocationObservation:
        """A try that had the same co-tenants for its whole run."""
        return cls(stretch, own_activity, (Segment(1.0, tuple(co_tenants), tuple(co_tasks)),), task)

    @property
    def informative(self) -> bool:
        """Whether it tells anything about contention: valid numbers and co-tenants some of the time."""
        if not (math.isfinite(self.stretch) and self.stretch > 0.0 and math.isfinite(self.own_activity)):
            return False
        return any(s.share > 0.0 and sum(s.co_tenants) > 0.0 for s in self.segments)


def log_stretch(obs: CollocationObservation, beta: float, scale: float) -> tuple[float, float, float]:
    """log predicted stretch and its derivatives in beta and scale."""
    total = sum(max(0.0, s.share) for s in obs.segments) or 1.0
    rate = d_beta = d_scale = 0.0
    for s in obs.segments:
        share = max(0.0, s.share) / total
        contention = sum(s.co_tenants)
        r = share * speed(obs.own_activity, (contention,), beta, scale)
        g_beta, g_scale = log_speed_gradient(obs.own_activity, contention, beta, scale)
        rate += r
        d_beta += r * g_beta
        d_scale += r * g_scale
    return -math.log(rate), -d_beta / rate, -d_scale / rate


def predicted_stretch(obs: CollocationObservation, beta: float, scale: float = PRIOR_SCALE) -> float:
    """The stretch the model predicts for an observation's co-tenancy."""
    return math.exp(log_stretch(obs, beta, scale)[0])


__all__ = [
    "PRIOR_BETA",
    "PRIOR_SCALE",
    "CollocationObservation",
    "Segment",
    "log_saturation",
    "log_speed_gradient",
    "log_stretch",
    "predicted_stretch",
    "slowdown",
    "speed",
]
