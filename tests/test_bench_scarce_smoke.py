"""bench/scarce_gpus.py still runs and prints its ratios side by side (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_scarce_gpus_quick_prints_a_row_per_cell_and_the_summary() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "scarce_gpus.py"), "--quick", "--jobs", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    rows = [line for line in out.splitlines() if line.startswith("2x")]
    assert len(rows) == 6  # two clusters' traces, one truth, two speed truths
    assert "ct's mean JCT <= ct-index's in" in out and "geometric mean of mean-JCT ratios to mfm" in out
