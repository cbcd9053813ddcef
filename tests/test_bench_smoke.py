"""The benchmark scripts still run and print their figures (no timing is asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_bench(script: str, *args: str) -> str:
    """``bench/<script>`` with ``args``; its standard output (it must exit 0 within 5 minutes)."""
    cmd = [sys.executable, str(ROOT / "bench" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout


def test_speed_quick_prints_every_figure_as_json() -> None:
    data = json.loads(run_bench("speed.py", "--smoke", "--json").strip().splitlines()[-1])
    text = json.dumps(data)
    for fragment in ("decide", "pass", "sim"):
        assert fragment in text
    figures = data["figures"]
    for state in ("steady", "cold"):  # the next heartbeat decides over the same GPUs and queue: the same tries
        first = figures[f"pass_{state}_cycle_placed_completion-time"]["value"]
        assert first > 0 and figures[f"pass_{state}_heartbeat_placed_completion-time"]["value"] == first
    # a cold pass with fewer free slots than it would place stops at them
    cold = figures["pass_cold_cycle_placed_completion-time"]["value"]
    assert figures["pass_cold_cycle_slots32_placed_completion-time"]["value"] == min(32, cold)
    # after a model hand-over the pass predicts afresh and places what the heartbeat did; the
    # learned model has terms, and its passes place the same tries with it as without a hand-over
    steady = figures["pass_steady_heartbeat_placed_completion-time"]["value"]
    assert figures["pass_steady_handed_over_placed_completion-time"]["value"] == steady
    assert figures["pass_learned_types"]["value"] > 0
    learned = figures["pass_learned_heartbeat_placed"]["value"]
    assert learned > 0 and figures["pass_learned_handed_over_placed"]["value"] == learned


def test_paper_table_runs_and_checks_targets(tmp_path: Path) -> None:
    target = tmp_path / "table.json"
    assert "== targets" in run_bench("paper_table.py", "--seeds", "1", "--json", str(target))
    rows = json.loads(target.read_text())
    assert {"trace_t1.csv", "trace_t2.csv", "sweep"} <= set(rows)
    policies = {r["policy"] for r in rows["trace_t1.csv"]}
    assert {"exclusive", "round-robin", "static-2", "static-3", "interference-aware"} <= policies


def test_deep_queue_saves_a_digest_and_checks_a_run_against_it(tmp_path: Path) -> None:
    ref = tmp_path / "ref.json"
    script = str(ROOT / "bench" / "deep_queue.py")
    subprocess.run([sys.executable, script, "--tasks", "60", "--save", str(ref)], check=True, timeout=300)
    saved = json.loads(ref.read_text())
    assert saved["tasks"] == 60 and len(saved["digest"]) == 64
    compare = [sys.executable, script, "--tasks", "60", "--compare", str(ref)]
    same = subprocess.run(compare, check=False, capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and "identical results: yes" in same.stdout
    ref.write_text(json.dumps({**saved, "digest": "0" * 64}))
    other = subprocess.run(compare, check=False, capture_output=True, text=True, timeout=300)
    assert other.returncode == 1 and "identical results: NO" in other.stdout


def test_learned_interference_prints_what_the_placer_knew_and_the_targets(tmp_path: Path) -> None:
    target = tmp_path / "learned.json"
    script = str(ROOT / "bench" / "learned_interference.py")
    out = subprocess.run(
        [sys.executable, script, "--seeds=1", "--workers=1", "--learned-memory", "--smoke", "--json", str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    rows = [line.split("  ")[0] for line in out.stdout.splitlines() if "+ mem" in line and "targets met" not in line]
    assert rows[:4] == [
        "interference-aware + mem",
        "predictive + mem",
        "interference-aware + mem, warm",
        "predictive + mem, warm",
    ]
    assert len(rows) == 6 * 4  # side by side with the rows without learned memory, per truth
    knowledge = [line for line in out.stdout.splitlines() if "candidate's knowledge" in line]
    assert len(knowledge) == 6  # one per truth
    assert all("activity learned" in line and "interference observations" in line for line in knowledge)
    assert "== targets (candidate)" in out.stdout
    report = json.loads(target.read_text())
    assert report["candidate"] == "predictive" and "fallback='interference-aware'" in report["knobs"]
    assert len(report["checks"]) == 6 * 7 + 3
    by_row = report["checks_by_row"]
    assert list(by_row) == [
        "predictive (candidate)",
        "interference-aware + mem",
        "predictive + mem",
        "interference-aware + mem, warm",
        "predictive + mem, warm",
    ]
    assert all(len(checks) == 6 * 7 + 3 for checks in by_row.values())


def test_heldout_quick_checks_never_worse_per_cell(tmp_path: Path) -> None:
    target = tmp_path / "heldout.json"
    out = run_bench("heldout.py", "--quick", "--jobs", "1", "--json", str(target))
    assert "never worse, of 1 held-out cells" in out
    data = json.loads(target.read_text())
    cell = data["results"]["quick"]["b0.5 s1.0"]["completion-time"]["sweep"]
    # the verdict is the ratios' (and can fail: a ratio over its bound is a miss)
    within = cell["jct"] <= 1.0 and cell["makespan"] <= 1.02 and cell["lost"] <= cell["baseline_lost"]
    assert cell["never_worse"] == within
    assert data["never_worse"]["completion-time"] == int(cell["never_worse"]) and 0.0 < cell["jct"] < 2.0


def test_learning_pools_seeds_and_gives_each_seeds_ratio(tmp_path: Path) -> None:
    target = tmp_path / "learning.json"
    out = run_bench(
        "learning.py",
        *("--sets", "grid", "--estimators", "executor", "--truths", "b0.5", "--no-day3"),
        *("--seeds", "2", "--jobs", "1", "--json", str(target)),
    )
    assert "of 1, 2 seed(s) each" in out and " seeds " in out
    cell = json.loads(target.read_text())["results"]["executor|b0.5|grid|all"]
    by_seed = cell["d2_d1_jct_by_seed"]
    assert len(by_seed) == 2
    # the pooled ratio is of the means over traces and seeds: a mediant of the seeds' own ratios
    assert min(by_seed) - 1e-9 <= cell["d2_d1_jct"] <= max(by_seed) + 1e-9


def test_mixed_fleet_knob_reads_any_case_and_names_what_to_fix() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import mixed_fleet
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert mixed_fleet._knobs("keep_scarce=false,min_gain=0.3,track_record=True") == {
        "keep_scarce": False,
        "min_gain": 0.3,
        "track_record": True,
    }
    # a typo or a word that is no value stops the bench before any run, saying what to give
    bad = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mixed_fleet.py"), "--knob", "keep_scarse=false"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "'keep_scarse' is no CompletionSettings field" in bad.stderr, bad.stderr
    with pytest.raises(SystemExit, match="give true, false, none or a number"):
        mixed_fleet._knobs("keep_scarce=off")


def _mixed_json(
    path: Path,
    ct_scale: dict[str, float],
    traces: tuple[str, ...] = ("s100", "s101", "f10000"),
    speed: str = "spec:0",
) -> Path:
    """A bench/mixed_fleet.py --json of a few cells: the default's JCT and makespan the mfm's times
    the scale given per trace (0.9 where not given)."""
    cells = []
    for i, trace in enumerate(traces):
        for day in (1, 2):
            mfm = [1000.0 + 100 * i + day, 5000.0 + i, 0]
            s = ct_scale.get(trace, 0.9)
            cells.append(
                {
                    "cell": {
                        "cluster": "2xH100-80GB,6xL4",
                        "speed": speed,
                        "truth": "sharing",
                        "trace": trace,
                        "day": day,
                    },
                    "runs": {"mfm": mfm, "ct": [mfm[0] * s * (1 + 0.01 * i), mfm[1] * s, 0]},
                    "targets": [s <= 1.0, True, True],
                }
            )
    path.write_text(json.dumps({"knob": "", "seeds": 1, "cells": cells}))
    return path


def test_paired_says_better_worse_or_within_the_spread_and_refuses_different_cells(tmp_path: Path) -> None:
    before = _mixed_json(tmp_path / "before.json", {})
    faster = _mixed_json(tmp_path / "faster.json", {"s100": 0.8, "s101": 0.81, "f10000": 0.79})
    out = run_bench("paired.py", str(before), str(faster))
    every = next(line for line in out.splitlines() if line.startswith("all"))
    assert every.endswith("| better")  # every cell about 10 % faster: the whole interval below 1
    assert "| 0.889 [" in every  # 0.8 / 0.9, 0.81 / 0.9 and 0.79 / 0.9: their geometric mean
    # the same rule read twice: a ratio of 1 in every cell, within the spread
    same = run_bench("paired.py", str(before), str(before))
    assert "1.000 [1.000, 1.000]" in same and "| within the spread" in same
    # one trace made slower than mfm (two cells of six): W lost in them and said so, yet two cells
    # worse and four the same cannot tell a worse rule from the cells' spread
    slower = _mixed_json(tmp_path / "slower.json", {"s101": 1.1})
    lines = run_bench("paired.py", str(before), str(slower)).splitlines()
    w_line = next(line for line in lines if line.startswith("all"))
    assert "6 ->  4 (+0 -2)" in w_line and w_line.endswith("| within the spread")
    # a table speed truth names its file by the checkout's path: two checkouts' runs are the same cells
    here = _mixed_json(tmp_path / "here.json", {}, speed="table:/work/shared/workloads/gavel_pairs.csv:0")
    there = _mixed_json(tmp_path / "there.json", {}, speed="table:/tmp/shared/workloads/gavel_pairs.csv:0")
    assert "1.000 [1.000, 1.000]" in run_bench("paired.py", str(here), str(there))
    other = _mixed_json(tmp_path / "other.json", {}, traces=("s100", "s102", "f10000"))
    bad = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "paired.py"), str(before), str(other)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "hold different cells" in bad.stderr and "s102" in bad.stderr, bad.stderr
