"""The benchmark scripts still run and print their figures (no timing is asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_speed_quick_prints_every_figure_as_json() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speed.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    text = json.dumps(data)
    for fragment in ("decide", "pass", "sim"):
        assert fragment in text


def test_paper_table_runs_and_checks_targets(tmp_path: Path) -> None:
    target = tmp_path / "table.json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "paper_table.py"), "--seeds", "1", "--json", str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "== targets" in out.stdout
    rows = json.loads(target.read_text())
    assert {"trace_t1.csv", "trace_t2.csv", "sweep"} <= set(rows)
    policies = {r["policy"] for r in rows["trace_t1.csv"]}
    assert {"exclusive", "round-robin", "static-2", "static-3", "interference-aware"} <= policies
