"""A waiting try's place in the GPU queue, from the executors' live snapshots: its priority, the
tries ahead of it, then what it waits for (``carma why`` and the GPU page say it in that order).

An executor's snapshot lists the tries that wait for its GPUs with their priority (Airflow's
``priority_weight``, or ``executor_config`` ``priority_weight``) and tie-break (``priority``).
Tries of a higher priority go first (the backfill queue, the default; docs/placement.md); inside
one priority the policy orders (arrival, or the completion-time policy's shortest predicted run
first), so the line counts those as beside it, not ahead.  Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """Where one waiting try stands among the tries that wait for the same executor's GPUs."""

    priority: int
    tie_break: int
    waiting: int  # tries waiting for those GPUs, this one included
    ahead: tuple[str, ...]  # labels of tries with a higher priority (or the same and a higher tie-break)
    beside: int  # other tries of the same priority and tie-break: the policy orders them

    def line(self) -> str:
        """``priority 10; first by priority; 3 waiting ...`` or ``priority 0; 2 waiting tries of a
        higher priority go first: a (20), b (15); ...``."""
        head = f"priority {self.priority}" + (f" (tie-break {self.tie_break})" if self.tie_break else "")
        same = f"{self.beside} of the same priority (the policy orders those)" if self.beside else ""
        if not self.ahead:
            place = "first by priority" + (f", with {same}" if same else "")
        else:
            names = ", ".join(self.ahead[:3]) + (f" and {len(self.ahead) - 3} more" if len(self.ahead) > 3 else "")
            many = "try of a higher priority goes" if len(self.ahead) == 1 else "tries of a higher priority go"
            place = f"{len(self.ahead)} waiting {many} first: {names}" + (f"; then {same}" if same else "")
        return f"{head}; {place}; {self.waiting} waiting for the GPUs of its executor in all"


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def place_of(key: str, snapshots: Iterable[Mapping[str, Any]]) -> QueuePlace | None:
    """The place of the try ``key`` in the snapshot that lists it waiting; None where none does
    (or the snapshot predates priorities in it)."""
    for body in snapshots:
        entries = [w for w in body.get("waiting") or () if isinstance(w, Mapping) and isinstance(w.get("key"), str)]
        mine = next((w for w in entries if w["key"] == key), None)
        if mine is None:
            continue
        priority, tie = _int(mine.get("priority")), _int(mine.get("tie_break")) or 0
        if priority is None:
            return None
        ahead, beside = [], 0
        for w in entries:
            p, t = _int(w.get("priority")), _int(w.get("tie_break")) or 0
            if w is mine or p is None:
                continue
            if (p, t) > (priority, tie):
                tied = f", tie-break {t}" if t else ""
                ahead.append((p, t, f"{w.get('label') or w['key']} ({p}{tied})"))
            elif (p, t) == (priority, tie):
                beside += 1
        labels = tuple(name for _, _, name in sorted(ahead, key=lambda a: (-a[0], -a[1])))
        return QueuePlace(priority, tie, len(entries), labels, beside)
    return None


__all__ = ["QueuePlace", "place_of"]
