"""Small coercions for the GPU page: a snapshot is data from another process, maybe another
version, so every value is checked before it is shown (ui/state.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any


def as_dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def as_dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def as_fraction(value: Any) -> float | None:
    number = as_float(value)
    return None if number is None or not 0.0 <= number <= 1.0 else number


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return int(value)


def pct(part: int, whole: int) -> float:
    return round(min(100.0, max(0.0, 100.0 * part / whole)), 1) if whole > 0 else 0.0


def epoch_dt(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc)


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def age(at: datetime | None, now: datetime) -> float | None:
    return None if at is None else round(max(0.0, (now - at).total_seconds()), 1)


def hms(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%H:%M:%S")


def short_uuid(uuid: str) -> str:
    return uuid if len(uuid) <= 16 else uuid[:12] + "…"


__all__ = [
    "age",
    "as_dict",
    "as_dicts",
    "as_float",
    "as_fraction",
    "as_int",
    "as_str",
    "epoch_dt",
    "hms",
    "iso",
    "pct",
    "short_uuid",
]
