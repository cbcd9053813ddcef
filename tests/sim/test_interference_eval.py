"""bench/interference_eval.py reads any table of measured pairs and scores the models on held-out pairs."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "interference_eval.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("interference_eval", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["interference_eval"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def planted_table(path: Path, *, seed: int = 0, types: int = 10, mild: bool = False) -> Path:
    """A long-form table (job, partner, solo, shared) from planted sensitivities and pressures."""
    rng = random.Random(seed)
    names = [f"job{i}" for i in range(types)]
    sens = {n: rng.uniform(0.2, 2.0) for n in names}
    pres = {n: rng.uniform(0.2, 2.0) for n in names}
    rows = []
    for gpu, level in (("old", 0.5), ("new", 0.05)) if not mild else (("new", 0.05),):
        for job in names:
            for partner in names:
                solo = rng.uniform(1.0, 10.0)
                speed = math.exp(-level * sens[job] * pres[partner] + rng.gauss(0.0, 0.04))
                rows.append(
                    {"gpu": gpu, "job": job, "partner": partner, "solo": solo, "shared": solo * min(1.0, speed)}
                )
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_wide_tables_become_one_row_per_job_beside_a_partner(tmp_path: Path) -> None:
    b = bench()
    wide = pd.DataFrame(
        {
            "job_a": ["a", "a"],
            "job_b": ["b", "a"],
            "solo_a": [2.0, 2.0],
            "solo_b": [4.0, 2.0],
            "shared_a": [1.0, 1.5],
            "shared_b": [3.0, 1.5],
        }
    )
    wide.to_csv(tmp_path / "wide.csv", index=False)
    rows = b.load_pairs(tmp_path / "wide.csv")
    got = sorted(zip(rows["job"], rows["partner"], rows["speed"], strict=True))
    assert got == [("a", "a", 0.75), ("a", "a", 0.75), ("a", "b", 0.5), ("b", "a", 0.75)]
    assert set(rows["pair"]) == {"a | a", "a | b"}
    (tmp_path / "bad.csv").write_text("x,y\n1,2\n")
    with pytest.raises(SystemExit, match="need columns"):
        b.load_pairs(tmp_path / "bad.csv")


def test_planted_terms_are_found_and_intervals_cover(tmp_path: Path) -> None:
    b = bench()
    results = b.evaluate(b.load_pairs(planted_table(tmp_path / "t.csv")), folds=5, seed=1)
    old = results["old"]
    assert old["mae_new"] < 0.75 * old["mae_today"]
    assert old["mae_new"] < old["mae_none"]
    assert 0.8 <= old["coverage_new_90"] <= 0.97
    assert old["mean_confidence"] == pytest.approx(old["within_5pct"], abs=0.1)
    # a GPU with mild interference: the cold prior is not worse than "no interference"
    assert results["new"]["cold_new_over_none"] <= 1.0
    assert results["new"]["mae_cold_today"] > results["new"]["mae_none"]  # the calibration's prior was


def test_the_script_prints_every_gpu_and_the_targets(tmp_path: Path) -> None:
    table = planted_table(tmp_path / "t.csv", mild=True)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--table", str(table), "--json", str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "MAE new" in out.stdout and "targets met:" in out.stdout
    data = json.loads((tmp_path / "o.json").read_text())
    assert set(data["results"]) == {"new"}


def test_pressure_splits_and_confidence_fifths_are_reported(tmp_path: Path) -> None:
    # issue 23: learned without the co-tenants' types (the executor before) the pressure half is
    # lost; a job never seen is its own split; the fifths by confidence are printed now and before
    b = bench()
    table = b.load_pairs(planted_table(tmp_path / "t.csv", types=10))
    pair = b.evaluate(table, folds=5, seed=1)["old"]
    assert pair["mae_new"] < 0.8 * pair["mae_own_only"]
    assert pair["hit_q5"] > pair["hit_q1"] and all(f"hit_before_q{q}" in pair for q in range(1, 6))
    config = b.evaluate(table, folds=5, seed=1, split="config")["old"]
    assert config["n"] == pair["n"]  # every row is held out once, as a job never seen
    assert config["mae_new"] > pair["mae_new"]  # an unseen job is harder than an unseen pair
    assert b.quintile_hits([(0.1, False), (0.2, False), (0.3, True), (0.4, True), (0.5, True)]) == [0, 0, 1, 1, 1]
    with pytest.raises(SystemExit, match="unknown split"):
        b.evaluate(table, split="nope")


def test_fifths_within_each_fold_rank_each_models_own_predictions() -> None:
    # fold 0's model is sure of everything and misses, fold 1's unsure and hits: pooled, the sure
    # fifths miss; ranked within each fold, the fifths pool one model's ranks at a time
    b = bench()
    hits = [(0.9, False), (0.8, False), (0.7, True), (0.6, True), (0.5, True)]
    hits += [(0.3, True), (0.2, True), (0.1, False), (0.05, False), (0.01, False)]
    folds = [0] * 5 + [1] * 5
    assert b.quintile_hits(hits) == [0.0, 0.5, 1.0, 1.0, 0.0]
    assert b.within_fold_hits(hits, folds) == [0.5, 0.5, 0.5, 0.5, 0.5]
    assert b.within_fold_hits([(0.1, False), (0.9, True)], [3, 3])[0] == 0.0  # small folds: fifths left empty
    assert math.isnan(b.within_fold_hits([(0.1, False), (0.9, True)], [3, 3])[1])


def test_a_synthetic_table_of_the_models_form_is_scored_with_fifths_within_folds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = bench()
    assert b.main(["--synthetic", "6", "--split", "config"]) == 0
    out = capsys.readouterr().out
    assert "synthetic table of 6 types (seed 0)" in out and "fifths within each fold's own model" in out
    table = b.synthetic_pairs(8, seed=3)
    assert len(table) == 64 and set(table["gpu"]) == {"synthetic"} and table["speed"].between(0.0, 1.0).all()
    assert table.equals(b.synthetic_pairs(8, seed=3))  # seeded
    config = b.evaluate(table, folds=4, seed=3, split="config")["synthetic"]
    assert config["n"] == 64 and all(0.0 <= config[f"hit_fold_q{q}"] <= 1.0 for q in range(1, 6))
