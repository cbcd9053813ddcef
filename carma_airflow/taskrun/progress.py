"""A try's progress, reported by the task and read by the executor (issue 41).

A training loop knows how far it is (its step counter); the executor does not.  A task that calls
:func:`report_progress` as it trains lets the executor measure its speed in each stretch of its
run: alone, and beside each set of co-tenants.  Its speed beside co-tenants over its speed alone
is an observation of interference from the try itself, with no solo run of its task needed first
(executor/learning/telemetry.py), as the simulator's tries report it (``SimConfig.progress_reports``).
Without reports the executor learns interference only from whole tries measured against an
earlier solo run of the same task: on the learning bench that met fewer targets (docs/measured.md,
round 49: day two <= 1.02x day one in 38 of 54 cells against 44 with reports).

The report is one small file per try (``CARMA_PROGRESS_FILE``, set by the executor), written
atomically (a temporary file renamed over it) at most every :data:`MIN_INTERVAL_S`, so a loop may
call it every step.  Outside a carma try (the variable unset) it does nothing.

    from carma_airflow.taskrun.progress import report_progress
    for step in range(steps):
        train_step()
        report_progress(step + 1, steps)

Airflow-free: the task side imports it without the executor.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

PROGRESS_ENV = "CARMA_PROGRESS_FILE"
MIN_INTERVAL_S = 0.5  # the most often a report is written (the last one, done == total, always is)

_last_written: dict[str, float] = {}  # path -> monotonic time of its last write (this process)


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """What a try reported last: ``done`` units of work (steps, samples, seconds: any measure that
    grows at the try's speed), of ``total`` where it said so, at ``at`` (the task's clock,
    ``time.time()``: the executor times the stretches between reports by it)."""

    done: float
    total: float | None
    at: float


def report_progress(done: float, total: float | None = None, *, path: str | os.PathLike[str] | None = None) -> bool:
    """Report that ``done`` units of the try's work are done (of ``total``, if known); True if
    written.  ``path``: the file (default: ``CARMA_PROGRESS_FILE``; neither: nothing is written).
    ValueError on a negative or non-finite figure, or ``done`` above ``total``."""
    if not (math.isfinite(done) and done >= 0):
        raise ValueError(f"report_progress: done must be a finite number >= 0, got {done!r}")
    if total is not None and not (math.isfinite(total) and total > 0 and done <= total * (1 + 1e-9)):
        raise ValueError(
            f"report_progress: total must be a finite number > 0 and at least done ({done}), got {total!r}"
        )
    target = os.fspath(path) if path is not None else os.environ.get(PROGRESS_ENV)
    if not target:
        return False
    now = time.monotonic()
    final = total is not None and done >= total
    if not final and now - _last_written.get(target, -math.inf) < MIN_INTERVAL_S:
        return False
    # renamed over the last report, not carma_airflow.atomic_path: its fsyncs would cost a training loop a
    # disk flush twice a second, and a report is a hint that needs no durability
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="ascii") as out:
            out.write(f"{float(done)!r} {None if total is None else float(total)!r} {time.time()!r}\n")
        os.replace(tmp, target)
    except OSError:  # a training never fails for a report (a remote worker without the folder)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _last_written[target] = now
        return False
    _last_written[target] = now
    return True


def read_progress(path: str | os.PathLike[str]) -> ProgressReport | None:
    """The last report in ``path``; None where there is none or it cannot be read."""
    try:
        text = Path(path).read_text(encoding="ascii").split()
        done = float(text[0])
        total = None if text[1] == "None" else float(text[1])
        at = float(text[2])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if not (math.isfinite(done) and done >= 0 and math.isfinite(at)):
        return None
    if total is not None and not (math.isfinite(total) and total > 0):
        return None
    return ProgressReport(done, total, at)


__all__ = ["MIN_INTERVAL_S", "PROGRESS_ENV", "ProgressReport", "read_progress", "report_progress"]
