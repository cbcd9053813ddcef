"""The completion-time rule's track record: how its predicted completions came out, per kind of option.

The rule prices each option of a try that no idle GPU takes as a predicted completion: sharing a
GPU set (the newcomer's run at the predicted slowdown, and the tenants' delay), or waiting (the
predicted drain of a GPU, then the newcomer's run *alone*).  Both rest on forecasts, and neither
sees what happens after the decision: tries that arrive later join the GPU a waiter gets (so it
rarely runs alone under load), a learned fit that overstates interference makes sharing look dearer
than it turns out.  Measured (issue 41, t2 on 4xA100-40GB, truth beta 0.8, the executor's estimator,
day two): the tries that chose to wait were predicted to run 55,847 s in all and ran 87,637 s
(1.57x); those that chose to share were predicted 93,928 s and took 72,602 s (0.77x).  Both errors
push the rule toward waiting, and day two waited 72 % longer than day one for runs no shorter.

So the rule keeps a record on this deployment, per kind of option (``wait``, ``share``): for each
try, the kind it chose at its first priced decision and the completion it predicted then; when the
try ends, how long it actually took from that decision.  Each option's cost (less the queue's share)
is then multiplied by its kind's ratio

    factor = (PRIOR + sum of actual completions) / (PRIOR + sum of predicted completions)   (last WINDOW)

bounded to [MIN_FACTOR, MAX_FACTOR].  Decisions:

* a ratio of sums, not a mean of ratios: each try weighs by its length, and a try predicted at a few
  seconds cannot swing it;
* ``PRIOR`` seconds at ratio 1 on both sides: the first few ends move it little;
* per kind, both ways: the point is to compare the options as they turn out here, so a kind whose
  completions came out shorter than predicted gets cheaper too (bounded);
* only the first priced decision of a try counts (later passes re-price a waiting try with newer
  facts, but its completion began with that choice); tries that crash are forgotten (their
  completion measures the crash, not the option);
* tries placed on an idle GPU are not priced and not recorded.

Pure data, no clock: the caller passes its time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WAIT, SHARE = "wait", "share"
WINDOW = 64  # ended tries kept per kind
PRIOR = 3600.0  # seconds at ratio 1 added to both sums
MIN_FACTOR, MAX_FACTOR = 0.5, 3.0
OPEN_CAP = 50_000  # open decisions kept (the oldest forgotten: tries withdrawn and never ended)


@dataclass(slots=True)
class _Sums:
    ended: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    predicted: float = 0.0
    actual: float = 0.0

    def add(self, predicted: float, actual: float) -> None:
        if len(self.ended) == self.ended.maxlen:
            p, a = self.ended[0]
            self.predicted -= p
            self.actual -= a
        self.ended.append((predicted, actual))
        self.predicted += predicted
        self.actual += actual

    def factor(self) -> float:
        ratio = (PRIOR + self.actual) / (PRIOR + self.predicted)
        return min(MAX_FACTOR, max(MIN_FACTOR, ratio))


class TrackRecord:
    """Open decisions by try key; ended tries' predicted and actual completions per kind."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, float, float]] = {}  # key: (kind, decided at, predicted completion)
        self._kinds: dict[str, _Sums] = {WAIT: _Sums(), SHARE: _Sums()}
        self.version = 0  # moves when a factor could have changed (kept waits rest on it)

    def __len__(self) -> int:
        return sum(len(s.ended) for s in self._kinds.values())

    def carry_from(self, earlier: TrackRecord) -> None:
        """Start from ``earlier``'s ended tries (a deployment that keeps running: the next day's
        DAG runs meet the record the last day left); its open decisions are not carried."""
        for kind, sums in earlier._kinds.items():
            mine = _Sums()
            for predicted, actual in sums.ended:
                mine.add(predicted, actual)
            self._kinds[kind] = mine
        self.version += 1

    def ended_of(self, kind: str) -> int:
        return len(self._kinds[kind].ended)

    def chose(self, key: str, kind: str, now: float, predicted: float) -> None:
        """Try ``key`` chose an option of ``kind`` at ``now``, predicted to complete in ``predicted``
        seconds; a try already recorded keeps its first."""
        if key in self._open:
            return
        if kind not in self._kinds:
            raise ValueError(f"TrackRecord: kind must be {WAIT!r} or {SHARE!r}, got {kind!r}")
        if len(self._open) >= OPEN_CAP:
            del self._open[next(iter(self._open))]
        self._open[key] = (kind, now, max(0.0, predicted))

    def ended(self, key: str, now: float, ok: bool = True) -> None:
        """Try ``key`` ended at ``now`` (``ok``: it completed; else it crashed or was stopped, and is
        forgotten)."""
        got = self._open.pop(key, None)
        if got is None or not ok:
            return
        kind, since, predicted = got
        self._kinds[kind].add(predicted, max(0.0, now - since))
        self.version += 1

    def factor(self, kind: str) -> float:
        """What to multiply an option of ``kind``'s predicted cost by (1.0 until tries have ended)."""
        return self._kinds[kind].factor()

    def sums(self, kind: str) -> tuple[float, float]:
        """(predicted, actual) seconds summed over the kind's recent ended tries."""
        s = self._kinds[kind]
        return s.predicted, s.actual


__all__ = ["MAX_FACTOR", "MIN_FACTOR", "PRIOR", "SHARE", "WAIT", "WINDOW", "TrackRecord"]
