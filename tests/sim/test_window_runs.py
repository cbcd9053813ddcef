"""The simulated monitor's window, counted per history entry, reads what sampling each second reads."""

from __future__ import annotations

import bisect
import random

from carma_airflow.sim.windows import window_runs as _window_runs


def test_runs_match_the_per_second_samples() -> None:
    rng = random.Random(3)
    width = 30
    for _ in range(3000):
        now = rng.uniform(50.0, 100.0)
        times = sorted(
            rng.choice((rng.uniform(now - 40.0, now), float(int(now) - rng.randint(0, 35)) + now % 1.0))
            for _ in range(rng.randint(1, 12))
        )
        history = [(t, rng.random(), rng.random(), rng.random()) for t in times]
        expected = []
        for s in range(width - 1, -1, -1):  # what the window held: one sample a second, oldest first
            k = max(0, bisect.bisect_right(times, now - s) - 1)
            expected.append(history[k][1:])
        got = [values for values, count in _window_runs(history, now, width) for _ in range(count)]
        assert got == expected
