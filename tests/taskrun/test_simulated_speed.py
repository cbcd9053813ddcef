"""simulated_training on a fleet of several GPU models (issue 44 item 6): a try's work is its solo
seconds on a reference model, run at its GPU model's speed (the slowest GPU's for a multi-GPU try),
and slowed by its co-tenants as before."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from carma_airflow.core import ActivityProfile, parse_gpu_list
from carma_airflow.core.gpu import GPU_CATALOGUE, gpu_spec
from carma_airflow.core.sharing import SharingModel
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.taskrun.simulated_training import speed_on
from carma_airflow.testing import simulated_training, spec_speedup

A100, V100 = "GPU-SIM-0000", "GPU-SIM-0001"  # 1xA100-80GB,1xV100-32GB
WORK_S = 0.8
FAST = {"A100-80GB": 4.0}


@pytest.fixture
def mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """One simulated A100-80GB (GPU-SIM-0000) and one V100-32GB (GPU-SIM-0001), the ledger in the
    environment as the executor sets it."""
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.init(parse_gpu_list("1xA100-80GB,1xV100-32GB"))
    monkeypatch.setenv("CARMA_SIM_LEDGER", str(ledger.path))
    return ledger


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live process whose PID stands for a co-tenant."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _train(monkeypatch: pytest.MonkeyPatch, visible: str, **kwargs: object) -> dict[str, object]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return simulated_training(100, WORK_S, ramp_s=0.0, step_s=0.05, **kwargs)  # type: ignore[arg-type]


# -- the arithmetic ----------------------------------------------------------------------------


def test_speed_is_the_named_models_and_the_reference_pace_elsewhere() -> None:
    assert speed_on(["A100-80GB"], FAST) == 4.0
    assert speed_on(["V100-32GB"], FAST) == 1.0  # not named: the reference's pace
    assert speed_on(["a100-80gb"], {"A100-80GB": 2.5}) == 2.5  # names as NVML or a user spells them
    assert speed_on(["A100-80GB"], {"a100-80gb": 2.5}) == 2.5


def test_a_multi_gpu_try_goes_at_its_slowest_gpus_pace() -> None:
    assert speed_on(["A100-80GB", "A100-80GB"], FAST) == 4.0
    assert speed_on(["A100-80GB", "V100-32GB"], FAST) == 1.0
    assert speed_on(["A100-80GB", "V100-32GB"], {"A100-80GB": 4.0, "V100-32GB": 0.5}) == 0.5


def test_without_speedup_every_model_is_alike() -> None:
    for models in (["A100-80GB"], ["V100-32GB"], ["T4", "H100-80GB"]):
        assert speed_on(models, None) == 1.0
        assert speed_on(models, {}) == 1.0


@pytest.mark.parametrize(
    ("speedup", "says"),
    [
        ({"A100": 4.0}, r"speedup: unknown GPU spec 'A100'; use one of: A100-40GB, A100-80GB"),
        ({"A100-80GB": 0.0}, r"speedup\['A100-80GB'\] must be a speed > 0"),
        ({"A100-80GB": -2.0}, r"must be a speed > 0"),
        ({"A100-80GB": math.nan}, r"must be a speed > 0"),
        ({"A100-80GB": math.inf}, r"must be a speed > 0"),
        ({"A100-80GB": True}, r"must be a speed > 0"),
        ({"A100-80GB": "4"}, r"must be a speed > 0"),
        ([("A100-80GB", 4.0)], r"speedup must map GPU model names to speeds"),
    ],
)
def test_a_bad_speedup_fails_where_the_dag_calls_it(
    speedup: object, says: str, mixed: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=says):
        _train(monkeypatch, A100, speedup=speedup)
    assert mixed.allocations() == []  # failed before holding anything


def test_spec_speedup_is_the_spec_sheets_roofline() -> None:
    a100, v100 = gpu_spec("A100-80GB"), gpu_spec("V100-32GB")
    compute = spec_speedup("V100-32GB", compute_share=1.0)
    memory = spec_speedup("v100-32gb", compute_share=0.0)
    assert set(compute) == {s.name for s in GPU_CATALOGUE.values()}
    assert compute["V100-32GB"] == memory["V100-32GB"] == 1.0
    assert compute["A100-80GB"] == pytest.approx(a100.dense_tflops / v100.dense_tflops)
    assert memory["A100-80GB"] == pytest.approx(a100.memory_gbs / v100.memory_gbs)
    half = spec_speedup("V100-32GB")["A100-80GB"]
    assert 1.0 / half == pytest.approx((1.0 / compute["A100-80GB"] + 1.0 / memory["A100-80GB"]) / 2)
    with pytest.raises(ValueError, match="spec_speedup: unknown GPU spec 'V100'"):
        spec_speedup("V100")


# -- a run on the simulated GPUs ---------------------------------------------------------------


def test_a_try_runs_at_its_gpu_models_speed(mixed: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _train(monkeypatch, A100, speedup=FAST)
    slow = _train(monkeypatch, V100, speedup=FAST)
    assert fast["gpu_models"] == ["A100-80GB"] and fast["speed"] == 4.0
    assert slow["gpu_models"] == ["V100-32GB"] and slow["speed"] == 1.0
    fast_s, slow_s = float(fast["train_s"]), float(slow["train_s"])  # type: ignore[arg-type]
    assert WORK_S / 4 <= fast_s < WORK_S / 4 + 0.15
    assert WORK_S <= slow_s < WORK_S + 0.3
    assert slow_s / fast_s == pytest.approx(4.0, rel=0.35)
    assert fast["slowdown"] == pytest.approx(1.0, abs=0.3)  # alone: no co-tenant slowed it
    assert slow["slowdown"] == pytest.approx(1.0, abs=0.3)


def test_a_try_on_both_models_goes_at_the_slower_ones_pace(mixed: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    both = _train(monkeypatch, f"{A100},{V100}", speedup=FAST)
    assert both["gpu_models"] == ["A100-80GB", "V100-32GB"] and both["speed"] == 1.0
    assert WORK_S <= float(both["train_s"]) < WORK_S + 0.3  # type: ignore[arg-type]


def test_without_speedup_the_fast_model_is_no_faster(mixed: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _train(monkeypatch, A100)
    assert out["speed"] == 1.0
    assert WORK_S <= float(out["train_s"]) < WORK_S + 0.3  # type: ignore[arg-type]


def test_co_tenants_slow_it_on_top_of_its_models_speed(
    mixed: Ledger, monkeypatch: pytest.MonkeyPatch, sleeper: int
) -> None:
    """The model's speed and the sharing model's slowdown multiply: wall = work x slowdown / speed."""
    activity = 0.8
    other = ActivityProfile(0.9, 0.6, 0.5)
    mixed.allocate(sleeper, A100, 1000, other, "co-tenant")
    own = ActivityProfile(activity, activity * 0.6, activity * 0.5)  # what simulated_training demands
    slowdown = SharingModel().slowdowns([other, own])[1]
    assert slowdown > 1.2  # the case says something only if sharing costs
    out = _train(monkeypatch, A100, speedup={"A100-80GB": 2.0}, activity=activity)
    assert out["slowdown"] == pytest.approx(slowdown, rel=0.15)
    assert float(out["train_s"]) == pytest.approx(WORK_S * slowdown / 2.0, rel=0.2)  # type: ignore[arg-type]


def test_the_simulated_training_reports_its_progress_as_the_simulators_tries_do(
    mixed: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The simulator's tries report progress by default (SimConfig.progress_reports); the packaged
    training does too, so the executor learns from it what the simulator learns (issue 41)."""
    from carma_airflow.sim import SimConfig
    from carma_airflow.taskrun.progress import PROGRESS_ENV, read_progress

    path = tmp_path / "try.progress"
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    _train(monkeypatch, A100)
    got = read_progress(path)
    assert got is not None and got.total == WORK_S and got.done == pytest.approx(WORK_S)
    assert SimConfig(gpus=tuple(parse_gpu_list("1xA100-80GB"))).progress_reports
