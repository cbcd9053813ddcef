"""bench/load.py still runs end to end: 12 GPU tasks through a real Airflow, all done (no timing asserted)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_load_bench_runs_12_tasks_to_completion(tmp_path: Path) -> None:
    args = ["--tasks", "12", "--db", "sqlite", "--every", "2", "--out", str(tmp_path), "--timeout", "90"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load.py"), *args],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = re.search(r"^tasks done / failed / other\s+(\d+) / (\d+) / (\d+)$", out.stdout, re.MULTILINE)
    assert done is not None, out.stdout
    assert done.groups() == ("12", "0", "0")
    assert re.search(r"^max wait vs starvation bound \(s\)\s+[\d.]+ / 3600$", out.stdout, re.MULTILINE), out.stdout
    series = json.loads((tmp_path / "load_12.json").read_text())
    assert series["summary"]["done"] == 12
    assert series["samples"] and all(s["rss_mib"] for s in series["samples"])
