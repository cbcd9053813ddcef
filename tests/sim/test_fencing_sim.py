"""Who crashes when true peaks outgrow the catalogue (sim/fencing.py, --memory-growth, --isolation)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from carma_airflow.cli import _register, app
from carma_airflow.core import parse_gpu_list
from carma_airflow.core.errors import ConfigError
from carma_airflow.sim import SimConfig, load_catalog, packaged, simulate, synthetic_trace
from carma_airflow.sim.fencing import SimIsolation, allocate, growth_of, next_allocator, promised

_register()  # the commands load lazily


def test_growth_is_seeded_per_job_and_absent_without_growth() -> None:
    assert growth_of(3, 0.0) is None
    g = growth_of(3, 0.3, seed=1)
    assert g is not None and 0 <= g.share < 0.3 and 0.5 <= g.at < 0.9
    assert growth_of(3, 0.3, seed=1) == g and growth_of(4, 0.3, seed=1) != g


def test_unfenced_allocation_fails_only_on_a_full_gpu() -> None:
    common = {"total_mib": 40960, "held_mib": 8192, "promise_mib": 8192}
    assert allocate(SimIsolation.NONE, used_mib=20480, asked_mib=20000, others=[(12288, 3072)], **common) is None
    refused = allocate(SimIsolation.NONE, used_mib=30000, asked_mib=20000, others=[(12288, 12288)], **common)
    assert refused is not None and not refused.past_cap and refused.reached_mib == 8192 + 10960


def test_fenced_allocation_keeps_a_co_tenants_promise() -> None:
    refused = allocate(
        SimIsolation.CAPS, total_mib=40960, used_mib=11264, held_mib=8192, asked_mib=22528, promise_mib=8192,
        others=[(12288, 3072)],
    )  # fmt: skip
    assert refused is not None and refused.past_cap and not refused.victim and refused.reached_mib == 30720
    within = allocate(
        SimIsolation.CAPS, total_mib=40960, used_mib=8192, held_mib=0, asked_mib=12288, promise_mib=12288,
        others=[(8192, 8192)],
    )  # fmt: skip
    assert within is None


def test_promise_is_the_reservation_until_seen_then_what_it_holds() -> None:
    assert promised(12288, 0, False, 100.0, 30.0) == 12288
    assert promised(12288, 9000, True, 10.0, 30.0) == 12288
    assert promised(12288, 9000, True, 31.0, 30.0) == 9000


def test_next_allocator_is_a_co_tenant_or_the_grower() -> None:
    picks = {next_allocator(["a"], job, 5.0) for job in range(40)}
    assert picks == {"a", None}
    assert next_allocator([], 1, 5.0) is None


def test_isolation_names() -> None:
    assert SimIsolation.parse("CAPS") is SimIsolation.CAPS
    with pytest.raises(ConfigError, match="none, caps or fixed"):
        SimIsolation.parse("mps")


@pytest.fixture(scope="module")
def sweep() -> dict[str, list[dict[str, object]]]:
    catalog = load_catalog(packaged("task_catalog.csv"))
    base = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="oracle", memory_growth=0.3)
    out: dict[str, list[dict[str, object]]] = {"none": [], "caps": []}
    for seed in range(4):
        arrivals = synthetic_trace(catalog, 60, gpus=4, load=2.0, seed=seed)
        for iso, results in out.items():
            results.append(simulate(replace(base, isolation=iso), arrivals).summary())
    return out


def test_with_caps_no_victims_and_nothing_lost_without_caps_victims(sweep: dict[str, list[dict[str, object]]]) -> None:
    def total(iso: str, key: str) -> int:
        return sum(int(s[key]) for s in sweep[iso])  # type: ignore[call-overload]

    assert total("caps", "victims") == 0 and total("caps", "lost") == 0
    assert total("none", "victims") > 0  # the test can fail: unfenced growth crashes neighbours


def test_without_growth_caps_change_nothing_on_the_paper_trace() -> None:
    runner = CliRunner()
    got = []
    for iso in ("none", "caps"):
        out = runner.invoke(app, ["simulate", "--trace", "t1", "--estimator", "oracle", "--isolation", iso, "--json"])
        assert out.exit_code == 0, out.output
        got.append(json.loads(out.output))
    assert got[0]["victims"] == got[1]["victims"] == 0
    assert got[0]["makespan_s"] == got[1]["makespan_s"]


def test_bad_growth_is_one_error_line() -> None:
    out = CliRunner().invoke(app, ["simulate", "--memory-growth", "-1"])
    assert out.exit_code == 2 and "--memory-growth" in out.output
    out = CliRunner().invoke(app, ["simulate", "--isolation", "mps"])
    assert out.exit_code == 2 and "none, caps or fixed" in out.output
