"""The kit's fence check in its dry run (bench/gpu/gpukit/fence_check.py): the grower gets the OOM
past its cap and the neighbour finishes; unfenced, the neighbour crashes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fence_dry_run_passes_both_scenarios() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "CUDA_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), "fence", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[fence] framework: PASS: grower: cap-oom; neighbour: finished" in proc.stdout
    assert "[fence] none: PASS: unfenced: the grower got its memory and the neighbour crashed" in proc.stdout
