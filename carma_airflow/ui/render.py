"""Jinja filters of the GPU page: memory, durations and times as a person reads them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from jinja2 import Environment

OUTCOME_COLOURS = {
    "running": "#3b82f6",
    "success": "#16a34a",
    "failed": "#dc2626",
    "oom": "#111827",
    "waiting": "#9ca3af",
}


def mib(value: Any) -> str:
    """``12288`` -> ``12.0 GiB``; ``800`` -> ``800 MiB``; None -> ``-``."""
    if not isinstance(value, (int, float)):
        return "-"
    if abs(value) >= 1024:
        return f"{value / 1024:.1f} GiB"
    return f"{value:.0f} MiB"


def duration(seconds: Any) -> str:
    """``75`` -> ``1 m 15 s``; ``7260`` -> ``2 h 1 m``; None -> ``-``."""
    if not isinstance(seconds, (int, float)):
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def clock(iso: Any) -> str:
    """An ISO time as ``HH:MM:SS`` UTC (the page says UTC); None -> ``-``."""
    if not isinstance(iso, str):
        return "-"
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return at.astimezone(timezone.utc).strftime("%H:%M:%S")


def percent(fraction: Any) -> str:
    """``0.42`` -> ``42%``; None -> ``n/a``."""
    if not isinstance(fraction, (int, float)):
        return "n/a"
    return f"{100 * fraction:.0f}%"


def colour(outcome: Any) -> str:
    return OUTCOME_COLOURS.get(str(outcome), "#6b7280")


def register(env: Environment) -> None:
    env.filters.update(mib=mib, duration=duration, clock=clock, percent=percent, colour=colour)
    env.globals["outcome_colours"] = OUTCOME_COLOURS
