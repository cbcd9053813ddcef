"""GPU samples as the store carries them: plain JSON-safe dicts, one per GPU, in the host's row."""

from __future__ import annotations

from typing import Any

from carma_airflow.monitor.base import GpuSample, ProcessUsage

_FLOATS = ("busy", "smact", "smocc", "drama", "power_w", "energy_j")


def to_json(sample: GpuSample) -> dict[str, Any]:
    """One sample as a JSON-safe dict (processes as ``[pid, used_mib, sm_util]``; sm_util may be null)."""
    return {
        "uuid": sample.uuid,
        "index": sample.index,
        "name": sample.name,
        "host": sample.host,
        "memory_total_mib": sample.memory_total_mib,
        "memory_used_mib": sample.memory_used_mib,
        "memory_free_mib": sample.memory_free_mib,
        "at": sample.at,
        **{name: getattr(sample, name) for name in _FLOATS},
        "activity_source": sample.activity_source,
        "processes": [[p.pid, p.used_mib, p.sm_util] for p in sample.processes],
        "error": sample.error,
    }


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def from_json(data: dict[str, Any], host: str) -> GpuSample:
    """The sample back from its dict; ``host`` is the row's host (the agent's name wins over the dict's)."""
    processes = tuple(
        ProcessUsage(int(p[0]), int(p[1]), _float(p[2]) if len(p) > 2 else None)  # an older agent: [pid, mib]
        for p in data.get("processes") or ()
        if isinstance(p, (list, tuple)) and len(p) >= 2
    )
    error = data.get("error")
    return GpuSample(
        uuid=str(data["uuid"]),
        index=int(data.get("index", 0)),
        name=str(data.get("name", "")),
        host=host,
        memory_total_mib=int(data.get("memory_total_mib") or 0),
        memory_used_mib=int(data.get("memory_used_mib") or 0),
        memory_free_mib=int(data.get("memory_free_mib") or 0),
        at=float(data.get("at") or 0.0),
        busy=_float(data.get("busy")),
        smact=_float(data.get("smact")),
        smocc=_float(data.get("smocc")),
        drama=_float(data.get("drama")),
        activity_source=str(data.get("activity_source", "none")),
        power_w=_float(data.get("power_w")),
        energy_j=_float(data.get("energy_j")),
        processes=processes,
        error=None if error is None else str(error),
    )
