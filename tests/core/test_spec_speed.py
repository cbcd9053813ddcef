"""Speed on one GPU model relative to another, from the spec sheets (core/speed.py)."""

from __future__ import annotations

import pytest

from carma_airflow.core.gpu import GPU_CATALOGUE, GpuSpec, gpu_spec
from carma_airflow.core.speed import fastest, knows_speed, spec_speed, spec_time_ratio


def test_every_catalogue_model_has_throughput_and_bandwidth() -> None:
    assert all(knows_speed(s) for s in GPU_CATALOGUE.values())
    h100, a100 = gpu_spec("H100-80GB"), gpu_spec("A100-40GB")
    assert h100.dense_tflops > a100.dense_tflops > gpu_spec("V100-32GB").dense_tflops > gpu_spec("T4").dense_tflops
    assert gpu_spec("A100-80GB").memory_gbs > a100.memory_gbs  # the 80 GB board has faster memory


def test_a_compute_bound_task_gains_the_throughput_ratio_a_memory_bound_one_the_bandwidth_ratio() -> None:
    h100, v100 = gpu_spec("H100-80GB"), gpu_spec("V100-32GB")
    assert spec_speed(h100, v100, 1.0) == pytest.approx(989.0 / 125.0)
    assert spec_speed(h100, v100, 0.0) == pytest.approx(3350.0 / 900.0)
    assert spec_speed(v100, h100, 0.5) == pytest.approx(1.0 / spec_speed(h100, v100, 0.5), rel=0.5)
    assert spec_speed(v100, h100, 0.5) < 1.0 < spec_speed(h100, v100, 0.5)
    assert spec_time_ratio(h100, h100, 0.3) == 1.0


def test_an_unknown_model_runs_at_the_reference_speed_and_a_bad_share_is_refused() -> None:
    bare = GpuSpec("mystery", 16000, 40, 10.0, 70.0)
    assert spec_speed(bare, gpu_spec("A100-40GB")) == 1.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        spec_speed(gpu_spec("T4"), gpu_spec("L4"), 1.5)


def test_fastest_is_by_throughput_then_bandwidth() -> None:
    specs = [gpu_spec(n) for n in ("V100-32GB", "A100-40GB", "A100-80GB", "T4")]
    assert fastest(specs).name == "A100-80GB"  # same throughput as the 40 GB board, more bandwidth
    with pytest.raises(ValueError, match="at least one"):
        fastest([])
