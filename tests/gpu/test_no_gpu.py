"""Without an NVIDIA GPU, run.sh says so in one line and exits 0; gpu tests skip with that line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from gpukit.carma_shim import GUARDS
from gpukit.gpu_check import no_gpu_reason

ROOT = Path(__file__).resolve().parents[2]


def test_run_sh_says_why_in_one_line_and_exits_0(tmp_path: Path) -> None:
    reason = no_gpu_reason()
    if reason is None:
        pytest.skip("this machine has an NVIDIA GPU")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [reason]
    assert reason.startswith("no NVIDIA GPU here (") and "--dry-run" in reason
    assert not (tmp_path / "out").exists()


def test_bad_mode_is_one_error_line() -> None:
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), "--mode", "fast"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --mode is auto, light or airflow, not 'fast'"]


def test_light_mode_gives_tasks_the_executors_environment() -> None:
    import subprocess
    import sys
    from pathlib import Path

    from carma_airflow.launching import taskenv

    assert GUARDS is taskenv.GUARDS  # one definition, shared with CarmaExecutor
    kit = Path(__file__).resolve().parents[2] / "bench" / "gpu"
    probe = "import sys, gpukit.carma_shim; print('airflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=kit, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the GPU machines may have no Airflow
