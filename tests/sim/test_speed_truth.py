"""Speed truths: how fast each task type runs on each GPU model (sim/speed.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from sim_helpers import write_catalog, write_trace

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.sim import SimConfig, Simulation, load_catalog, load_trace, packaged
from carma_airflow.sim.speed import ALIKE, SpecSpeed, TableSpeed, make_speed_truth

GAVEL = Path("/work/shared/workloads/gavel_pairs.csv")
H100, A100, V100, T4 = (gpu_spec(n) for n in ("H100-80GB", "A100-40GB", "V100-32GB", "T4"))


def _arrivals(trace: str = "trace_t1.csv") -> list:  # type: ignore[type-arg]
    return load_trace(packaged(trace), load_catalog(packaged("task_catalog.csv")))


def _timeline(cfg: SimConfig, arrivals: list) -> list[tuple[object, ...]]:  # type: ignore[type-arg]
    result = Simulation(cfg).run(arrivals)
    return [(e.job_id, e.gpus, e.start, e.end, e.outcome) for e in result.timeline]


def test_the_default_is_every_model_alike() -> None:
    assert SimConfig(gpus=(A100,)).speed_truth == "alike"
    assert make_speed_truth("alike", ["x"], [A100]) is ALIKE
    assert ALIKE.speed("x", T4) == 1.0
    assert Simulation(SimConfig(gpus=(A100, T4))).board.speed is ALIKE


@pytest.mark.parametrize("truth", ["sharing", "types:1"])
def test_alike_gives_the_same_run_as_no_speed_truth_on_a_mixed_cluster(truth: str) -> None:
    arrivals = _arrivals()
    base = SimConfig(gpus=tuple(parse_gpu_list("2xA100-80GB,2xV100-32GB")), estimator="gpumemnet", truth=truth)
    plain = _timeline(base, arrivals)
    assert _timeline(replace(base, speed_truth="alike"), arrivals) == plain
    assert _timeline(replace(base, speed_truth="spec:0"), arrivals) != plain  # the V100s are slower


@pytest.mark.parametrize("speed", ["spec:3", f"table:{GAVEL}:2"])
def test_on_a_cluster_of_one_model_every_speed_truth_leaves_the_run_as_it_was(speed: str) -> None:
    if speed.startswith("table") and not GAVEL.exists():
        pytest.skip("shared/workloads/gavel_pairs.csv is not here")
    arrivals = _arrivals("trace_t2.csv")
    base = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="gpumemnet", truth="types:2")
    assert _timeline(replace(base, speed_truth=speed), arrivals) == _timeline(base, arrivals)


def test_spec_speeds_are_seeded_per_type_and_relative_to_the_fastest_model() -> None:
    one = make_speed_truth("spec:4", ["a", "b", "c"], [V100, H100, T4])
    assert isinstance(one, SpecSpeed)
    assert one.reference.name == "H100-80GB"
    assert one == make_speed_truth("spec:4", ["c", "b", "a"], [T4, V100, H100])
    assert one != make_speed_truth("spec:5", ["a", "b", "c"], [V100, H100, T4])
    assert all(one.speed(t, H100) == 1.0 for t in "abc")
    assert all(one.speed(t, T4) < one.speed(t, V100) < 1.0 for t in "abc")
    assert len({round(one.speed(t, V100), 6) for t in "abc"}) == 3  # each type its own mix


def test_a_slower_model_stretches_a_try_by_its_speed(tmp_path: Path) -> None:
    cat = load_catalog(write_catalog(tmp_path / "c.csv", {"task": "solo", "solo_minutes": 10}))
    arrivals = load_trace(write_trace(tmp_path / "t.csv", (0, 0.0, "solo")), cat)
    cfg = SimConfig(gpus=(V100,), policy="most-free-memory", estimator="oracle")
    ref = Simulation(cfg).run(arrivals).tasks[0].run_s
    slow = Simulation(replace(cfg, gpus=(V100, H100, H100), speed_truth="spec:0"))  # lowest index: the V100
    share = make_speed_truth("spec:0", ["solo"], [H100, V100])
    run = slow.run(arrivals).tasks[0].run_s
    assert run == pytest.approx(ref / share.speed("solo", V100), rel=1e-6)


def _table(path: Path) -> Path:
    pd.DataFrame(
        {
            "gpu": ["K80", "V100", "K80", "V100", "P100", "P100"],
            "job": ["m1", "m1", "m2", "m2", "m1", "m2"],
            "solo": [1.0, 8.0, 2.0, 3.0, 4.0, 2.5],
        }
    ).to_csv(path, index=False)
    return path


def test_a_table_keeps_measured_ratios_mapped_by_rank_onto_the_cluster(tmp_path: Path) -> None:
    path = _table(tmp_path / "solo.csv")
    types = [f"t{i}" for i in range(12)]
    truth = make_speed_truth(f"table:{path}:1", types, [H100, T4])
    assert isinstance(truth, TableSpeed)
    assert "H100-80GB as V100" in truth.name and "T4 as K80" in truth.name  # fastest to fastest, slowest to slowest
    assert {round(truth.speed(t, T4), 6) for t in types} == {round(1 / 8, 6), round(2 / 3, 6)}  # as measured
    assert all(truth.speed(t, H100) == 1.0 for t in types)
    three = make_speed_truth(f"table:{path}", types, [H100, A100, T4])
    assert "A100-40GB as P100" in three.name


def test_a_table_that_names_every_model_maps_by_name_and_gavel_pairs_form_reads(tmp_path: Path) -> None:
    path = _table(tmp_path / "solo.csv")
    by_name = make_speed_truth(f"table:{path}:0", ["t"], [gpu_spec("V100-32GB")])
    assert "V100-32GB as V100" in by_name.name
    if GAVEL.exists():
        gavel = make_speed_truth(f"table:{GAVEL}:0", ["a", "b"], [H100, A100, V100])
        assert "H100-80GB as V100, V100-32GB as K80" in gavel.name  # not every model named: by rank
        assert gavel.speed("a", V100) < gavel.speed("a", A100) or gavel.speed("b", V100) < gavel.speed("b", A100)


def test_bad_speed_truths_say_how_to_write_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one of alike, spec"):
        make_speed_truth("fast", [], [A100])
    with pytest.raises(ValueError, match="spec:SEED"):
        make_speed_truth("spec:x", [], [A100])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="gpu,job,solo"):
        make_speed_truth(f"table:{bad}", ["t"], [A100])
