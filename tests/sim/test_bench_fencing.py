"""bench/fencing.py runs and prints its figures (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fencing_bench_prints_each_hosts_rules_against_none(tmp_path: Path) -> None:
    target = tmp_path / "fencing.json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fencing.py"), "--smoke", "--jobs", "1", "--json", str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    for host in ("framework", "mps", "driver"):
        assert f"host {host}: auto -> {host}" in out.stdout
    assert "targets at growth 0.3" in out.stdout and "the numbers favour" in out.stdout
    got = json.loads(target.read_text())
    rows, verdicts = got["rows"], got["verdicts"]
    assert {r["cell"] for r in rows} == {"t1", "t2", "sweep"}
    assert {r["model"] for r in rows} == {"promise", "protective", "live@2", "live@1", "live+start@2"}
    assert all(r["runs"] == (1 if r["cell"] == "sweep" else 2) and r["jct_se"] >= 0 for r in rows)
    assert set(verdicts) == {"framework", "mps", "driver"}
    assert verdicts["mps"]["default"] == "live"  # the pinned limit fixed at start, PyTorch's fraction live
    assert "live" in verdicts["mps"]["mean_jct_ratio"]
    # a live cap stops only growers: no victims, on any cell
    assert all(r["victims"] == 0 for r in rows if r["model"].startswith("live"))
