"""Placement policies: names, flags, and the order each one gives candidate GPUs."""

from __future__ import annotations

import pytest
from helpers import CALM, HOT, busy_gpu, idle_gpu, request, view

from carma_airflow.core import (
    ClusterView,
    Decision,
    MemoryNeed,
    MetricWindow,
    Outcome,
    Placer,
    Reason,
    TaskRequest,
    UnknownPolicyError,
)
from carma_airflow.core.policies import DEFAULT_POLICY, make_policy, policy_names

ALL_POLICIES = [
    "exclusive",
    "first-fit",
    "best-fit",
    "most-free-memory",
    "least-utilised",
    "round-robin",
    "interference-aware",
    "static-2",
    "static-4",
]
SHARING = [p for p in ALL_POLICIES if p != "exclusive"]
CHECKED = ["first-fit", "best-fit", "most-free-memory", "least-utilised", "interference-aware"]


def place(policy: str, req: TaskRequest, v: ClusterView) -> Decision:
    return Placer(make_policy(policy)).decide(req, v)


def test_policy_names() -> None:
    names = policy_names()
    assert names[-1] == "static-K"
    for name in ALL_POLICIES[:7]:
        assert name in names
    assert DEFAULT_POLICY == "completion-time"  # issue 23: meets the most robustness targets


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("magm", "most-free-memory"),
        ("lug", "least-utilised"),
        ("least-utilized", "least-utilised"),
        ("ff", "first-fit"),
        ("bf", "best-fit"),
        ("rr", "round-robin"),
        ("excl", "exclusive"),
        ("carma", "interference-aware"),
        ("  MAGM ", "most-free-memory"),
        ("static-3", "static-3"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert make_policy(alias).name == name


def test_make_policy_gives_fresh_instances() -> None:
    assert make_policy("rr") is not make_policy("rr")


@pytest.mark.parametrize("bad", ["static-0", "static-65", "static-x", "magic", ""])
def test_unknown_policy(bad: str) -> None:
    with pytest.raises(UnknownPolicyError):
        make_policy(bad)


def test_unknown_policy_message_lists_names() -> None:
    with pytest.raises(UnknownPolicyError) as info:
        make_policy("magic")
    assert "most-free-memory" in str(info.value)
    assert "static-K" in str(info.value)


def test_static_k_bounds() -> None:
    assert make_policy("static-1").max_tenants == 1
    assert make_policy("static-64").max_tenants == 64


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_idle_gpu_first(policy: str) -> None:
    # GPU 0 has a tenant and room to spare; GPU 1 is idle: every policy takes the idle GPU.
    v = view(busy_gpu(0, free=35000), idle_gpu(1), busy_gpu(2, free=38000))
    d = place(policy, request("r", 2000), v)
    assert d.outcome is Outcome.PLACED
    assert d.gpu_uuids == ("GPU-1",)
    assert not d.collocated


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_idle_gpus_taken_in_index_order(policy: str) -> None:
    v = view(busy_gpu(0, free=35000), idle_gpu(3), idle_gpu(1), idle_gpu(2))
    d = place(policy, request("r", 2000), v)
    assert d.gpu_uuids == ("GPU-1",)


def test_exclusive_never_collocates() -> None:
    v = view(busy_gpu(0, free=39000), busy_gpu(1, free=39000))
    d = place("exclusive", request("r", 100), v)
    assert d.outcome is Outcome.NOT_NOW
    assert [r.reason for r in d.rejected] == [Reason.BUSY, Reason.BUSY]
    assert "exclusive policy" in d.rejected[0].detail


def test_exclusive_one_task_per_gpu_within_a_pass() -> None:
    v = view(idle_gpu(0), idle_gpu(1))
    result = Placer(make_policy("exclusive")).schedule([request(k, 100) for k in "abc"], v)
    assert [d.gpu_uuids for d in result.decisions] == [("GPU-0",), ("GPU-1",), ()]
    assert result.decisions[2].outcome is Outcome.NOT_NOW


def test_first_fit_lowest_qualifying_index() -> None:
    v = view(
        busy_gpu(0, free=4000),  # too little memory
        busy_gpu(1, free=30000, window=HOT),  # high risk
        busy_gpu(2, free=12000),
        busy_gpu(3, free=30000),
    )
    d = place("first-fit", request("r", 5000), v)
    assert d.gpu_uuids == ("GPU-2",)
    assert d.collocated
    assert {r.index: r.reason for r in d.rejected} == {0: Reason.MEMORY, 1: Reason.RISK}


def test_best_fit_least_free() -> None:
    v = view(busy_gpu(0, free=30000), busy_gpu(1, free=9000), busy_gpu(2, free=15000), busy_gpu(3, free=5000))
    d = place("best-fit", request("r", 5000), v)  # GPU 3 lacks 5000 + 2048 + 512
    assert d.gpu_uuids == ("GPU-1",)


def test_most_free_memory_most_free() -> None:
    v = view(
        busy_gpu(0, free=20000), busy_gpu(1, free=30000), busy_gpu(2, free=25000), busy_gpu(3, free=31000, window=HOT)
    )
    d = place("most-free-memory", request("r", 5000), v)
    assert d.gpu_uuids == ("GPU-1",)  # GPU 3 has more but is high-risk


def test_least_utilised_lowest_smact() -> None:
    v = view(
        busy_gpu(0, free=30000, window=MetricWindow.constant(0.5, 0.1, 0.1)),
        busy_gpu(1, free=10000, window=MetricWindow.constant(0.2, 0.1, 0.1)),
        busy_gpu(2, free=30000, window=MetricWindow.constant(0.6, 0.1, 0.1)),
        busy_gpu(3, free=30000, window=MetricWindow.constant(0.1, 0.1, 0.1)),
    )
    assert place("least-utilised", request("r", 5000), v).gpu_uuids == ("GPU-3",)
    without_3 = view(*v.gpus[:3])
    assert place("least-utilised", request("r", 5000), without_3).gpu_uuids == ("GPU-1",)
    # GPU 1 lacks memory for 20000 MiB: the next least utilised is GPU 0
    assert place("least-utilised", request("r", 20000), without_3).gpu_uuids == ("GPU-0",)


def test_interference_aware_activity_band_then_tightest_fit() -> None:
    v = view(
        busy_gpu(0, free=30000, window=MetricWindow.constant(0.05, 0.1, 0.1)),
        busy_gpu(1, free=12000, window=MetricWindow.constant(0.10, 0.1, 0.1)),
        busy_gpu(2, free=8000, window=MetricWindow.constant(0.30, 0.1, 0.1)),
    )
    # GPUs 0 and 1 share the lowest band (< 0.25); GPU 1 is the tighter fit.
    assert place("interference-aware", request("r", 5000), v).gpu_uuids == ("GPU-1",)


@pytest.mark.parametrize("policy", CHECKED)
def test_risk_filter(policy: str) -> None:
    v = view(busy_gpu(0, free=30000, window=HOT), busy_gpu(1, free=20000, window=CALM))
    d = place(policy, request("r", 2000), v)
    assert d.gpu_uuids == ("GPU-1",)
    alone = place(policy, request("r", 2000), view(busy_gpu(0, free=30000, window=HOT)))
    assert alone.outcome is Outcome.NOT_NOW
    assert alone.rejected[0].reason is Reason.RISK


@pytest.mark.parametrize("policy", ["round-robin", "static-2"])
def test_naive_policies_ignore_memory_and_risk(policy: str) -> None:
    v = view(busy_gpu(0, free=100, window=HOT))
    d = place(policy, request("r", 30000), v)
    assert d.outcome is Outcome.PLACED
    assert d.gpu_uuids == ("GPU-0",)


def test_round_robin_rotates_within_a_pass() -> None:
    v = view(*(busy_gpu(i, free=100) for i in range(4)))
    result = Placer(make_policy("round-robin")).schedule([request(f"r{k}", 20000) for k in range(6)], v)
    assert [d.gpu_uuids[0] for d in result.decisions] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-0", "GPU-1"]


def test_round_robin_cursor_survives_passes() -> None:
    placer = Placer(make_policy("round-robin"))
    v = view(*(busy_gpu(i, free=100) for i in range(3)))
    picks = [placer.schedule([request(f"r{k}", 1000)], v).decisions[0].gpu_uuids[0] for k in range(4)]
    assert picks == ["GPU-0", "GPU-1", "GPU-2", "GPU-0"]


def test_static_k_caps_tenants_regardless_of_memory() -> None:
    v = view(busy_gpu(0, free=39000, tenants=2), busy_gpu(1, free=0, tenants=1))
    d = place("static-2", request("r", 30000), v)
    assert d.gpu_uuids == ("GPU-1",)  # no memory check, but GPU 0 is full of tenants
    assert d.rejected[0].reason is Reason.TENANT_CAP
    assert "cap 2" in d.rejected[0].detail


def test_static_k_fills_slots_within_a_pass() -> None:
    v = view(busy_gpu(0, free=30000), busy_gpu(1, free=30000))
    result = Placer(make_policy("static-2")).schedule([request(f"r{k}", 1000) for k in range(3)], v)
    assert [d.gpu_uuids for d in result.decisions] == [("GPU-0",), ("GPU-1",), ()]
    assert result.decisions[2].outcome is Outcome.NOT_NOW


def test_static_k_prefers_fewest_tenants() -> None:
    v = view(busy_gpu(0, free=30000, tenants=3), busy_gpu(1, free=30000, tenants=1), busy_gpu(2, free=30000, tenants=2))
    assert place("static-4", request("r", 1000), v).gpu_uuids == ("GPU-1",)


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "most-free-memory", "least-utilised"])
def test_paper_policies_respect_lock(policy: str) -> None:
    v = view(busy_gpu(0, free=30000, last_placed_at=-10.0), busy_gpu(1, free=20000, last_placed_at=-31.0))
    d = place(policy, request("r", 2000), v)
    assert d.gpu_uuids == ("GPU-1",)
    assert d.rejected[0].reason is Reason.LOCKED


def test_interference_aware_needs_no_lock() -> None:
    v = view(busy_gpu(0, free=30000, last_placed_at=-10.0))
    assert place("interference-aware", request("r", 2000), v).placed


def test_interference_aware_counts_prior_of_unseen_tenants() -> None:
    # window says 0.4 SM activity; a tenant placed 5 s ago adds the 0.5 prior -> 0.9, high risk with occupancy 0.5
    g = busy_gpu(0, free=30000, window=MetricWindow.constant(0.4, 0.5, 0.1), placed_at=-5.0)
    assert place("interference-aware", request("r", 2000), view(g)).rejected[0].reason is Reason.RISK
    assert place("first-fit", request("r", 2000), view(g)).placed


def test_interference_aware_activity_cap() -> None:
    from carma_airflow.core.policies.interference_aware import InterferenceAware

    g = busy_gpu(0, free=30000, window=MetricWindow.constant(0.5, 0.1, 0.1))
    capped = Placer(InterferenceAware(activity_cap=0.9)).decide(request("r", 1000), view(g))
    assert capped.outcome is Outcome.NOT_NOW
    assert capped.rejected[0].reason is Reason.INTERFERENCE
    assert Placer(InterferenceAware(activity_cap=1.0)).decide(request("r", 1000), view(g)).placed


@pytest.mark.parametrize("policy", ["static-2", "round-robin"])
def test_memory_blind_policies_ignore_the_gave_up_sentinel(policy: str) -> None:
    gave_up = TaskRequest(key="g", label="g", memory=MemoryNeed(40000, "gpumemnet (gave up)", whole_gpu=True))
    d = place(policy, gave_up, view(busy_gpu(0, free=30000), busy_gpu(1, free=30000)))
    assert d.placed  # static sharing knows nothing of memory: the sentinel must not make it wait


def test_memory_aware_policy_gives_the_gave_up_sentinel_an_idle_gpu() -> None:
    gave_up = TaskRequest(key="g", label="g", memory=MemoryNeed(40000, "gpumemnet (gave up)", whole_gpu=True))
    d = place("most-free-memory", gave_up, view(busy_gpu(0, free=39000), idle_gpu(1)))
    assert d.gpu_uuids == ("GPU-1",)
