"""GPU specs, the catalogue, GPU lists and the per-GPU state types."""

from __future__ import annotations

import pytest

from carma_airflow.core import (
    GPU_CATALOGUE,
    ClusterView,
    ConfigError,
    GpuState,
    MetricWindow,
    Tenant,
    UnknownGpuSpecError,
    gpu_spec,
    parse_gpu_list,
)


@pytest.mark.parametrize(
    ("name", "memory"),
    [
        ("A100-40GB", 40960),
        ("A100-80GB", 81920),
        ("H100-80GB", 81559),
        ("H200-141GB", 143771),
        ("L4", 23034),
    ],
)
def test_catalogue_has_the_common_models(name: str, memory: int) -> None:
    spec = gpu_spec(name)
    assert spec.name == name
    assert spec.memory_mib == memory
    assert name.lower() in GPU_CATALOGUE
    assert 0 < spec.idle_power_w < spec.max_power_w
    assert spec.sm_count > 0


def test_gpu_spec_is_case_insensitive_and_strips() -> None:
    assert gpu_spec("a100-40gb") is gpu_spec("A100-40GB")
    assert gpu_spec("  h100-80gb ") is gpu_spec("H100-80GB")


def test_parse_single_group() -> None:
    specs = parse_gpu_list("4xA100-40GB")
    assert len(specs) == 4
    assert {s.name for s in specs} == {"A100-40GB"}


def test_parse_without_count_is_one() -> None:
    assert [s.name for s in parse_gpu_list("L4")] == ["L4"]


def test_parse_comma_list_keeps_order() -> None:
    specs = parse_gpu_list("2xA100-40GB,4xH100-80GB, 1xL4")
    assert [s.name for s in specs] == ["A100-40GB"] * 2 + ["H100-80GB"] * 4 + ["L4"]


@pytest.mark.parametrize("text", ["4xa100-40gb", "4XA100-40GB", "4 x A100-40gb", " 4xA100-40Gb "])
def test_parse_is_case_insensitive(text: str) -> None:
    specs = parse_gpu_list(text)
    assert [s.name for s in specs] == ["A100-40GB"] * 4


def test_unknown_spec_lists_known_names() -> None:
    with pytest.raises(UnknownGpuSpecError) as info:
        parse_gpu_list("4xB200")
    message = str(info.value)
    assert "B200" in message
    for known in ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L4"):
        assert known in message


def test_unknown_spec_error_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        gpu_spec("GTX-1080")


@pytest.mark.parametrize("text", ["", "4x", "0xA100-40GB", "4xA100-40GB,", "-1xL4", "4*A100-40GB"])
def test_unreadable_lists(text: str) -> None:
    with pytest.raises(UnknownGpuSpecError):
        parse_gpu_list(text)


def test_tenant_accounted_memory() -> None:
    unseen = Tenant("k", "l", reserved_mib=8000, placed_at=0.0)
    assert unseen.accounted_mib == 8000
    assert Tenant("k", "l", 8000, 0.0, observed_mib=5000).accounted_mib == 8000
    assert Tenant("k", "l", 8000, 0.0, observed_mib=9000).accounted_mib == 9000


def test_cluster_view_indexes_by_uuid() -> None:
    spec = gpu_spec("L4")
    gpus = tuple(GpuState(f"U{i}", i, spec, spec.memory_mib, 0, MetricWindow()) for i in range(3))
    v = ClusterView(5.0, gpus)
    assert v.by_uuid["U2"] is gpus[2]
    assert gpus[1].total_mib == spec.memory_mib
