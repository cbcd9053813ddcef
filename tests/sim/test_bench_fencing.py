"""bench/fencing.py runs and prints its figures (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fencing_bench_prints_victims_and_ratios(tmp_path: Path) -> None:
    target = tmp_path / "fencing.json"
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "fencing.py"),
            "--seeds",
            "1",
            "--truth-seeds",
            "2",
            "--json",
            str(target),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "victims none/caps" in out.stdout and "sweep(1)" in out.stdout
    assert "over 2 truth seeds" in out.stdout and "per crash: lost" in out.stdout
    rows = json.loads(target.read_text())
    assert {r["trace"] for r in rows} == {"t1", "t2", "sweep0", "t1-seeds", "t2-seeds"}
    assert all(r["victims_caps"] == 0 and r["lost_caps"] == 0 for r in rows)
    seeded = [r for r in rows if r["trace"].endswith("-seeds")]
    assert all(len(r["jct_ratios"]) == 2 and r["jct_se"] >= 0 for r in seeded)
    # unfenced, some truth seed crashes a try that stayed within its promise; fenced, none
    assert sum(r["victims_none"] for r in seeded) > 0
