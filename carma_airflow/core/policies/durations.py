"""Solo run times per task type, and estimates for the types seen rarely or never (issue 23).

:class:`DurationBook` keeps the solo run times of each task type's latest tries; a type's
expectation is their median.  A type that has none of its own (a first run, or one that has not
ended yet) gets a *pooled* estimate from the types that do, by what its label says about it:

1. its **family**: the label less a trailing number (``resnet50_64`` -> ``resnet50``,
   ``mobilenet3`` -> ``mobilenet``, ``resnet34_cifar100_20e_2`` -> ``resnet34_cifar100_20e``; a
   label without one is its own family at size 1: ``vgg``, ``vgg2`` and ``vgg3`` are one family).
   The trailing number is the type's *size* (a batch size, or the ordinal of one).  Where
   measured types of the family have two sizes or more, their medians are fitted as
   ``log run = a + b log size`` (least squares, one point per type) with ``b`` bounded to
   [-1, 1] (doubling the size at most halves or doubles the run) and the estimate is the fit at
   the type's size; where they have one size, it is their median.
2. else its **nearest prefix**: the longest prefix of the family, in tokens split at ``.``, ``_``
   and ``-`` (at least the first token: in the executor a label is ``dag_id.task_id``, so that is
   the DAG), shared with measured types: the median of their medians
   (``resnet34_cifar100_50e_3`` with no 50-epoch run yet: the 20-epoch ones).
3. else the median over every measured type.

A type without run times of its own may still have run: shared all along, so its run alone was
never measured.  Each such try's duration bounds its run alone from above (a co-tenant only slows
it), so its estimate is at most the shortest of those (:meth:`DurationBook.bound`).  Decision (issue
41): on t2 (truth beta 0.8) a third of day two's priced tries were of types that had only run
shared on day one; they were priced at the median over the measured types, 2,676 s, where
``resnet18_cifar100_20e_3`` runs 204 s alone (13x): the shortest tries ranked as long ones and
waited.  The bound is the duration as it was, not corrected by the interference fit (whose error it
would carry).

Such a try also says roughly how long its type runs alone: its duration over the slowdown the rule
predicted when it placed the try beside its co-tenants (``estimate`` of :meth:`DurationBook.bound`).
Where a type has such estimates and no run alone, its expectation is their median (still at most
its bound) instead of the median over the other types.  Decision (issue 44): a type's own evidence,
even through the interference fit's error (a slowdown is 1-3x), is closer than the other types'
median (run times span 200 s to 30,000 s): ``vgg``, shared all along for 6,207 s on an H100 and
never run alone, was priced at the median, 1,651 s there and 7,073 s on an L4, where it runs 3,046 s
and 30,344 s (2xH100-80GB + 6xL4, ``table`` speeds, day two of s101).

Only what the executor knows goes in: the task types' labels and the run times of earlier tries.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import deque

SOLO_KEPT = 10  # solo run times kept per task type (their median is the expectation)
MOVED = 0.05  # an expectation that moves by less keeps the forecasts made with it
SLOPE_BOUND = 1.0  # |b| of a family's size trend: doubling the size at most halves or doubles the run

_SIZED = re.compile(r"^(.*\D)(\d+)$")
_SEPARATORS = "._-"
_SPLIT = re.compile(r"[._\-]")


def _moved(old: float, new: float) -> bool:
    return abs(new - old) > MOVED * max(abs(old), 1e-9)


CALIBRATION_KEPT = 64  # the newest errors of estimates from shared tries kept (Calibration)
CALIBRATION_MIN = 3  # errors needed before the calibration moves an estimate
CALIBRATION_BOUNDS = (0.5, 3.0)  # how far it moves one, at most


class Calibration:
    """How far estimates alone from shared tries (:func:`alone_from_shared`) have come out against
    the runs alone measured of the same task types: the median of ``log(estimate / run alone)`` over
    the newest ``CALIBRATION_KEPT``, as a factor that divides the estimates of types never measured
    (1.0 before ``CALIBRATION_MIN`` errors; bounded to ``CALIBRATION_BOUNDS``).  Decision (issue 41:
    a learner tracks its own prediction error on this deployment's ended tries and uses it): an
    estimate carries the interference fit's error, and where the fit understates the slowdown (the
    ``pairs`` truth, a measured V100 pair table) every estimate is too long by about as much; the
    types measured alone that also ran shared say by how much."""

    def __init__(self) -> None:
        self._errors: deque[float] = deque(maxlen=CALIBRATION_KEPT)

    def add(self, estimate: float, alone: float) -> bool:
        """Count one estimate against the run alone measured of its type; True where the factor
        moved by more than ``MOVED`` (the estimates it divides moved with it)."""
        if not (estimate > 0 and alone > 0):
            return False
        before = self.factor()
        self._errors.append(math.log(estimate / alone))
        return _moved(before, self.factor())

    def factor(self) -> float:
        if len(self._errors) < CALIBRATION_MIN:
            return 1.0
        low, high = CALIBRATION_BOUNDS
        return min(high, max(low, math.exp(statistics.median(self._errors))))

    def __len__(self) -> int:
        return len(self._errors)


def alone_from_shared(seconds: float, slowdown: float | None) -> float | None:
    """A try that ran ``seconds`` shared all along, placed at a predicted ``slowdown``: its run
    alone as estimated from them (at most ``seconds``; None: no slowdown predicted)."""
    if slowdown is None or not seconds > 0:
        return None
    return seconds / max(1.0, slowdown)


def family_of(kind: str) -> tuple[str, int]:
    """(family, size) a task type's label names: the label less its trailing number, and that
    number (1 where there is none).  ``resnet50_64`` -> (``resnet50``, 64), ``vgg2`` -> (``vgg``, 2),
    ``vgg`` -> (``vgg``, 1); a label that is only digits is its own family."""
    m = _SIZED.match(kind)
    if m is None:
        return kind, 1
    family = m.group(1)
    if family[-1] in _SEPARATORS and len(family) > 1:
        family = family[:-1]
    return family, int(m.group(2))


def prefix_tokens(family: str) -> tuple[str, ...]:
    """A family's tokens, split at ``.``, ``_`` and ``-`` (empty tokens dropped)."""
    return tuple(t for t in _SPLIT.split(family) if t)


def size_trend(points: list[tuple[int, float]], size: int) -> float:
    """The run time at ``size`` from (size, run time) points of one family: where they have two
    positive sizes or more, the least-squares fit of log run time on log size, its slope bounded
    to +-``SLOPE_BOUND``; else (or for a size of 0) the median of the run times."""
    usable = [(math.log(s), math.log(r)) for s, r in points if s > 0 and r > 0]
    if size <= 0 or len({x for x, _ in usable}) < 2:
        return statistics.median(r for _, r in points)
    mx = statistics.fmean(x for x, _ in usable)
    my = statistics.fmean(y for _, y in usable)
    sxx = sum((x - mx) ** 2 for x, _ in usable)
    slope = sum((x - mx) * (y - my) for x, y in usable) / sxx
    slope = max(-SLOPE_BOUND, min(SLOPE_BOUND, slope))
    return math.exp(my + slope * (math.log(size) - mx))


class DurationBook:
    """Per task type the solo run times of its latest tries; the expectation is their median, for
    a type without any its pooled estimate (the module doc; None: nothing measured).  ``pooled``
    False: a type without run times borrows the median over the measured types, whatever its
    label (as before the pooled estimate)."""

    def __init__(self, pooled: bool = True) -> None:
        self.pooled = pooled
        self._runs: dict[str, deque[float]] = {}
        self._median: dict[str, float] = {}
        self._overall: float | None = None
        # measured types by family, (size, median) each; each family's tokens
        self._families: dict[str, dict[str, tuple[int, float]]] = {}
        self._tokens: dict[str, tuple[str, ...]] = {}
        self._pooled: dict[str, float] = {}  # estimates of unmeasured types, until the next run
        self._bounds: dict[str, float] = {}  # per type, the shortest duration of a try that ran shared
        self._estimates: dict[str, deque[float]] = {}  # per type, runs alone estimated from shared tries
        # the estimates' error against measured types' runs (fed here unless a caller feeds it per model)
        self.calibration = Calibration()
        self.calibrating = True
        self.changes = 0  # runs counted so far: the expectations may have moved since a reader looked

    def add(self, kind: str, seconds: float) -> bool:
        """Count one run; True where an expectation moved by more than ``MOVED`` (or is new): a
        type's own, the overall median, and with them the pooled estimates that rest on them."""
        if not seconds > 0:
            return False
        runs = self._runs.setdefault(kind, deque(maxlen=SOLO_KEPT))
        runs.append(float(seconds))
        self.changes += 1
        old, old_overall = self._median.get(kind), self._overall
        median = self._median[kind] = statistics.median(runs)
        if old is None and self.calibrating:  # its estimates from shared tries, against its first run alone
            for e in self._estimates.get(kind, ()):
                self.calibration.add(e, median)
        self._overall = statistics.median(self._median.values())
        family, size = family_of(kind)
        self._families.setdefault(family, {})[kind] = (size, median)
        self._tokens.setdefault(family, prefix_tokens(family))
        self._pooled = {}
        return old is None or old_overall is None or _moved(old, median) or _moved(old_overall, self._overall)

    def bound(self, kind: str, seconds: float, estimate: float | None = None) -> bool:
        """A try of ``kind`` ran ``seconds`` for its whole work, shared (its run alone not measured):
        an upper bound of its run alone; ``estimate``: its run alone as estimated from it (its
        duration over its predicted slowdown; None: not known).  True where the type's estimate may
        have moved (a lower bound than before, or a new estimate, for a type without run times of
        its own)."""
        if not seconds > 0:
            return False
        moved = False
        if estimate is not None and estimate > 0:
            estimate = min(float(estimate), float(seconds))
            self._estimates.setdefault(kind, deque(maxlen=SOLO_KEPT)).append(estimate)
            measured = self._median.get(kind)
            if measured is None:
                moved = True
            elif self.calibrating:  # a measured type's estimate: how far off the estimates come out
                moved = self.calibration.add(estimate, measured) and self.estimated_unmeasured()
        old = self._bounds.get(kind)
        if old is None or seconds < old:
            self._bounds[kind] = float(seconds)
            moved = moved or kind not in self._median  # its own run times stand
        if moved:
            self.changes += 1
        return moved

    def estimated_unmeasured(self) -> bool:
        """Whether a type without run times of its own has estimates from shared tries (the
        calibration moves its expectation)."""
        return any(k not in self._median for k in self._estimates)

    def expected(self, kind: str) -> float | None:
        """The type's median run alone, else the median of its shared tries' estimates, else its
        pooled estimate; either capped by its shared tries' durations (None: nothing measured)."""
        got = self._median.get(kind)
        if got is not None:
            return got
        cap = self._bounds.get(kind)
        own = self._estimates.get(kind)
        if own:
            got = statistics.median(own) / self.calibration.factor()
        elif self._overall is None:
            return None
        elif not self.pooled:
            got = self._overall
        else:
            got = self._pooled.get(kind)
            if got is None:
                got = self._pooled[kind] = self._pool(kind)
        return got if cap is None else min(got, cap)

    def bound_of(self, kind: str) -> float | None:
        """The shortest duration of a try of ``kind`` that ran shared (None: none)."""
        return self._bounds.get(kind)

    def _pool(self, kind: str) -> float:
        family, size = family_of(kind)
        members = self._families.get(family)
        if members:
            return size_trend(list(members.values()), size)
        tokens = prefix_tokens(family)
        for depth in range(len(tokens), 0, -1):  # the family's own tokens first: families that extend it
            head = tokens[:depth]
            near = [
                median
                for other, kinds in self._families.items()
                if self._tokens[other][:depth] == head
                for _, median in kinds.values()
            ]
            if near:
                return statistics.median(near)
        assert self._overall is not None
        return self._overall

    def measured(self, kind: str) -> bool:
        """Whether the expectation is the type's own (else pooled from the others)."""
        return kind in self._median

    def __len__(self) -> int:
        return len(self._median)


__all__ = [
    "MOVED",
    "SOLO_KEPT",
    "Calibration",
    "DurationBook",
    "alone_from_shared",
    "family_of",
    "prefix_tokens",
    "size_trend",
]
