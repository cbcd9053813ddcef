"""Collocation risk analysis as the CARMA paper defines it.

For each metric (SM activity, SM occupancy, DRAM activity) over a window of W samples::

    score = 0.2 * mean + 0.3 * median + 0.3 * p95 + 0.2 * EMA_last      (EMA alpha = 2 / (W + 1))

A GPU is high-risk, and excluded from collocation, when
``smact >= 0.80 and (smocc >= 0.45 or drama >= 0.40)``.  Every constant is a field of
:class:`RiskSettings`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RiskSettings:
    window: int = 30
    weight_mean: float = 0.2
    weight_median: float = 0.3
    weight_p95: float = 0.3
    weight_ema: float = 0.2
    smact_threshold: float = 0.80
    smocc_threshold: float = 0.45
    drama_threshold: float = 0.40


DEFAULT_RISK = RiskSettings()


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of sorted values (numpy's default method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def window_score(samples: Sequence[float], settings: RiskSettings = DEFAULT_RISK) -> float:
    """The paper's composite score of one metric over its window (0.0 for no samples)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    mean = sum(ordered) / len(ordered)
    median = _percentile(ordered, 0.5)
    p95 = _percentile(ordered, 0.95)
    alpha = 2.0 / (len(samples) + 1)
    ema = samples[0]
    for value in samples[1:]:
        ema = alpha * value + (1.0 - alpha) * ema
    return (
        settings.weight_mean * mean
        + settings.weight_median * median
        + settings.weight_p95 * p95
        + settings.weight_ema * ema
    )


def runs_score(runs: Sequence[tuple[float, int]], settings: RiskSettings = DEFAULT_RISK) -> float:
    """:func:`window_score` of a window given as runs of equal samples, (value, count) oldest first:
    the same score (to rounding) at the cost of the runs, not of the samples (a simulated GPU's
    window is a few steps)."""
    n = 0
    total = 0.0
    for v, c in runs:
        n += c
        total += v * c
    if n <= 0:
        return 0.0
    ordered = sorted(runs) if len(runs) > 1 else runs
    # the samples at the ranks the median and the 95th percentile interpolate between
    pos_med, pos_p95 = (n - 1) * 0.5, (n - 1) * 0.95
    lo_med, lo_p95 = math.floor(pos_med), math.floor(pos_p95)
    wanted = (lo_med, min(lo_med + 1, n - 1), lo_p95, min(lo_p95 + 1, n - 1))
    found = [0.0, 0.0, 0.0, 0.0]
    seen = 0
    for v, c in ordered:
        if c <= 0:
            continue
        upto = seen + c
        for i, rank in enumerate(wanted):
            if seen <= rank < upto:
                found[i] = v
        seen = upto
    median = found[0] + (found[1] - found[0]) * (pos_med - lo_med)
    p95 = found[2] + (found[3] - found[2]) * (pos_p95 - lo_p95)
    decay = 1.0 - 2.0 / (n + 1)
    ema = runs[0][0]  # the first run starts the average (and its repeats leave it there)
    for v, c in runs[1:]:
        if c > 0:
            ema = v + (ema - v) * decay**c
    return (
        settings.weight_mean * (total / n)
        + settings.weight_median * median
        + settings.weight_p95 * p95
        + settings.weight_ema * ema
    )


@dataclass(frozen=True, slots=True)
class MetricWindow:
    """The last W samples (oldest first, 0..1) of the three metrics, with their scores."""

    smact: tuple[float, ...] = ()
    smocc: tuple[float, ...] = ()
    drama: tuple[float, ...] = ()
    settings: RiskSettings = DEFAULT_RISK
    smact_score: float = field(init=False)
    smocc_score: float = field(init=False)
    drama_score: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "smact_score", window_score(self.smact, self.settings))
        object.__setattr__(self, "smocc_score", window_score(self.smocc, self.settings))
        object.__setattr__(self, "drama_score", window_score(self.drama, self.settings))

    @classmethod
    def constant(cls, smact: float, smocc: float, drama: float, settings: RiskSettings = DEFAULT_RISK) -> MetricWindow:
        """A window whose samples all had the same values (scores equal the values)."""
        return cls((smact,), (smocc,), (drama,), settings)

    @classmethod
    def from_runs(
        cls, runs: Sequence[tuple[tuple[float, float, float], int]], settings: RiskSettings = DEFAULT_RISK
    ) -> MetricWindow:
        """A window given as runs of equal samples, ((smact, smocc, drama), count) oldest first;
        its scores by :func:`runs_score` (a simulated GPU's window: a few steps, rebuilt each pass)."""
        smact: list[float] = []
        smocc: list[float] = []
        drama: list[float] = []
        for (a, o, d), c in runs:
            smact += [a] * c
            smocc += [o] * c
            drama += [d] * c
        w = object.__new__(cls)
        for name, value in (("smact", tuple(smact)), ("smocc", tuple(smocc)), ("drama", tuple(drama))):
            object.__setattr__(w, name, value)
        object.__setattr__(w, "settings", settings)
        object.__setattr__(w, "smact_score", runs_score([(m[0], c) for m, c in runs], settings))
        object.__setattr__(w, "smocc_score", runs_score([(m[1], c) for m, c in runs], settings))
        object.__setattr__(w, "drama_score", runs_score([(m[2], c) for m, c in runs], settings))
        return w

    @property
    def high_risk(self) -> bool:
        return is_high_risk(self.smact_score, self.smocc_score, self.drama_score, self.settings)


def is_high_risk(smact: float, smocc: float, drama: float, settings: RiskSettings = DEFAULT_RISK) -> bool:
    """The paper's rule: busy SMs and either busy occupancy or busy DRAM."""
    return smact >= settings.smact_threshold and (
        smocc >= settings.smocc_threshold or drama >= settings.drama_threshold
    )
