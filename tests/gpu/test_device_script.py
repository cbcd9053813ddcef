"""bench/gpu/device.sh: the one prepared device call, played on simulated GPUs.

The dry run takes every step the GPU machine takes (the machine, NVML's cost per call kind,
Airflow mode under exclusive, most-free-memory and completion-time side by side, the fence
check) and must leave what the device tool brings back: at most 8 files, named in letters,
digits, '.', '_' and '-'.  A short budget skips the steps it cannot hold, each with a line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE_SH = ROOT / "bench" / "gpu" / "device.sh"
POLICIES = ["exclusive", "most-free-memory", "completion-time"]


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


@pytest.mark.e2e
@pytest.mark.slow
def test_the_dry_run_writes_every_figure_in_at_most_eight_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # a 2-core CI machine takes several times the GPU machine's minutes: the budget is not under test here
    proc = _run(out, budget=1500, timeout=1800)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    assert "skipped" not in text, text[-4000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files
    assert {"device.log", "nvml-cost.json", "compare.json", "figures.json", "timeline.png", "airflow-work.tgz",
            "fence.log"} <= set(files)  # fmt: skip

    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["policies"] == POLICIES and cmp["kit"]["mode"] == "airflow"
    for policy in POLICIES:
        run = cmp["runs"][policy]
        assert run["tasks_succeeded"] == 8 and not run["failed_tasks"], run
    # the default crashes no truthfully declared task; memory-only most-free-memory may (a figure)
    assert not cmp["runs"]["completion-time"]["victims"] and not cmp["runs"]["exclusive"]["victims"]
    assert cmp["victims"] == len(cmp["runs"]["most-free-memory"]["victims"])
    against = cmp["against"]["completion-time"]
    assert set(against) == {"exclusive", "most-free-memory"}
    assert against["exclusive"]["makespan_ratio"] == pytest.approx(
        cmp["runs"]["completion-time"]["makespan_s"] / cmp["runs"]["exclusive"]["makespan_s"]
    )
    assert "completion-time vs most-free-memory: makespan" in text

    cost = json.loads((out / "nvml-cost.json").read_text())["settings"]
    assert cost["5"]["calls_per_gpu_second"] < cost["1"]["calls_per_gpu_second"]
    assert cost["5"]["calls"]["nvmlDeviceGetMemoryInfo"]["calls_per_gpu_sample"] == pytest.approx(1.0)
    assert "[nvml-cost] nvml_detail_every=5:" in text

    with tarfile.open(out / "airflow-work.tgz") as tar:
        names = tar.getnames()
    for policy in POLICIES:
        assert any(n.endswith(f"{policy}/evidence.json") for n in names), names[:50]
    assert "[fence] " in (out / "fence.log").read_text()
    assert re.search(r"\[device\] done in \d+ s of 1500 s \(exit 0\)", text)
