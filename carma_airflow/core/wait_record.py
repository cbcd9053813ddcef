"""The wait option's track record: how long tries that chose to wait actually waited.

The completion-time rule prices waiting as the predicted drain of the GPU it waits for, then the
try's run alone.  That drain is a forecast of the tenants' work left at their predicted speeds,
and it leaves out what happens while the try waits: tries that arrive later share the GPU it waits
for (so it does not drain when predicted), the queue's rank lets shorter tries take the GPU first,
tenants run slower than predicted.  Measured on the mixed grid (issue 44, 4xA100-80GB + 4xT4,
``table``, day two): after t = 3,000 s waits ran 2-3x the predicted drain, and tries were kept off an
idle T4 for an A100 that did not come.

So the rule keeps its own record on this deployment: for each try that chose to wait, the drain it
predicted at its first wait and, once it is placed (anywhere), how long it actually waited.  The
wait option's drain is then multiplied by the record's ratio, per GPU model of the awaited GPU (the
deployment's where that model has too few ended waits):

    trust = (PRIOR + sum of actual waits) / (PRIOR + sum of predicted drains)     (recent WINDOW)

bounded to [1, MAX_TRUST].  Decisions (issue 41, "where its predictions have been wrong on this
deployment's ended tries, it should trust them less"):

* a ratio of sums, not a mean of ratios: a drain predicted at 5 s that took one 60 s pass would
  read 12x alone; the sum weighs each wait by its length;
* ``PRIOR`` seconds at ratio 1 on both sides: the first few waits move it little;
* never below 1: a wait that ended early was cut short by another GPU freeing, which the option's
  price does not promise either; the record only makes waiting dearer where waiting disappointed;
* only the first wait of a try is recorded (its later passes re-price with newer facts, but the
  choice to keep waiting began there).

Pure data, no clock: the caller passes its time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 64  # ended waits kept per GPU model (and for the deployment)
PRIOR = 600.0  # seconds at ratio 1 added to both sums
MAX_TRUST = 4.0  # the most the record multiplies a predicted drain by
MIN_ENDED = 4  # ended waits on a model before its own record is used (else the deployment's)
OPEN_CAP = 20_000  # open waits kept (the oldest are forgotten: tries removed while waiting)


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

    def trust(self) -> float:
        ratio = (PRIOR + self.actual) / (PRIOR + self.predicted)
        return min(MAX_TRUST, max(1.0, ratio))


class WaitRecord:
    """Open waits by try key; ended waits per GPU model and for the deployment."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[float, float, str | None]] = {}  # key: (since, predicted drain, model)
        self._by_model: dict[str, _Sums] = {}
        self._all = _Sums()
        self.version = 0  # moves when a trust could have changed (kept waits rest on it)

    def __len__(self) -> int:
        return len(self._all.ended)

    def waits(self, key: str, now: float, predicted: float, model: str | None) -> None:
        """The try ``key`` chose to wait at ``now`` for a drain predicted in ``predicted`` seconds
        (on a GPU of ``model``); a try already waiting keeps its first."""
        if key in self._open:
            return
        if len(self._open) >= OPEN_CAP:
            del self._open[next(iter(self._open))]
        self._open[key] = (now, max(0.0, predicted), model)

    def placed(self, key: str, now: float) -> None:
        """The try ``key`` was placed at ``now``: its wait, if it chose one, has ended."""
        got = self._open.pop(key, None)
        if got is None:
            return
        since, predicted, model = got
        actual = max(0.0, now - since)
        self._all.add(predicted, actual)
        if model is not None:
            self._by_model.setdefault(model, _Sums()).add(predicted, actual)
        self.version += 1

    def trust(self, model: str | None) -> float:
        """What to multiply a drain predicted on a GPU of ``model`` by (1.0 until waits disappoint)."""
        sums = self._by_model.get(model) if model is not None else None
        if sums is not None and len(sums.ended) >= MIN_ENDED:
            return sums.trust()
        return self._all.trust()

    def is_waiting(self, key: str) -> bool:
        return key in self._open


__all__ = ["MAX_TRUST", "PRIOR", "WINDOW", "WaitRecord"]
