"""The GPU machines' offline install, rehearsed: no package index, the wheelhouse alone.

``bench/gpu/prepare_wheels.sh`` makes the wheelhouse a device call carries (carma-airflow's own
wheel, Airflow 3.3.2 and what Airflow mode needs, minus the large packages the GPU image already
has) and, with ``--full``, every wheel a bare Python needs.  This test plays the GPU machine: a
fresh virtual environment of the GPU machines' Python (3.12 where this machine has it) gets the
GPU image's packages from the full wheelhouse, then ``bench/gpu/run.sh --mode airflow --dry-run``
installs carma-airflow and Airflow from the carried wheelhouse alone (``pip --isolated install
--no-index --find-links``) and runs the kit's DAG through a real Airflow with CarmaExecutor on
simulated GPUs.  The wheelhouses are kept under ``out/gpu-wheels/<key>`` (the key: the script,
constraints.txt, pyproject.toml, the Python version), so a second run downloads nothing.

What it cannot rehearse: the GPU image's own versions of numpy, pandas, matplotlib and the rest
(here the versions constraints.txt pins), the image's pip, CUDA, NVML and PyTorch (docs/gpu-kit.md).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / "bench" / "gpu"
GPU_PYTHON = "3.12"  # the GPU machines' (docs/gpu-kit.md: Python 3.12.3 with PyTorch 2.11)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def gpu_python() -> Path | None:
    """An interpreter of the GPU machines' Python version on this machine, if any."""
    candidates = [
        *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{GPU_PYTHON}.*/bin/python{GPU_PYTHON}"))),
        *sorted(glob.glob(f"/usr/bin/python{GPU_PYTHON}")),
    ]
    found = shutil.which(f"python{GPU_PYTHON}")
    for path in [*candidates, *([found] if found else [])]:
        out = subprocess.run(
            [path, "-c", "import sys, venv; print(sys.version_info[:2])"], capture_output=True, check=False
        )
        if out.returncode == 0 and out.stdout.decode().strip() == str(tuple(int(x) for x in GPU_PYTHON.split("."))):
            return Path(path)
    return None


def _key() -> str:
    digest = hashlib.sha256()
    for name in ("bench/gpu/prepare_wheels.sh", "constraints.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    digest.update(GPU_PYTHON.encode())
    return digest.hexdigest()[:12]


def _prepare(dest: Path, *flags: str) -> None:
    """The wheelhouse at ``dest``, made once per key (written beside it, then renamed)."""
    if (dest / ".complete").exists():
        return
    part = dest.with_name(dest.name + f".part{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    out = subprocess.run(
        [str(GPU_DIR / "prepare_wheels.sh"), *flags, str(part)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert out.returncode == 0, (
        "bench/gpu/prepare_wheels.sh failed (it needs PyPI or pip's cache):\n" + out.stdout[-2000:] + out.stderr[-3000:]
    )
    assert "prepare_wheels: " in out.stdout and " MiB" in out.stdout, out.stdout
    (part / ".complete").write_text(out.stdout)
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)


def _wheel_names(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.whl")}


def test_airflow_mode_installs_offline_from_the_carried_wheels_and_runs_the_kit(tmp_path: Path) -> None:
    python = gpu_python()
    if python is None:
        pytest.skip(f"no Python {GPU_PYTHON} here (the GPU machines' version): pyenv install {GPU_PYTHON}")
    cache = ROOT / "out" / "gpu-wheels" / _key()
    carried, full = cache / "carried", cache / "full"
    _prepare(carried)
    _prepare(full, "--full")
    # the carried wheelhouse fits a device call beside the working tree, and holds the project
    summary = (carried / ".complete").read_text()
    carry_line = next(line for line in summary.splitlines() if "a device call carrying it" in line)
    carry_mib = int(carry_line.split(" = ")[1].split(" MiB")[0])
    assert carry_mib < 64, carry_line
    assert any(n.startswith("carma_airflow-") for n in _wheel_names(carried))
    assert any(n.startswith("apache_airflow-3.3.2-") for n in _wheel_names(carried))
    assert not any(n.startswith(("torch-", "numpy-", "nvidia_cublas")) for n in _wheel_names(carried))

    # the GPU machine: its Python, bare, then the image's packages (what the carried wheels leave out)
    venv = tmp_path / "gpu-venv"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    image = sorted({n.split("-")[0] for n in _wheel_names(full) - _wheel_names(carried)})
    assert "numpy" in image and "pandas" in image and "matplotlib" in image, image
    pip = [str(py), "-m", "pip", "--isolated", "install", "-q", "--disable-pip-version-check", "--no-index"]
    subprocess.run([*pip, "--find-links", str(full), *image], check=True, timeout=600, capture_output=True)
    assert subprocess.run([str(py), "-c", "import airflow"], capture_output=True, check=False).returncode != 0

    out = tmp_path / "kit"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "AIRFLOW", "CUDA_VISIBLE"))}
    env.update({"PYTHON": str(py), "PIP_INDEX_URL": "http://127.0.0.1:9/nowhere"})  # --isolated must ignore it
    proc = subprocess.run(
        [str(GPU_DIR / "run.sh"), "--mode", "airflow", "--dry-run", "--wheels", str(carried),
         "--policies", "exclusive,completion-time", "--sim-gpus", "1xH200-141GB", "--out", str(out)],
        capture_output=True, text=True, timeout=1500, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    assert "[kit] installing Airflow 3.3.2 and carma-airflow from" in text and "[kit] installed offline in" in text
    # carma-airflow came from its wheel, not from the tree
    shown = subprocess.run(
        [str(py), "-m", "pip", "show", "-f", "carma-airflow"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0 and "Editable project location" not in shown.stdout, shown.stdout
    fig = json.loads((out / "figures.json").read_text())
    assert fig["kit"]["mode"] == "airflow" and fig["kit"]["python"].startswith(GPU_PYTHON + ".")
    assert fig["kit"]["policies"] == ["exclusive", "completion-time"]
    for run in fig["runs"].values():
        assert run["tasks_succeeded"] == 8 and not run["failed_tasks"], run
    ev = json.loads((out / "work" / "completion-time" / "evidence.json").read_text())
    assert ev["tries_in_store"] >= 8 and ev["tries_complete"] == ev["tries_in_store"], ev
