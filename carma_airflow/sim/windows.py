"""What a simulated GPU's metric window holds at a time: its telemetry history as runs.

The monitor keeps the last ``width`` one-second samples of each GPU; a simulated GPU's telemetry
changes only at events, so its window is a few runs of equal samples.  :func:`window_runs` gives
those runs from the GPU's history of changes, so :class:`~carma_airflow.sim.gpus.SimGpus` scores
a window per run, not per sample, and keeps the scored windows by their runs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from operator import itemgetter


def window_runs(
    history: Sequence[tuple[float, float, float, float]], now: float, width: int
) -> list[tuple[tuple[float, float, float], int]]:
    """The monitor's window at ``now`` as runs of equal samples, oldest first: sample ``s`` (0 the
    latest, ``width - 1`` the oldest) reads the last history entry at or before ``now - s`` (the
    first entry if none).  Counted per entry, not per sample: the window is a few steps."""
    # the oldest sample's entry, by a binary search on the entries' times (history is in time order)
    first = max(0, bisect.bisect_right(history, now - (width - 1), key=_time) - 1)
    floor = math.floor
    out = []
    later = 0  # samples that read a later entry
    for j in range(len(history) - 1, first, -1):
        h = history[j]
        t = h[0]
        # samples s in [0, width) with now - s >= t (exact: the float test decides, the floor guesses)
        s = floor(now - t)
        while s >= 0 and now - s < t:
            s -= 1
        while s + 1 < width and now - (s + 1) >= t:
            s += 1
        n = max(0, min(width, s + 1)) - later
        if n > 0:
            out.append(((h[1], h[2], h[3]), n))
            later += n
    h = history[first]
    if width - later > 0:
        out.append(((h[1], h[2], h[3]), width - later))
    out.reverse()
    return out


_time = itemgetter(0)


__all__ = ["window_runs"]
