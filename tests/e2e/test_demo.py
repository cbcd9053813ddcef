"""`carma demo` (what `make demo` runs): finishes, shows an OOM recovered, stops what it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _cells(line: str) -> list[str]:
    """The cells of one row of a rich table, or [] for a line that is not a row."""
    if not line.startswith("│"):
        return []
    return [c.strip() for c in line.strip().strip("│").split("│")]


def test_demo_runs_reports_and_cleans_up(tmp_path: Path) -> None:
    carma = str(Path(sys.executable).with_name("carma"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["COLUMNS"] = "200"  # one report row per line
    home = tmp_path / "demo" / "airflow"
    out = subprocess.run(
        [carma, "demo", "--home", str(home), "--out", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "carma_demo: success" in out.stdout
    # the underestimated task hit a CUDA OOM and its retry succeeded: its row says so, with 2 tries
    row = next(line for line in out.stdout.splitlines() if line.strip("│ ").startswith("maskrcnn"))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[4] == "2" and cells[5] == "oom -> success", row
    # makespans like with like: simulated policies side by side, the measured run on a row of its own
    rows = {c[0]: c for c in map(_cells, out.stdout.splitlines()) if c and c[0].startswith(("simulator", "measured"))}
    plain = rows["simulator: training time only, no Airflow"]
    excl, ours = (float(c.removesuffix(" s")) for c in plain[1:3])
    assert plain[3].endswith("x") and abs(float(plain[3][:-1]) - ours / excl) < 0.03, plain  # cells are rounded
    with_startup = next(c for k, c in rows.items() if k.startswith("simulator: + "))
    assert float(with_startup[1].removesuffix(" s")) > excl, with_startup  # start-up costs time in both
    measured = rows["measured here: Airflow + CarmaExecutor, wall time"]
    assert measured[1] == "not run" and measured[2].endswith(" s") and measured[3] == "-", measured
    assert "Exclusive allocation was not run here" in " ".join(out.stdout.split())  # however it wraps
    assert (tmp_path / "out" / "demo_timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "stopped every process the demo started" in out.stdout
    pids = json.loads((home / "pids.json").read_text())
    assert pids and not any(_alive(p) for p in pids)
