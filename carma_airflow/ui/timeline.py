"""Geometry of the placement timeline: one lane per GPU, tries that share a GPU stacked in rows.

Positions are fractions of the time window (0 = its start, 1 = now), so the template scales them
to any width.  A try is drawn on every GPU it held, from its start to its end (or now); tries
with no GPU (waiting, or refused) go to a last lane, from their decision to now or their end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from carma_airflow.store.records import FINISHED_OUTCOMES

NO_GPU = "no-gpu"
MIN_WIDTH = 0.004  # a try of a second on a day's window still shows
ROW_GAP = 0.002
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
MAX_TICKS = 8


@dataclass(frozen=True, slots=True)
class Lane:
    key: str  # the GPU's UUID
    label: str
    name: str = ""


ENDED = frozenset(str(o) for o in FINISHED_OUTCOMES)  # outcomes of a try that is over


@dataclass(frozen=True, slots=True)
class TimelineBar:
    key: str
    label: str
    try_number: int
    outcome: str
    lanes: tuple[str, ...]  # GPU UUIDs; empty: never placed
    decided_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    detail: str = ""


def layout(lanes: Sequence[Lane], bars: Sequence[TimelineBar], start: datetime, end: datetime) -> dict[str, Any]:
    """Lanes with their bars packed into rows, and the time axis ticks, as a JSON-ready dict."""
    span = max((end - start).total_seconds(), 1e-9)

    def frac(at: datetime) -> float:
        return min(1.0, max(0.0, (at - start).total_seconds() / span))

    by_lane: dict[str, list[dict[str, Any]]] = {lane.key: [] for lane in lanes}
    by_lane[NO_GPU] = []
    for bar in bars:
        if bar.lanes:
            begin = bar.started_at or bar.decided_at
            kind = "run"
        else:
            begin = bar.decided_at
            kind = "wait" if bar.outcome == "waiting" else "refused"
        # a try that ended without an end time never ran (refused: never fits, a bad config): its
        # bar closes at its decision, not at "now" on every refresh
        closed = bar.ended_at is not None or bar.outcome in ENDED
        finish = bar.ended_at or (begin if closed else end)
        if finish < start or begin > end:
            continue
        x0 = frac(begin)
        x1 = max(frac(finish), x0 + MIN_WIDTH)
        for lane_key in bar.lanes or (NO_GPU,):
            by_lane.setdefault(lane_key, []).append(
                {
                    "key": bar.key,
                    "label": bar.label,
                    "try_number": bar.try_number,
                    "outcome": bar.outcome,
                    "kind": kind,
                    "x0": round(x0, 5),
                    "x1": round(min(x1, 1.0 + MIN_WIDTH), 5),
                    "open": not closed,
                    "detail": bar.detail,
                }
            )
    out_lanes = []
    for lane in [*lanes, Lane(NO_GPU, "no GPU yet", "")]:
        items = by_lane.get(lane.key, [])
        if lane.key == NO_GPU and not items:
            continue
        rows = _pack(items)
        out_lanes.append({"key": lane.key, "label": lane.label, "name": lane.name, "rows": rows, "bars": items})
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "window_s": round(span, 1),
        "ticks": ticks(start, end),
        "lanes": out_lanes,
    }


def _pack(items: list[dict[str, Any]]) -> int:
    """Give each bar the first row where it overlaps nothing; returns the number of rows (>= 1)."""
    row_ends: list[float] = []
    for item in sorted(items, key=lambda i: (i["x0"], i["x1"])):
        for row, row_end in enumerate(row_ends):
            if item["x0"] >= row_end + ROW_GAP:
                item["row"] = row
                row_ends[row] = item["x1"]
                break
        else:
            item["row"] = len(row_ends)
            row_ends.append(item["x1"])
    return max(1, len(row_ends))


def ticks(start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Round UTC times inside the window, at most MAX_TICKS of them, as fractions and labels."""
    span = (end - start).total_seconds()
    if span <= 0:
        return []
    step = next((s for s in TICK_STEPS_S if span / s <= MAX_TICKS), TICK_STEPS_S[-1])
    first = datetime.fromtimestamp((int(start.timestamp()) // step + 1) * step, tz=timezone.utc)
    out = []
    at = first
    while at <= end:
        fmt = "%H:%M:%S" if step < 60 else "%H:%M"
        out.append({"x": round((at - start).total_seconds() / span, 5), "label": at.strftime(fmt)})
        at += timedelta(seconds=step)
    return out
