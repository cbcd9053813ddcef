"""The GPU sharing model: slowdowns, telemetry, power and activity profiles."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carma_airflow.core import ActivityProfile, SharingModel, activity_profile, gpu_spec

MODEL = SharingModel()
LIGHT = ActivityProfile(0.25, 0.15, 0.12)
HEAVY = ActivityProfile(0.9, 0.8, 0.7)

profiles = st.builds(
    ActivityProfile,
    st.floats(min_value=0.0, max_value=0.95),
    st.floats(min_value=0.0, max_value=0.9),
    st.floats(min_value=0.0, max_value=0.9),
)


@pytest.mark.parametrize("p", [LIGHT, HEAVY, ActivityProfile(0.0, 0.0, 0.0)])
def test_solo_slowdown_is_one(p: ActivityProfile) -> None:
    assert MODEL.slowdowns([p]) == [1.0]


def test_slowdown_grows_with_co_tenants() -> None:
    one = MODEL.slowdowns([LIGHT])[0]
    two = MODEL.slowdowns([LIGHT, LIGHT])[0]
    three = MODEL.slowdowns([LIGHT, LIGHT, LIGHT])[0]
    four = MODEL.slowdowns([LIGHT] * 4)[0]
    assert one < two < three < four
    # below saturation: 1 + beta * (co-tenant activity)
    assert two == pytest.approx(1.0 + 0.5 * 0.25)


def test_saturation_factor_above_full_demand() -> None:
    s = MODEL.slowdowns([HEAVY, HEAVY])
    assert s[0] == pytest.approx(1.8 * (1 + 0.5 * 0.9))
    assert s[0] == s[1]


def test_heavier_co_tenant_hurts_more() -> None:
    assert MODEL.slowdowns([LIGHT, HEAVY])[0] > MODEL.slowdowns([LIGHT, LIGHT])[0]


def test_no_contention_without_beta() -> None:
    assert SharingModel(beta=0.0).slowdowns([LIGHT, LIGHT]) == [1.0, 1.0]


def test_telemetry_solo_equals_profile() -> None:
    assert MODEL.telemetry([LIGHT], [1.0]) == pytest.approx((0.25, 0.15, 0.12))


def test_telemetry_capped_at_one() -> None:
    assert MODEL.telemetry([HEAVY] * 4, [1.0] * 4) == (1.0, 1.0, 1.0)


def test_telemetry_empty_gpu() -> None:
    assert MODEL.telemetry([], []) == (0.0, 0.0, 0.0)


def test_telemetry_needs_one_rate_per_tenant() -> None:
    with pytest.raises(ValueError):
        MODEL.telemetry([LIGHT, LIGHT], [1.0])


@given(st.lists(profiles, min_size=1, max_size=5))
def test_telemetry_within_unit_interval(ps: list[ActivityProfile]) -> None:
    rates = [1.0 / s for s in MODEL.slowdowns(ps)]
    for value in MODEL.telemetry(ps, rates):
        assert 0.0 <= value <= 1.0


@given(st.lists(profiles, min_size=1, max_size=6))
def test_slowdowns_at_least_one(ps: list[ActivityProfile]) -> None:
    assert all(s >= 1.0 for s in MODEL.slowdowns(ps))


@pytest.mark.parametrize("name", ["A100-40GB", "H100-80GB", "L4"])
def test_power_bounds(name: str) -> None:
    spec = gpu_spec(name)
    assert MODEL.power_w(spec, False, 0.0, 0.0) == pytest.approx(spec.idle_power_w)
    assert MODEL.power_w(spec, True, 1.0, 1.0) == pytest.approx(spec.max_power_w)
    busy_idle = MODEL.power_w(spec, True, 0.0, 0.0)
    assert spec.idle_power_w < busy_idle < spec.max_power_w
    assert MODEL.power_w(spec, True, 0.5, 0.2) > busy_idle


@given(st.booleans(), st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1))
def test_power_between_idle_and_max(busy: bool, smact: float, drama: float) -> None:
    spec = gpu_spec("A100-40GB")
    p = MODEL.power_w(spec, busy, smact, drama)
    assert spec.idle_power_w <= p <= spec.max_power_w


def test_oom_at_ramp() -> None:
    assert SharingModel.oom_at_ramp(10001, 10000)
    assert not SharingModel.oom_at_ramp(10000, 10000)


def test_activity_grows_with_batch_size() -> None:
    small, mid, big = (activity_profile("cnn", b) for b in (32, 64, 128))
    assert small.sm_activity < mid.sm_activity < big.sm_activity
    assert small.sm_occupancy < mid.sm_occupancy < big.sm_occupancy
    assert small.dram_activity < mid.dram_activity < big.dram_activity


def test_activity_capped() -> None:
    huge = activity_profile("cnn", 2**20)
    assert huge.sm_activity <= 0.95
    assert huge.sm_occupancy <= 0.90
    assert huge.dram_activity <= 0.90


@pytest.mark.parametrize("batch", [32, 64, 128])
def test_cifar_lighter_than_imagenet(batch: int) -> None:
    cifar = activity_profile("cnn", batch, small_inputs=True)
    imagenet = activity_profile("cnn", batch)
    assert cifar.sm_activity < imagenet.sm_activity
    assert cifar.sm_occupancy < imagenet.sm_occupancy


def test_families_differ_and_unknown_is_cnn() -> None:
    assert activity_profile("transformer", 32).sm_activity > activity_profile("cnn", 32).sm_activity
    assert activity_profile("recsys", 32).dram_activity > activity_profile("cnn", 32).dram_activity
    assert activity_profile("mystery", 32) == activity_profile("cnn", 32)
    assert activity_profile(" CNN ", 32) == activity_profile("cnn", 32)
