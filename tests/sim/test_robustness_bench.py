"""bench/robustness.py runs the truth grid and counts the checks each candidate meets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_grid_prints_ratios_and_counts_checks(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "robustness.py"),
            "--seeds",
            "1",
            "--pairs",
            str(tmp_path / "absent.csv"),  # no pair table: that truth is left out
            "--candidates",
            "interference-aware",
            "--json",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "checks met" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["checks"] == 7 * 3  # six sharing truths and the drawn one, three workloads each
    assert set(data["results"]) >= {"b0.1 s0.6", "b0.8 s1.0", "types:1"}
    cell = data["results"]["b0.8 s1.0"]["interference-aware"]["t1"]
    assert cell[0] > 0 and cell[1] > 0  # ratios of JCT and makespan to most-free-memory
    assert 0 <= data["met"]["interference-aware"] <= data["checks"]
