"""A try that grew past the memory it was placed with and was not stopped: said, not hidden.

The default fence (``isolation_cap = live``) holds a try to what its GPU's other tenants were not
promised, not to its declaration: a try alone on its GPU, or the first to grow, may go far past
what it declared, and only the try that grows into a neighbour's promise is stopped
(docs/isolation.md).  :func:`grown_line` says so for one try from what its record holds.
"""

from __future__ import annotations

GROWN_TOLERANCE = 0.10  # a peak this share above the placement is jitter (as the outgrown rule's)
_MIB_PER_GIB = 1024


def grown_line(
    outcome: str, peak_mib: int | None, placed_mib: int | None, declared: bool, cap_rule: str = "live"
) -> str | None:
    """``grew to 30.0 GiB past its declared 8.0 GiB and was not stopped: ...``; None where the try
    kept near its placement, was stopped (OOM, failed) or is not measured yet."""
    if outcome not in ("success", "running") or not peak_mib or not placed_mib:
        return None
    if peak_mib <= placed_mib * (1.0 + GROWN_TOLERANCE):
        return None
    what = "declared" if declared else "reserved"
    head = f"grew to {peak_mib / _MIB_PER_GIB:.1f} GiB past its {what} {placed_mib / _MIB_PER_GIB:.1f} GiB"
    if cap_rule == "live":
        why = (
            "the live cap holds a try only out of what its co-tenants were promised, so alone on its GPU"
            " (or the first to grow) it was let through"
        )
        after = "a neighbour placed now would" if outcome == "running" else "a neighbour placed beside it would have"
        return f"{head} and was not stopped: {why}; {after} its memory kept, and this try stopped if it grew on"
    return f"{head} and was not stopped (what isolation {cap_rule} holds: docs/isolation.md)"


__all__ = ["GROWN_TOLERANCE", "grown_line"]
