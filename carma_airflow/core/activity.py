"""How busy a task keeps a GPU's SMs when it runs alone, learned from its own earlier tries.

Activity is the task's *solo* SM activity: the fraction of time its SMs are busy when it has the
GPU to itself (0..1, what :class:`~carma_airflow.core.sharing.ActivityProfile` calls
``sm_activity``).  The interference model (:mod:`carma_airflow.core.interference`) predicts
slowdowns from it, so a light CIFAR job and a heavy transformer are told apart.

Where the numbers come from (the caller's part; this module only does arithmetic):

* **history**: one :class:`ActivitySample` per ended try of the same Airflow task (the key the
  memory history uses: dag_id, task_id), the SM activity attributed to that try: per-process SM
  utilisation where the monitor offers it, else the GPU's window while the task ran alone on it.
  Samples taken while the task shared a GPU read low (its co-tenants slow it, and take SM time
  from it): a try's own samples while it was alone are its activity where it had any; a try
  that shared its GPUs throughout gives its shared reading, marked ``shared``.  Where a task has
  tries measured without co-tenants in the window, its shared ones are left out (issue 41: the
  same workload read 0.28 on a GPU it shared and 0.50 alone), so what it learns does not depend
  on whom it ran beside; a task only ever seen shared learns from those, the best there is.
* **hint**: ``executor_config["carma"]["activity"]``, what the author expects, before any history.
* **prior**: neither; the placer's ``activity_prior`` (0.5), with confidence 0.

The estimate is the median of the last ``window`` tries (a stalled or half-killed try does not
drag it), pulled toward the hint as if the hint were ``hint_weight`` tries.  Its ``spread`` is the
tries' scaled median absolute deviation, and ``low``/``high`` are about two standard errors
either side, so a caller can see how sure it is: ``confidence`` is 1 minus that interval's width.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation over its median absolute deviation
_MEDIAN_SE = 1.2533  # standard error of a median over that of a mean, sqrt(pi / 2)


@dataclass(frozen=True, slots=True)
class ActivitySample:
    """The solo SM activity attributed to one ended try (0..1) and how it was measured.

    ``source``: ``"process"`` (per-process SM utilisation) or ``"gpu-alone"`` (the GPU's SM
    activity window while the try was its only tenant); kept for the reasons a user reads.
    ``shared``: the try had co-tenants on its GPUs while it ran (the store's ``co_tasks`` not
    empty); its value is from its samples alone where it had any, but a task's samples of tries
    that never shared win over it (:func:`estimate_activity`).
    """

    sm_activity: float
    source: str = "gpu-alone"
    shared: bool = False


@dataclass(frozen=True, slots=True)
class ActivitySettings:
    """How an activity estimate is formed; every number a knob."""

    window: int = 10  # the last N tries count; older ones describe an older pipeline
    hint_weight: float = 2.0  # a declared hint counts as this many tries
    assumed_spread: float = 0.15  # spread assumed below three tries (or for a hint alone)
    min_spread: float = 0.02  # even identical tries leave this much doubt (telemetry jitter)
    prior: float = 0.5  # activity assumed for a task nobody knows anything about


DEFAULT_ACTIVITY_SETTINGS = ActivitySettings()


@dataclass(frozen=True, slots=True)
class ActivityEstimate:
    """A task's expected solo SM activity, with how sure it is.

    ``count``: tries the estimate rests on (0: hint or prior only).  ``spread``: robust standard
    deviation of those tries.  ``low``/``high``: a plausible range (about 95 %).  ``confidence``:
    ``1 - (high - low)`` before clipping to 0..1; 0 means "a guess" and callers should not
    base a decision on it.  ``source`` says where it came from, for reason texts.
    """

    sm_activity: float
    count: int
    spread: float
    low: float
    high: float
    confidence: float
    source: str

    @property
    def known(self) -> bool:
        """Whether anything was learned or declared (not just the prior)."""
        return self.confidence > 0.0


def _clip01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def unknown_activity(settings: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS) -> ActivityEstimate:
    """The estimate for a task with no history and no hint: the prior, confidence 0."""
    return ActivityEstimate(settings.prior, 0, 0.5, 0.0, 1.0, 0.0, "prior")


def estimate_activity(
    samples: Sequence[ActivitySample | float],
    hint: float | None = None,
    settings: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS,
) -> ActivityEstimate:
    """A task's activity from its earlier tries (oldest first) and an optional declared hint.

    Values outside 0..1 and non-finite ones are clipped or dropped: a monitor glitch must not
    make a task look heavier than a full GPU.
    """
    recent = list(samples[-settings.window :]) if settings.window > 0 else []
    solo = [s for s in recent if not (isinstance(s, ActivitySample) and s.shared)]
    left_out = len(recent) - len(solo) if solo else 0  # shared tries count only where no solo one does
    values = []
    for s in solo or recent:
        v = s.sm_activity if isinstance(s, ActivitySample) else float(s)
        if math.isfinite(v):
            values.append(_clip01(v))
    have_hint = hint is not None and math.isfinite(hint)
    n = len(values)
    if n == 0 and not have_hint:
        return unknown_activity(settings)
    parts = []
    if n:
        median = _median(values)
        few = n < 3  # a deviation of one or two tries says nothing
        spread = settings.assumed_spread if few else _MAD_TO_SIGMA * _median([abs(v - median) for v in values])
        shared = " shared" if not solo else ""
        parts.append(f"median of {n}{shared} tr{'y' if n == 1 else 'ies'}")
        if left_out:
            parts.append(f"{left_out} shared left out")
    else:
        median, spread = 0.0, settings.assumed_spread
    spread = max(settings.min_spread, spread)
    weight = float(n)
    value = median * n
    if have_hint:
        assert hint is not None
        value += settings.hint_weight * _clip01(hint)
        weight += settings.hint_weight
        parts.append(f"hint {_clip01(hint):.2f}")
    value /= weight
    stderr = _MEDIAN_SE * spread / math.sqrt(weight)
    low, high = _clip01(value - 2.0 * stderr), _clip01(value + 2.0 * stderr)
    confidence = _clip01(1.0 - 4.0 * stderr)
    return ActivityEstimate(value, n, spread, low, high, confidence, " + ".join(parts))


def hinted_activity(hint: float, settings: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS) -> ActivityEstimate:
    """The estimate from a declared hint alone (no history yet)."""
    return estimate_activity((), hint, settings)


@dataclass(frozen=True, slots=True)
class TaskTraits:
    """What a DAG author knows of a task before it ever runs: the training code it runs
    (``script``, e.g. the model), its ``family`` (cnn, transformer, ...) and batch size."""

    script: str | None = None
    family: str | None = None
    batch_size: int | None = None


# how alike two tasks are, most alike first, with how far a borrowed estimate is trusted
_LIKENESS: tuple[tuple[str, float], ...] = (
    ("same code and batch size", 0.6),
    ("same code", 0.45),
    ("same family and batch size", 0.35),
    ("same family", 0.3),
)


def _likeness(a: TaskTraits, b: TaskTraits) -> int | None:
    """Index into ``_LIKENESS`` (0 most alike), None when nothing is shared."""
    same_batch = a.batch_size is not None and a.batch_size == b.batch_size
    if a.script is not None and a.script == b.script:
        return 0 if same_batch else 1
    if a.family is not None and a.family == b.family:
        return 2 if same_batch else 3
    return None


def similar_activity(
    traits: TaskTraits,
    known: Iterable[tuple[TaskTraits, ActivityEstimate]],
    settings: ActivitySettings = DEFAULT_ACTIVITY_SETTINGS,
) -> ActivityEstimate | None:
    """A low-confidence estimate for a task never seen, borrowed from the learned estimates of
    the most alike tasks (same code and batch size, else same code, else same family ...): their
    median, its confidence capped by how alike they are (0.3-0.6) and by theirs.  None when no
    learned task shares anything with it.  Only learned estimates should be passed (``known``):
    a borrowed one must not be borrowed again."""
    best: int | None = None
    values: list[float] = []
    confidence = 0.0
    for other, est in known:
        if est.count == 0:
            continue
        rank = _likeness(traits, other)
        if rank is None or (best is not None and rank > best):
            continue
        if best is None or rank < best:
            best, values, confidence = rank, [], 0.0
        values.append(est.sm_activity)
        confidence = max(confidence, est.confidence)
    if best is None:
        return None
    how, cap = _LIKENESS[best]
    value = _median(values)
    spread = max(settings.assumed_spread, _MAD_TO_SIGMA * _median([abs(v - value) for v in values]))
    confidence = min(cap, confidence)
    half = 2.0 * spread
    return ActivityEstimate(
        value,
        0,
        spread,
        _clip01(value - half),
        _clip01(value + half),
        confidence,
        f"like {len(values)} task{'s' if len(values) != 1 else ''} of the {how}",
    )


__all__ = [
    "DEFAULT_ACTIVITY_SETTINGS",
    "ActivityEstimate",
    "ActivitySample",
    "ActivitySettings",
    "TaskTraits",
    "estimate_activity",
    "hinted_activity",
    "similar_activity",
    "unknown_activity",
]
