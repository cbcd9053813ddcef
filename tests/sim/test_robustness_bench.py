"""bench/robustness.py runs the truth grid beside the oracle and checks issue 23's targets per cell;
bench/oracle.py is the completion-time rule fed the simulator's truth."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim import SimConfig, load_catalog, load_trace, packaged, synthetic_trace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the bench's scripts import each other by name
oracle = importlib.import_module("oracle")
robustness = importlib.import_module("robustness")


def test_grid_prints_every_cell_with_the_oracle_and_the_targets(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "robustness.py"),
            "--seeds",
            "1",
            "--truth-seeds",
            "1",
            "--pairs",
            str(tmp_path / "absent.csv"),  # no pair table: that truth is left out
            "--candidates",
            "interference-aware",
            "--oracles",
            "ct,pred",
            "--json",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert "targets met" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["checks"] == 7 * 3  # six sharing truths and the drawn one, three workloads each
    assert set(data["results"]) == {
        "b0.1 s0.6",
        "b0.1 s1.0",
        "b0.5 s0.6",
        "b0.5 s1.0",
        "b0.8 s0.6",
        "b0.8 s1.0",
        "types",
    }
    cell = data["results"]["b0.8 s1.0"]["interference-aware"]["t1"]
    assert cell["jct"] > 0 and cell["makespan"] > 0 and cell["oracle_jct"] > 0
    assert set(cell["oracle_variants_jct"]) == {"ct", "pred"} and data["oracles"] == ["ct", "pred"]
    assert cell["oracle_jct"] == min(cell["oracle_variants_jct"].values())  # the best of the variants
    assert cell["oracle_variants_jct"][cell["oracle_variant"]] == cell["oracle_jct"]
    assert "oracle (best of)" in out.stdout
    assert cell["issue_oracle_jct"] == robustness.ISSUE_ORACLE["b0.8 s1.0"][0]  # the issue's figure, as reference
    r = min(cell["oracle_jct"], cell["issue_oracle_jct"])
    assert abs(cell["jct_bound"] - (1 + r) / 2) < 1e-9
    assert cell["gain"] == (cell["jct"] <= cell["jct_bound"])
    assert cell["never_worse"] == (cell["jct"] <= 1.0 and cell["makespan"] <= 1.02 and cell["lost"] == 0)
    if cell["oracle_jct"] < 1.0:
        assert abs(cell["share_captured"] - (1 - cell["jct"]) / (1 - cell["oracle_jct"])) < 1e-9
    waits = data["results"]["b0.8 s1.0"]["most-free-memory"]["t1"]  # the baseline's tail waits, printed too
    assert waits["max_wait_s"] >= waits["p99_wait_s"] > 0
    assert "keeps backfill's priority-then-arrival order" in out.stdout  # the queue each policy runs
    met = data["met"]["interference-aware"]
    assert 0 <= met["both"] <= min(met["never_worse"], met["gain"]) <= data["checks"]


def test_targets_and_share_captured() -> None:
    assert robustness.share_captured(0.9, 0.8) == (1 - 0.9) / (1 - 0.8)
    assert robustness.share_captured(0.9, 1.0) is None  # an oracle that gains nothing
    worse, gain, bound = robustness.targets(0.84, 1.03, 0, 0.8, 0.7)
    assert not worse and gain and abs(bound - 0.85) < 1e-12  # r: the better (lower) of the two; makespan 1.03
    assert not robustness.targets(0.86, 1.0, 0, 0.8, 0.7)[1]
    worse, gain, _ = robustness.targets(0.99, 1.0, 1, None, None)
    assert not worse and gain  # a task lost is worse; with no reference the bound is 1.0


def test_wait_tail_is_the_longest_and_the_99th_percentile_wait() -> None:
    runs = {"a": (1.0, 1.0, 0, [float(w) for w in range(100)]), "b": (1.0, 1.0, 0, [500.0])}
    assert robustness.wait_tail(runs, ["a"]) == (99.0, 99.0)
    assert robustness.wait_tail(runs, ["a", "b"]) == (500.0, 99.0)  # 101 waits: the 100th of them
    assert robustness.wait_tail({"c": (1.0, 1.0, 0, [])}, ["c"]) == (0.0, 0.0)


def test_the_oracle_decides_by_the_truth_and_beats_the_learned_rule_where_it_knows_more() -> None:
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = load_trace(packaged("trace_t1.csv"), catalog)
    cfg = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="history+gpumemnet", queue="backfill")
    cfg = replace(cfg, sharing=SharingModel(beta=0.8))
    sim = oracle.oracle_simulation(cfg)
    policy = sim.placer.policy
    assert isinstance(policy, CompletionTime) and isinstance(policy.forecast, oracle.TruthForecast)
    truth = sim.run(list(arrivals))
    assert all(t.outcome == "success" for t in truth.tasks)
    mfm = robustness.run("most-free-memory", 0.8, 1.0, "sharing", arrivals)
    known = robustness.run("oracle", 0.8, 1.0, "sharing", arrivals)
    assert known[2] == 0 and known[0] < mfm[0]  # at beta 0.8 the truth's rule gains on most-free-memory


def test_the_cells_oracle_is_the_best_of_its_variants_per_cell() -> None:
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = synthetic_trace(catalog, 10, gpus=4, load=2.0, seed=3)
    variants = ["oracle:ct", "oracle:greedy", "oracle:pred", "oracle:pred-risk"]
    per = [
        {
            p: {"tiny": robustness.run(p, 0.8, 1.0, "sharing", arrivals), "t1": fake}
            for p, fake in zip(
                [robustness.BASELINE, *variants],
                [(100.0, 10.0, 0, []), (90.0, 9.0, 0, []), (50.0, 9.0, 0, []), (70.0, 9.0, 0, []), (95.0, 9.0, 0, [])],
                strict=True,
            )
        }
    ]
    assert all(per[0][v]["tiny"][2] == 0 for v in variants)  # every oracle variant finishes every try
    ratios = {v: robustness.seed_ratios(per, v, ["tiny"])[0] for v in variants}
    best, won = robustness.best_oracle(per, variants, ["tiny"])
    assert best == min(ratios.values()) and ratios[won] == best
    # picked per cell: on the made-up cell "t1" the greedy rule's 50 / 100 wins whatever won "tiny"
    assert robustness.best_oracle(per, variants, ["t1"]) == (0.5, "oracle:greedy")


def test_seed_means_of_ratios_and_pooled() -> None:
    base = robustness.BASELINE
    per = [
        {base: {"a": (100.0, 10.0, 0, [])}, "x": {"a": (50.0, 10.0, 0, [])}},
        {base: {"a": (300.0, 30.0, 0, [])}, "x": {"a": (300.0, 33.0, 1, [])}},
    ]
    assert robustness.seed_ratios(per, "x", ["a"]) == (0.75, 1.05, 1)  # mean of 0.5 and 1.0; 1.0 and 1.1
    jct, mksp, lost = robustness.seed_ratios(per, "x", ["a"], "pooled")
    assert abs(jct - 350 / 400) < 1e-12 and abs(mksp - 43 / 40) < 1e-12 and lost == 1


def test_truth_fed_predictive_knows_the_true_speeds() -> None:
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = synthetic_trace(catalog, 10, gpus=4, load=2.0, seed=3)
    cfg = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="history+gpumemnet", queue="backfill")
    sim = oracle.oracle_simulation(replace(cfg, sharing=SharingModel(beta=0.8)), "pred")
    assert isinstance(sim.placer.policy, oracle.TruthPredictive)
    sim.run(list(arrivals))
    a, b = arrivals[0].task, arrivals[1].task
    want = SharingModel(beta=0.8).slowdowns([a.profile, b.profile])[0]
    got = sim.placer.policy.truth_fit.predict(0.0, [0.0], a.name, [b.name])
    assert abs(got.speed - 1.0 / want) < 1e-12 and got.low == got.speed and got.confidence == 1.0
