"""Simulator truths of another form than the sharing model's: per-type terms and measured pairs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.sharing import ActivityProfile, SharingModel
from carma_airflow.sim import SimConfig, Simulation, load_catalog, load_trace, packaged
from carma_airflow.sim.truth import PairTableTruth, SharingTruth, TypeTermsTruth, drawn_types, make_truth

A = ActivityProfile(0.5, 0.3, 0.2)
B = ActivityProfile(0.3, 0.2, 0.1)


def test_sharing_truth_is_the_sharing_model() -> None:
    model = SharingModel(beta=0.7)
    assert make_truth("sharing", model, []).slowdowns([A, B], ["a", "b"]) == model.slowdowns([A, B])


def test_type_terms_make_one_task_suffer_more_than_its_activity_says() -> None:
    truth = TypeTermsTruth(0.5, {"fragile": 3.0, "sturdy": 0.2}, {"fragile": 1.0, "sturdy": 1.0})
    fragile, sturdy = truth.slowdowns([A, A], ["fragile", "sturdy"])
    assert fragile > sturdy > 1.0  # same activities, different sensitivities
    heavy = TypeTermsTruth(0.5, {}, {"bully": 4.0})
    victim_beside_bully = heavy.slowdowns([A, A], ["victim", "bully"])[0]
    victim_beside_victim = heavy.slowdowns([A, A], ["victim", "other"])[0]
    assert victim_beside_bully > victim_beside_victim
    assert truth.slowdowns([A], ["fragile"]) == [1.0]


def test_drawn_terms_are_seeded_and_per_type() -> None:
    one = drawn_types(0.5, ["x", "y", "z"], seed=3)
    assert one == drawn_types(0.5, ["z", "y", "x"], seed=3)
    assert one.sensitivity["x"] == drawn_types(0.5, ["x"], seed=3).sensitivity["x"]  # same in every trace
    assert one != drawn_types(0.5, ["x", "y", "z"], seed=4)
    assert len(set(one.sensitivity.values())) == 3


def test_pair_table_maps_measured_pairs_onto_task_types(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    pd.DataFrame(
        {
            "gpu": ["V100", "V100", "K80"],
            "job_a": ["m1", "m1", "m1"],
            "job_b": ["m2", "m1", "m2"],
            "solo_a": [10.0, 10.0, 10.0],
            "solo_b": [4.0, 10.0, 4.0],
            "shared_a": [5.0, 8.0, 2.0],
            "shared_b": [3.0, 8.0, 1.0],
        }
    ).to_csv(path, index=False)
    truth = make_truth(f"pairs:{path}:V100:1", SharingModel(), ["t1", "t2", "t3"])
    assert isinstance(truth, PairTableTruth)
    measured = {2.0, 4.0 / 3.0, 1.25}
    assert set(truth.slowdown_of.values()) <= measured
    two = truth.slowdowns([A, B], ["t1", "t2"])
    assert all(s in measured or s == truth.fallback for s in two)
    three = truth.slowdowns([A, B, A], ["t1", "t2", "t3"])
    assert three[0] >= two[0]  # a third tenant multiplies its pair slowdown in
    with pytest.raises(ValueError, match="no pairs"):
        make_truth(f"pairs:{path}:A100", SharingModel(), ["t1"])
    with pytest.raises(ValueError, match="one of sharing"):
        make_truth("gaussian", SharingModel(), ["t1"])


def test_a_simulation_under_another_truth_changes_the_run_not_the_default() -> None:
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = load_trace(packaged("trace_t1.csv"), catalog)
    base = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), policy="interference-aware")
    assert isinstance(Simulation(base).board.truth, SharingTruth)
    plain = Simulation(base).run(arrivals)
    again = Simulation(replace(base, truth="sharing")).run(arrivals)
    assert again.makespan_s == plain.makespan_s
    drawn = Simulation(replace(base, truth="types:1")).run(arrivals)
    assert drawn.makespan_s != plain.makespan_s
    assert sum(t.outcome == "success" for t in drawn.tasks) == sum(t.outcome == "success" for t in plain.tasks)
