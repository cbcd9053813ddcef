"""The GPU machines' offline install and the device call, rehearsed: no package index, the
carried wheelhouse alone, then ``bench/gpu/device.sh --dry-run`` from that install.

``bench/gpu/prepare_wheels.sh`` makes the wheelhouse a device call carries (carma-airflow's own
wheel, Airflow 3.3.2 and what Airflow mode needs, minus the large packages the GPU image already
has) and, with ``--full``, every wheel a bare Python needs.  This test plays the GPU machine: a
fresh virtual environment of the GPU machines' Python (3.12 where this machine has it) gets the
GPU image's packages from the full wheelhouse and is the ``python3`` on ``PATH``; then
``bench/gpu/device.sh --dry-run`` runs every step the device call takes (the machine, NVML's cost
per call kind, Airflow mode under exclusive, most-free-memory and completion-time side by side,
the fence check) with that interpreter: its Airflow step (``run.sh --mode airflow --dry-run``)
installs carma-airflow and Airflow from the carried wheelhouse alone (``pip --isolated install
--no-index --find-links``) and runs the kit's DAG through a real Airflow with CarmaExecutor on a
simulated H200, and everything must come back as the device tool brings it back: at most 8
files, named in letters, digits, '.', '_' and '-'.  (The short-budget path of device.sh, each step
skipped with its line, is tests/gpu/test_device_script.py.)

The wheelhouses are kept outside the clone, under ``$CARMA_GPU_WHEELS_CACHE`` or
``${XDG_CACHE_HOME:-~/.cache}/carma-airflow/gpu-wheels/<key>`` (the key: the script,
constraints.txt, pyproject.toml, the Python version), so a fresh clone on the same machine
downloads nothing; a miss builds them (PyPI or pip's cache must be reachable then).

What it cannot rehearse: the GPU image's own versions of numpy, pandas, matplotlib and the rest
(here the versions constraints.txt pins), the image's pip, CUDA, NVML and PyTorch (docs/gpu-kit.md).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / "bench" / "gpu"
GPU_PYTHON = "3.12"  # the GPU machines' (docs/gpu-kit.md: Python 3.12.3 with PyTorch 2.11)
POLICIES = ["exclusive", "most-free-memory", "completion-time"]  # device.sh's, side by side
BUDGET_S = 1500  # a 2-core CI machine takes several times the GPU machine's minutes: the budget is not under test here

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


def wheel_cache() -> Path:
    """Where the wheelhouses of this key are kept: outside the clone, so that a fresh clone on
    the same machine (CI's) finds them."""
    if os.environ.get("CARMA_GPU_WHEELS_CACHE"):
        return Path(os.environ["CARMA_GPU_WHEELS_CACHE"]) / _key()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "carma-airflow" / "gpu-wheels" / _key()


def _prepare(dest: Path, *flags: str) -> None:
    """The wheelhouse at ``dest``, made once per key (written beside it, then renamed)."""
    if (dest / ".complete").exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
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
    try:
        part.rename(dest)
    except OSError:  # another session made it first: theirs is whole
        shutil.rmtree(part, ignore_errors=True)


def _wheel_names(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.whl")}


def test_the_device_call_runs_from_an_offline_install_of_the_carried_wheels(tmp_path: Path) -> None:
    python = gpu_python()
    if python is None:
        pytest.skip(f"no Python {GPU_PYTHON} here (the GPU machines' version): pyenv install {GPU_PYTHON}")
    cache = wheel_cache()
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
    # (--no-compile: the image's byte code is no part of the rehearsal)
    install = [*pip, "--no-compile", "--find-links", str(full), *image]
    subprocess.run(install, check=True, timeout=600, capture_output=True)
    assert subprocess.run([str(py), "-c", "import airflow"], capture_output=True, check=False).returncode != 0

    # the device call, as on the GPU machine: its python3 first on PATH, the carried wheels only
    out = tmp_path / "out"
    dropped = ("PIP_", "PYTHON", "AIRFLOW", "CUDA_VISIBLE", "OUT", "DEVICE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        {
            "PYTHON": str(py),
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "CARMA_GPU_WHEELS": str(carried),
            "DEVICE_BUDGET_S": str(BUDGET_S),
            "PIP_INDEX_URL": "http://127.0.0.1:9/nowhere",  # --isolated must ignore it
        }
    )
    proc = subprocess.run(
        [str(GPU_DIR / "device.sh"), "--dry-run", "--out", str(out)],
        capture_output=True, text=True, timeout=BUDGET_S + 300, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    assert "skipped" not in text, text[-4000:]
    assert re.search(rf"\[device\] done in \d+ s of {BUDGET_S} s \(exit 0\)", text), text[-3000:]
    assert re.search(rf"python3 {GPU_PYTHON}\.\d+ {re.escape(str(venv))}", text), text[:3000]
    assert "[kit] installing Airflow 3.3.2 and carma-airflow from" in text and "[kit] installed offline in" in text
    # carma-airflow came from its wheel, not from the tree
    shown = subprocess.run(
        [str(py), "-m", "pip", "show", "-f", "carma-airflow"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0 and "Editable project location" not in shown.stdout, shown.stdout

    # what the device tool brings back
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files
    assert {"device.log", "nvml-cost.json", "compare.json", "figures.json", "timeline.png", "airflow-work.tgz",
            "fence.log"} <= set(files)  # fmt: skip

    # Airflow mode: three policies side by side, every task succeeded under each
    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["policies"] == POLICIES and cmp["kit"]["mode"] == "airflow"
    assert cmp["kit"]["python"].startswith(GPU_PYTHON + "."), cmp["kit"]
    for policy in POLICIES:
        run = cmp["runs"][policy]
        assert run["tasks_succeeded"] == 8 and not run["failed_tasks"], run
    fig = json.loads((out / "figures.json").read_text())
    assert fig["kit"]["mode"] == "airflow" and fig["kit"]["policies"] == POLICIES
    # the default crashes no truthfully declared task; memory-only most-free-memory may (a figure)
    assert not cmp["runs"]["completion-time"]["victims"] and not cmp["runs"]["exclusive"]["victims"]
    assert cmp["victims"] == len(cmp["runs"]["most-free-memory"]["victims"])
    against = cmp["against"]["completion-time"]
    assert set(against) == {"exclusive", "most-free-memory"}
    assert against["exclusive"]["makespan_ratio"] == pytest.approx(
        cmp["runs"]["completion-time"]["makespan_s"] / cmp["runs"]["exclusive"]["makespan_s"]
    )
    assert "completion-time vs most-free-memory: makespan" in text

    # NVML's cost per call kind: fewer calls per GPU-second at the default than at 1
    cost = json.loads((out / "nvml-cost.json").read_text())["settings"]
    assert cost["5"]["calls_per_gpu_second"] < cost["1"]["calls_per_gpu_second"]
    assert cost["5"]["calls"]["nvmlDeviceGetMemoryInfo"]["calls_per_gpu_sample"] == pytest.approx(1.0)
    assert "[nvml-cost] nvml_detail_every=5:" in text

    # each policy's evidence in the archive; under the default every try carma's store holds has
    # its placement, fence and end
    with tarfile.open(out / "airflow-work.tgz") as tar:
        names = tar.getnames()
        for policy in POLICIES:
            assert any(n.endswith(f"{policy}/evidence.json") for n in names), names[:50]
        member = next(n for n in names if n.endswith("completion-time/evidence.json"))
        handle = tar.extractfile(member)
        assert handle is not None
        ev = json.loads(handle.read())
    assert ev["tries_in_store"] >= 8 and ev["tries_complete"] == ev["tries_in_store"], ev
    assert "[fence] " in (out / "fence.log").read_text()
