"""Helpers for the simulator tests: writing tiny catalogues and traces."""

from __future__ import annotations

from pathlib import Path

CATALOG_HEADER = (
    "task,script,family,batch_size,epochs,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes"
)
TRACE_HEADER = "job_id,submit_s,task"


def catalog_row(**overrides: object) -> str:
    """One catalogue line; every column has a harmless default."""
    row: dict[str, object] = {
        "task": "t",
        "script": "t",
        "family": "cnn",
        "batch_size": 32,
        "epochs": 1,
        "gpus": 1,
        "peak_mem_mib": 1000,
        "horus_mib": 1000,
        "faketensor_mib": 1000,
        "gpumemnet_mib": 8000,
        "solo_minutes": 1,
    }
    row.update(overrides)
    return ",".join(str(row[c]) for c in CATALOG_HEADER.split(","))


def write_catalog(path: Path, *rows: dict[str, object]) -> Path:
    path.write_text("\n".join([CATALOG_HEADER, *(catalog_row(**r) for r in rows)]) + "\n")
    return path


def write_trace(path: Path, *arrivals: tuple[int, float, str]) -> Path:
    lines = [TRACE_HEADER, *(f"{j},{s},{t}" for j, s, t in arrivals)]
    path.write_text("\n".join(lines) + "\n")
    return path
