"""bench/gpu/run.sh --dry-run: the light-mode driver end to end on simulated GPUs (what CI runs).

One dry run (about 20 s) serves every test of this module.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "bench" / "gpu" / "run.sh"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    out = tmp_path_factory.mktemp("gpu-kit") / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "CUDA_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [str(RUN_SH), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
        cwd=ROOT,
    )
    yield proc, out


@pytest.fixture(scope="module")
def figures(dry_run: tuple[subprocess.CompletedProcess[str], Path]) -> dict[str, Any]:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "figures.json").read_text())


def _overlaps(tries: list[dict[str, Any]]) -> int:
    """Most tries that ran at once on one GPU."""
    worst = 0
    for t in tries:
        for uuid in t["gpu_uuids"]:
            at_start = [o for o in tries if uuid in o["gpu_uuids"] and o["started_s"] <= t["started_s"] < o["ended_s"]]
            worst = max(worst, len(at_start))
    return worst


def test_prints_every_figure(dry_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, _ = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    for fragment in (
        "DRY RUN",
        "makespan ratio ours/exclusive:",
        "mean SM activity",
        "mean SM occupancy",
        "peak memory used (MiB)",
        "energy (J)",
        "slowdown",
        "CUDA OOM: underdeclared",
        "recovery: CUDA OOM at",
        "monitor sampling (simulated",
        "light mode finished",
    ):
        assert fragment in text, fragment


def test_both_runs_complete_every_task(figures: dict[str, Any]) -> None:
    assert figures["kit"]["dry_run"] is True
    assert figures["kit"]["backend"] == "simulated" and figures["kit"]["mode"] == "light"
    ex, ours = figures["runs"]["exclusive"], figures["runs"]["ours"]
    assert (ex["policy"], ours["policy"]) == ("exclusive", "interference-aware")
    assert ex["tasks_succeeded"] == ours["tasks_succeeded"] == 8
    assert not ex["failed_tasks"] and not ours["failed_tasks"]
    assert not ex["timed_out"] and not ours["timed_out"]


def test_exclusive_never_shares_and_ours_shares_within_the_cap(figures: dict[str, Any]) -> None:
    ex, ours = figures["runs"]["exclusive"], figures["runs"]["ours"]
    assert _overlaps(ex["try_list"]) == 1
    assert ex["collocated_tries"] == 0 and ex["ooms"] == 0
    assert ours["collocated_tries"] >= 2
    assert 2 <= _overlaps(ours["try_list"]) <= 3  # interference-aware caps tenants at 3


def test_makespans_and_ratio_are_consistent(figures: dict[str, Any]) -> None:
    cmp = figures["comparison"]
    for name in ("exclusive", "ours"):
        run = figures["runs"][name]
        tries = run["try_list"]
        span = max(t["ended_s"] for t in tries) - min(t["started_s"] for t in tries)
        assert math.isclose(run["makespan_s"], span, rel_tol=1e-9)
        assert cmp["makespan_s"][name] == run["makespan_s"]
    assert math.isclose(cmp["makespan_ratio"], cmp["makespan_s"]["ours"] / cmp["makespan_s"]["exclusive"])
    # two simulated GPUs, sharing where the model allows it: ours finishes first
    assert cmp["makespan_ratio"] < 0.95


def test_slowdowns_come_from_sharing(figures: dict[str, Any]) -> None:
    rows = {r["task"]: r for r in figures["comparison"]["per_task"]}
    assert len(rows) == 8
    for r in rows.values():
        assert math.isclose(r["slowdown"], r["ours_train_s"] / r["exclusive_train_s"])
        if not r["ours_shared_with"]:
            assert r["slowdown"] < 1.2, r  # alone in both runs: about the same time
    shared = [r for r in rows.values() if len(r["ours_shared_with"]) >= 2 and r["task"] != "memory_hog"]
    assert shared and all(r["slowdown"] > 1.1 for r in shared)
    excl = figures["runs"]["exclusive"]["try_list"]
    assert all(t["metrics"]["sim_slowdown"] < 1.05 for t in excl)  # each alone: no slowdown
    assert figures["comparison"]["max_slowdown"] >= figures["comparison"]["mean_slowdown"] > 1.0


def test_oom_is_retried_on_another_gpu_with_more_memory(figures: dict[str, Any]) -> None:
    oom = figures["oom"]
    assert oom["provoked"] and oom["task"] == "underdeclared" and oom["ooms"] == 1
    first, retry = oom["first_try"], oom["retry"]
    assert first["outcome"] == "oom" and "memory_hog" in first["co_tenants"]
    assert "CUDA out of memory" in first["message"]
    assert first["request_mib"] == 2048 and first["peak_mib"] > first["request_mib"]
    assert "retry 1 of 2" in first["recovery"]
    assert retry["try"] == 2 and retry["outcome"] == "success"
    # the retry does not start beside the hog that filled the GPU: it goes to the other GPU, or (on a
    # loaded machine, where the hog may end before the OOM is read) to the same one once the hog has left
    assert oom["retry_clear_of_crash"] and "memory_hog" not in retry["co_tenants"]
    if not oom["retry_on_other_gpu"]:
        hog = [t for t in figures["runs"]["ours"]["try_list"] if t["task"] == "memory_hog"]
        assert hog and all(t["ended_s"] <= retry["started_s"] for t in hog)
    assert retry["request_mib"] >= first["peak_mib"] * 1.25  # the planner's growth, rounded up
    # the retry's GPU had room for what it asked (the first GPU's free memory at its start depends
    # on how far the hog had ramped up by then on a loaded machine: not compared)
    assert retry["gpu_free_at_start_mib"] > retry["request_mib"]
    assert oom["landed_safely"]
    # the exclusive run gave the same task a GPU of its own: no OOM there
    assert figures["runs"]["exclusive"]["ooms"] == 0


def test_gpu_figures_energy_and_sampling_cost(figures: dict[str, Any]) -> None:
    for name in ("exclusive", "ours"):
        gpu = figures["runs"][name]["gpu"]
        assert gpu["activity_source"] == ["simulated"]
        assert 0.0 < gpu["mean_sm_activity"] <= 1.0 and 0.0 < gpu["mean_sm_occupancy"] <= 1.0
        assert gpu["energy_j"] > 0 and gpu["mean_power_w"] > 0
        assert 0 < gpu["mean_memory_used_mib"] <= gpu["peak_memory_used_mib"] <= 2 * 143771
    ex, ours = figures["runs"]["exclusive"]["gpu"], figures["runs"]["ours"]["gpu"]
    assert ours["mean_sm_activity"] > ex["mean_sm_activity"]  # sharing keeps the GPUs busier
    assert figures["comparison"]["energy_ratio"] == pytest.approx(ours["energy_j"] / ex["energy_j"])
    s = figures["sampling"]
    assert s["backend"] == "simulated" and s["gpus_per_sample"] == 2 and s["samples"] > 10
    assert 0 < s["cpu_ms_per_sample"] < 100 and s["wall_ms_per_sample"] >= s["cpu_ms_per_sample"] * 0.5


def test_timeline_and_summary_are_written(dry_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, out = dry_run
    png = (out / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    summary = (out / "summary.txt").read_text()
    assert "makespan ratio ours/exclusive" in summary
    logs = sorted(p.name for p in (out / "work" / "interference-aware").glob("*.log"))
    assert "underdeclared.try1.log" in logs and "underdeclared.try2.log" in logs
