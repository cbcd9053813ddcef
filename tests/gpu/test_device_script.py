"""bench/gpu/device.sh: the one prepared device call, played on simulated GPUs.

A short budget skips the steps it cannot hold, each with a line, and still leaves its log under
the output folder.  The full dry run (every step the GPU machine takes: the machine, NVML's cost
per call kind, Airflow mode under exclusive, most-free-memory and completion-time side by side,
the fence check; at most 8 files, named in letters, digits, '.', '_' and '-') runs from an
offline install of the carried wheels, as on the GPU machine: tests/gpu/test_offline_install.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVICE_SH = ROOT / "bench" / "gpu" / "device.sh"


def _run(out: Path, budget: int, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AIRFLOW", "CUDA_VISIBLE", "OUT"))}
    env["DEVICE_BUDGET_S"] = str(budget)
    return subprocess.run(
        [str(DEVICE_SH), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_a_short_budget_skips_each_step_it_cannot_hold_with_a_line(tmp_path: Path) -> None:
    proc = _run(tmp_path / "out", budget=20, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "[device] machine: exit 0" in text
    for name, needs in (("nvml-cost", 30), ("airflow-mode", 240), ("fence", 75)):
        assert re.search(rf"\[device\] {name}: skipped: \d+ s of the 20 s budget left, it needs {needs} s", text), text
    assert (tmp_path / "out" / "device.log").exists()
