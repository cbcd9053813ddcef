"""The placer: filters, outcomes, multi-GPU choice, and whole scheduling passes."""

from __future__ import annotations

import pytest
from helpers import A100, A100_80, H100, HEADROOM, L4, RESERVE, busy_gpu, idle_gpu, request, view
from hypothesis import given, settings
from hypothesis import strategies as st

from carma_airflow.core import (
    ClusterView,
    GpuHealth,
    GpuState,
    MetricWindow,
    Outcome,
    PlacementSettings,
    Placer,
    Reason,
    Tenant,
    gpu_spec,
)
from carma_airflow.core.policies import make_policy

CHECKED = ["first-fit", "best-fit", "most-free-memory", "least-utilised", "interference-aware"]
ALL = [*CHECKED, "exclusive", "round-robin", "static-3"]


def placer(policy: str = "interference-aware", **kwargs: object) -> Placer:
    return Placer(make_policy(policy), PlacementSettings(**kwargs) if kwargs else PlacementSettings())  # type: ignore[arg-type]


# -- memory filter ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", CHECKED)
def test_collocation_needs_estimate_plus_headroom_plus_reserve(policy: str) -> None:
    need = 6000
    exact = need + HEADROOM + RESERVE
    ok = placer(policy).decide(request("r", need), view(busy_gpu(0, free=exact)))
    assert ok.outcome is Outcome.PLACED
    assert ok.collocated
    short = placer(policy).decide(request("r", need), view(busy_gpu(0, free=exact - 1)))
    assert short.outcome is Outcome.NOT_NOW
    assert [v.reason for v in short.rejected] == [Reason.MEMORY]
    assert "estimate + headroom" in short.rejected[0].detail


@pytest.mark.parametrize("policy", [*CHECKED, "exclusive"])
def test_idle_gpu_needs_estimate_plus_reserve(policy: str) -> None:
    # An idle GPU (no tenants, < 1024 MiB used) takes the task alone: no headroom, only the reserve.
    usable = A100.memory_mib - 500 - RESERVE
    ok = placer(policy).decide(request("r", usable), view(idle_gpu(0, used=500)))
    assert ok.outcome is Outcome.PLACED
    short = placer(policy).decide(request("r", usable + 1), view(idle_gpu(0, used=500)))
    assert short.outcome is Outcome.NOT_NOW
    assert short.rejected[0].reason is Reason.MEMORY


@pytest.mark.parametrize("policy", CHECKED)
def test_floor_need_has_no_headroom(policy: str) -> None:
    ok = placer(policy).decide(request("r", 5120, add_headroom=False), view(busy_gpu(0, free=5120 + RESERVE)))
    assert ok.placed
    short = placer(policy).decide(request("r", 5120, add_headroom=False), view(busy_gpu(0, free=5120 + RESERVE - 1)))
    assert not short.placed


def test_custom_reserve_and_headroom() -> None:
    p = placer("first-fit", reserve_mib=0, headroom_mib=1000)
    assert p.decide(request("r", 6000), view(busy_gpu(0, free=7000))).placed
    assert not p.decide(request("r", 6000), view(busy_gpu(0, free=6999))).placed


def test_gpu_with_foreign_memory_is_not_idle() -> None:
    # no tenants but 2 GiB used by something else: not idle, so exclusive will not use it
    g = idle_gpu(0, used=2048)
    d = placer("exclusive").decide(request("r", 1000), view(g))
    assert d.outcome is Outcome.NOT_NOW
    assert d.rejected[0].reason is Reason.BUSY
    assert placer("first-fit").decide(request("r", 1000), view(g)).collocated


# -- reservations (interference-aware) -----------------------------------------------------


def unseen_tenant_gpu(reserved: int) -> GpuState:
    """A GPU whose tenant started but has not allocated its memory yet."""
    t = Tenant("t", "early-bird", reserved_mib=reserved, placed_at=-200.0, observed_mib=None)
    return GpuState(
        "GPU-0", 0, A100, free_mib=40000, used_mib=960, window=MetricWindow.constant(0.1, 0.1, 0.1), tenants=(t,)
    )


def test_interference_aware_counts_reservations_of_unseen_tenants() -> None:
    g = unseen_tenant_gpu(reserved=30000)
    # usable with the reservation: 40960 - 30000 - 512 = 10448 < 9000 + 2048
    d = placer("interference-aware").decide(request("r", 9000), view(g))
    assert d.outcome is Outcome.NOT_NOW
    assert d.rejected[0].reason is Reason.MEMORY
    assert placer("interference-aware").decide(request("r", 7900), view(g)).placed
    # the paper's first-fit trusts the free reading (and its lock instead)
    assert placer("first-fit").decide(request("r", 9000), view(g)).placed


def test_interference_aware_does_not_overcommit_within_a_pass() -> None:
    # 20448 usable: room for one 12000 + 2048, not for two
    v = view(busy_gpu(0, free=20960))
    result = placer("interference-aware").schedule([request("a", 12000), request("b", 12000)], v)
    a, b = result.decisions
    assert a.gpu_uuids == ("GPU-0",)
    assert b.outcome is Outcome.NOT_NOW
    assert b.rejected[0].reason is Reason.MEMORY


def test_interference_aware_packs_two_when_both_fit() -> None:
    v = view(busy_gpu(0, free=30000))
    result = placer("interference-aware").schedule([request("a", 8000), request("b", 8000), request("c", 8000)], v)
    assert [d.placed for d in result.decisions] == [True, True, False]


def test_interference_aware_max_tenants() -> None:
    v = view(busy_gpu(0, free=39000, tenants=2))
    result = placer("interference-aware").schedule([request("a", 1000), request("b", 1000)], v)
    assert result.decisions[0].placed
    assert result.decisions[1].outcome is Outcome.NOT_NOW
    assert result.decisions[1].rejected[0].reason is Reason.TENANT_CAP
    full = placer("interference-aware").decide(request("c", 1000), view(busy_gpu(0, free=39000, tenants=3)))
    assert full.rejected[0].reason is Reason.TENANT_CAP


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "most-free-memory", "least-utilised"])
def test_paper_policies_lock_a_gpu_after_placing_in_a_pass(policy: str) -> None:
    result = placer(policy).schedule([request("a", 1000), request("b", 1000)], view(busy_gpu(0, free=39000)))
    assert result.decisions[0].placed
    assert result.decisions[1].rejected[0].reason is Reason.LOCKED


# -- multi-GPU and hosts -----------------------------------------------------------------


def two_hosts(*busy: int) -> ClusterView:
    gpus = []
    for i, host in enumerate(["a", "a", "b", "b"]):
        gpus.append(busy_gpu(i, free=1000, host=host) if i in busy else idle_gpu(i, host=host))
    return view(*gpus)


@pytest.mark.parametrize("policy", ["exclusive", "first-fit", "interference-aware"])
def test_multi_gpu_on_one_host(policy: str) -> None:
    d = placer(policy).decide(request("r", 8000, gpus=2), two_hosts(1))
    assert d.outcome is Outcome.PLACED
    assert d.gpu_uuids == ("GPU-2", "GPU-3")
    assert len(d.chosen) == 2


@pytest.mark.parametrize("policy", ["exclusive", "first-fit", "interference-aware"])
def test_multi_gpu_not_split_across_hosts(policy: str) -> None:
    # GPU 0 (host a) and GPU 2 (host b) qualify, but no host has two
    d = placer(policy).decide(request("r", 8000, gpus=2), two_hosts(1, 3))
    assert d.outcome is Outcome.NOT_NOW
    assert d.gpu_uuids == ()
    assert "2 GPUs" in d.summary


def test_multi_gpu_all_chosen_must_qualify() -> None:
    v = view(idle_gpu(0), busy_gpu(1, free=5000), busy_gpu(2, free=30000))
    d = placer("first-fit").decide(request("r", 8000, gpus=2), v)
    assert d.gpu_uuids == ("GPU-0", "GPU-2")
    assert d.collocated


def test_multi_gpu_takes_the_first_host_that_completes_the_set() -> None:
    v = view(idle_gpu(0, host="a"), idle_gpu(1, host="b"), idle_gpu(2, host="b"), idle_gpu(3, host="a"))
    d = placer("exclusive").decide(request("r", 100, gpus=2), v)
    assert d.gpu_uuids == ("GPU-1", "GPU-2")  # host b has two by GPU 2, host a only by GPU 3


# -- outcomes ------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL)
def test_never_fits_too_many_gpus(policy: str) -> None:
    v = view(*(idle_gpu(i) for i in range(4)))
    d = placer(policy).decide(request("r", 1000, gpus=8), v)
    assert d.outcome is Outcome.NEVER_FITS
    assert "8 GPUs" in d.summary and "4" in d.summary
    assert d.summary.startswith("never fits")


def test_never_fits_too_many_gpus_per_host() -> None:
    d = placer().decide(request("r", 1000, gpus=3), two_hosts())
    assert d.outcome is Outcome.NEVER_FITS


@pytest.mark.parametrize("policy", [*CHECKED, "exclusive"])
def test_never_fits_memory_boundary(policy: str) -> None:
    v = view(busy_gpu(0, free=100), busy_gpu(1, free=100))  # busy: the need could fit later
    limit = A100.memory_mib - RESERVE
    assert placer(policy).decide(request("r", limit), v).outcome is Outcome.NOT_NOW
    over = placer(policy).decide(request("r", limit + 1), v)
    assert over.outcome is Outcome.NEVER_FITS
    assert "512 MiB reserve" in over.summary


def test_never_fits_uses_largest_gpu() -> None:
    v = view(idle_gpu(0, A100), busy_gpu(1, free=100, spec=A100_80))
    assert placer().decide(request("r", 60000), v).outcome is Outcome.NOT_NOW
    # two GPUs of 60000: the second-largest GPU of the host is the limit
    assert placer().decide(request("r", 60000, gpus=2), v).outcome is Outcome.NEVER_FITS


@pytest.mark.parametrize("policy", ["round-robin", "static-2"])
def test_memory_blind_policies_have_no_memory_never_fits(policy: str) -> None:
    assert placer(policy).decide(request("r", 10**6), view(idle_gpu(0))).placed


def test_not_now_lists_a_reason_per_gpu() -> None:
    v = view(
        busy_gpu(0, free=3000),
        busy_gpu(1, free=30000, window=MetricWindow.constant(0.95, 0.9, 0.9)),
        busy_gpu(2, free=30000, tenants=3),
        idle_gpu(3, health=GpuHealth.QUARANTINED),
    )
    d = placer().decide(request("r", 4000), v)
    assert d.outcome is Outcome.NOT_NOW
    assert {v.index: v.reason for v in d.rejected} == {
        0: Reason.MEMORY,
        1: Reason.RISK,
        2: Reason.TENANT_CAP,
        3: Reason.UNHEALTHY,
    }
    assert d.summary.startswith("waiting")
    for word in ("memory", "high-risk", "tenant-cap", "unhealthy"):
        assert word in d.summary
    text = d.explain()
    assert text.count("skipped GPU") == 4
    assert "GPU 1 (A100-40GB): high-risk" in text


def test_explain_limits_rejected_lines() -> None:
    v = view(*(busy_gpu(i, free=100) for i in range(12)))
    text = placer().decide(request("r", 4000), v).explain(limit=3)
    assert text.count("skipped") == 3
    assert "9 more GPUs" in text


def test_placed_summary_names_gpu_and_co_tenants() -> None:
    v = view(busy_gpu(0, free=100), busy_gpu(1, free=30000, tenants=2))
    d = placer().decide(request("r", 4000), v)
    assert d.placed
    assert d.summary.startswith("placed on GPU 1 (A100-40GB)")
    assert "tenant1-0" in d.summary and "tenant1-1" in d.summary
    assert d.policy == "interference-aware"
    assert d.chosen[0].reason is None
    assert "chose GPU 1" in d.explain()


def test_placed_on_idle_gpu_says_no_co_tenants() -> None:
    d = placer().decide(request("r", 4000), view(idle_gpu(0)))
    assert "placed on GPU 0" in d.summary
    assert "co-tenants: none" in d.summary


# -- constraints and health --------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL)
def test_quarantined_gpu_never_chosen(policy: str) -> None:
    v = view(idle_gpu(0, health=GpuHealth.QUARANTINED), idle_gpu(1, health=GpuHealth.QUARANTINED))
    d = placer(policy).decide(request("r", 1000), v)
    assert d.outcome is Outcome.NOT_NOW  # may recover
    assert all(v.reason is Reason.UNHEALTHY for v in d.rejected)
    mixed = view(idle_gpu(0, health=GpuHealth.QUARANTINED), busy_gpu(1, free=30000))
    d = placer(policy).decide(request("r", 1000), mixed)
    assert "GPU-0" not in d.gpu_uuids


@pytest.mark.parametrize("policy", CHECKED)
def test_stale_gpu_only_used_when_idle(policy: str) -> None:
    stale_idle = idle_gpu(0, health=GpuHealth.STALE)
    assert placer(policy).decide(request("r", 1000), view(stale_idle)).placed
    stale_busy = busy_gpu(0, free=30000, health=GpuHealth.STALE)
    d = placer(policy).decide(request("r", 1000), view(stale_busy))
    assert d.outcome is Outcome.NOT_NOW
    assert d.rejected[0].reason is Reason.STALE


def test_stale_gpu_takes_one_task_per_pass() -> None:
    result = placer().schedule([request("a", 1000), request("b", 1000)], view(idle_gpu(0, health=GpuHealth.STALE)))
    assert result.decisions[0].placed
    assert result.decisions[1].rejected[0].reason is Reason.STALE


@pytest.mark.parametrize("policy", ["first-fit", "most-free-memory", "interference-aware", "round-robin"])
def test_avoided_gpu_only_as_last_resort(policy: str) -> None:
    v = view(idle_gpu(0), busy_gpu(1, free=30000))
    d = placer(policy).decide(request("r", 4000, avoid_gpus=frozenset({"GPU-0"})), v)
    assert d.gpu_uuids == ("GPU-1",)  # a shared GPU beats the idle avoided one
    alone = placer(policy).decide(request("r", 4000, avoid_gpus=frozenset({"GPU-0"})), view(idle_gpu(0)))
    assert alone.gpu_uuids == ("GPU-0",)


@pytest.mark.parametrize("policy", ["completion-time", "most-free-memory", "first-fit"])
def test_a_pair_retry_avoiding_one_gpu_of_the_only_pair_that_holds_it_takes_that_pair(policy: str) -> None:
    """A 2-GPU retry that crashed on an H100 and an L4 avoids both; only the two H100s hold it.  The
    pricing policy priced the avoided H100 alone (never a pair) and the retry waited for good."""
    v = view(idle_gpu(0, H100), idle_gpu(1, H100), idle_gpu(2, L4), idle_gpu(3, L4))
    retry = request("r#2", 35584, gpus=2, avoid_gpus=frozenset({"GPU-1", "GPU-2"}))
    d = placer(policy).decide(retry, v)
    assert d.outcome is Outcome.PLACED and d.gpu_uuids == ("GPU-0", "GPU-1")


def test_avoided_gpus_prefer_idle_among_themselves() -> None:
    v = view(busy_gpu(0, free=30000), idle_gpu(1))
    d = placer().decide(request("r", 4000, avoid_gpus=frozenset({"GPU-0", "GPU-1"})), v)
    assert d.gpu_uuids == ("GPU-1",)


@pytest.mark.parametrize("policy", CHECKED)
def test_exclusive_request_needs_idle_gpu(policy: str) -> None:
    v = view(busy_gpu(0, free=39000))
    d = placer(policy).decide(request("r", 1000, exclusive=True), v)
    assert d.outcome is Outcome.NOT_NOW
    assert d.rejected[0].reason is Reason.BUSY
    assert "idle GPU" in d.summary


def test_whole_gpu_request_needs_idle_gpu() -> None:
    v = view(busy_gpu(0, free=39000), idle_gpu(1))
    assert placer().decide(request("r", 40000, whole_gpu=True), v).gpu_uuids == ("GPU-1",)


def test_exclusive_tenant_blocks_collocation() -> None:
    d = placer().decide(request("r", 1000), view(busy_gpu(0, free=39000, exclusive=True)))
    assert d.rejected[0].reason is Reason.EXCLUSIVE_TENANT


def test_exclusive_placement_blocks_collocation_within_pass() -> None:
    v = view(idle_gpu(0))
    result = placer().schedule([request("a", 1000, exclusive=True), request("b", 1000)], v)
    assert result.decisions[0].placed
    assert result.decisions[1].rejected[0].reason is Reason.EXCLUSIVE_TENANT


def test_decide_does_not_change_state() -> None:
    p = placer("interference-aware")
    v = view(busy_gpu(0, free=20960))
    first = p.decide(request("a", 12000), v)
    second = p.decide(request("a", 12000), v)
    assert first == second
    assert first.placed


# -- queue passes --------------------------------------------------------------------------------


def fifo_scene() -> ClusterView:
    return view(busy_gpu(0, free=10000), busy_gpu(1, free=10000))


def test_strict_fifo_blocks_behind_the_head() -> None:
    reqs = [request("big", 30000), request("small", 1000), request("tiny", 10)]
    result = placer().schedule(reqs, fifo_scene(), blocking=True)
    assert [d.outcome for d in result.decisions] == [Outcome.NOT_NOW] * 3
    assert "strict FIFO" in result.decisions[1].summary
    assert "label-big" in result.decisions[1].summary
    assert not result.placed


def test_strict_fifo_places_until_the_head_blocks() -> None:
    reqs = [request("small", 1000), request("big", 30000), request("tiny", 10)]
    result = placer().schedule(reqs, fifo_scene(), blocking=True)
    assert [d.placed for d in result.decisions] == [True, False, False]


def test_never_fitting_head_does_not_block() -> None:
    reqs = [request("huge", 100_000), request("small", 1000)]
    result = placer().schedule(reqs, fifo_scene(), blocking=True)
    assert result.decisions[0].outcome is Outcome.NEVER_FITS
    assert result.decisions[1].placed


def test_backfill_places_later_fitting_tasks() -> None:
    reqs = [request("big", 30000), request("small", 1000), request("tiny", 10)]
    result = placer().schedule(reqs, fifo_scene(), blocking=False)
    assert [d.request_key for d in result.decisions] == ["big", "small", "tiny"]
    assert [d.placed for d in result.decisions] == [False, True, True]
    assert [d.request_key for d in result.placed] == ["small", "tiny"]


def protected_scene() -> ClusterView:
    return view(busy_gpu(0, free=20000, tenants=1), busy_gpu(1, free=20000, tenants=2))


def test_protected_request_holds_gpus() -> None:
    # GPU 0 has no tenant but 25000 MiB of someone else's memory: not idle, closest to fitting
    v = view(idle_gpu(0, used=25000), busy_gpu(1, free=20000, tenants=2))
    starving = request("starving", 30000)
    result = placer("first-fit").schedule([request("small", 1000), starving], v, protected=starving)
    assert result.reserved_for == "starving"
    assert [d.request_key for d in result.decisions] == ["starving", "small"]  # decided first, once
    assert result.decisions[0].outcome is Outcome.NOT_NOW
    small = result.decisions[1]
    assert small.gpu_uuids == ("GPU-1",)  # first-fit would take GPU 0, but it is held
    assert [v.reason for v in small.rejected] == [Reason.RESERVED]
    # without protection first-fit takes GPU 0
    assert placer("first-fit").schedule([request("small", 1000)], v).decisions[0].gpu_uuids == ("GPU-0",)


def test_protected_request_holds_gpus_that_have_tenants() -> None:
    starving = request("starving", 30000)
    result = placer("first-fit").schedule([request("small", 1000), starving], protected_scene(), protected=starving)
    assert result.reserved_for == "starving"
    small = result.decisions[1]
    assert small.gpu_uuids == ("GPU-1",)  # GPU 0 (fewest tenants) must be held for the starving request
    assert [v.reason for v in small.rejected] == [Reason.RESERVED]


def test_without_protection_first_fit_takes_gpu_zero() -> None:
    result = placer("first-fit").schedule([request("small", 1000)], protected_scene())
    assert result.reserved_for is None
    assert result.decisions[0].gpu_uuids == ("GPU-0",)


def test_protected_request_that_fits_is_placed_first() -> None:
    starving = request("starving", 5000)
    result = placer().schedule([request("other", 15000), starving], protected_scene(), protected=starving)
    assert result.reserved_for is None
    assert result.decisions[0].request_key == "starving"
    assert result.decisions[0].placed


def test_protected_request_is_held_on_gpus_that_could_ever_hold_it() -> None:
    # the L4 has fewer tenants, but 40,000 MiB never fits it: the H100 is held, the small try takes the L4
    gpus = view(busy_gpu(0, free=30000, tenants=2, spec=H100), busy_gpu(1, free=10000, tenants=1, spec=L4))
    starving = request("starving", 40000)
    result = placer("first-fit").schedule([request("small", 1000), starving], gpus, protected=starving)
    assert result.reserved_for == "starving"
    small = result.by_key["small"]
    assert small.gpu_uuids == ("GPU-1",)
    assert [v.reason for v in small.rejected] == [Reason.RESERVED]


def test_a_hold_stays_on_its_gpus_while_they_could_still_take_the_try() -> None:
    # pass 1 holds GPU 0 (fewest tenants); by pass 2 GPU 1's tenants left (someone else's memory
    # keeps it from fitting the try): the hold stays on GPU 0, which only drains, and GPU 1 takes
    # the small try (chosen afresh, the hold would move to GPU 1 and GPU 0 take new tenants)
    p = placer("first-fit")
    starving = request("starving", 30000)
    first = p.schedule([starving], protected_scene(), protected=starving)
    assert first.reserved_for == "starving"
    later = view(busy_gpu(0, free=20000, tenants=1), idle_gpu(1, used=25000))
    result = p.schedule([request("small", 1000), starving], later, protected=starving)
    assert result.reserved_for == "starving"
    assert result.by_key["small"].gpu_uuids == ("GPU-1",)


def test_protected_request_that_never_fits_holds_nothing() -> None:
    starving = request("starving", 100_000)
    result = placer().schedule([request("small", 1000)], protected_scene(), protected=starving)
    assert result.reserved_for is None
    assert result.decisions[0].outcome is Outcome.NEVER_FITS
    assert result.decisions[1].placed


# -- bugs ------------------------------------------------------------------------------------------


def test_schedule_reports_never_fits_after_a_waiting_request() -> None:
    v = view(busy_gpu(0, free=1000), busy_gpu(1, free=1000))
    result = placer("first-fit").schedule([request("waits", 30000), request("huge", 50000)], v)
    assert result.decisions[0].outcome is Outcome.NOT_NOW
    assert placer("first-fit").decide(request("huge", 50000), v).outcome is Outcome.NEVER_FITS
    assert result.decisions[1].outcome is Outcome.NEVER_FITS


@pytest.mark.parametrize("spec_name", ["L4", "V100-32GB", "T4"])
def test_whole_gpu_request_takes_an_idle_small_gpu(spec_name: str) -> None:
    spec = gpu_spec(spec_name)
    v = view(idle_gpu(0, spec), idle_gpu(1, spec))
    d = placer().decide(request("r", 40000, whole_gpu=True), v)
    assert d.outcome is Outcome.PLACED


def test_whole_gpu_request_takes_idle_gpu_with_driver_memory() -> None:
    d = placer().decide(request("r", 40000, whole_gpu=True), view(idle_gpu(0, used=600)))
    assert d.outcome is Outcome.PLACED


def test_waiting_summary_grammar() -> None:
    d = placer().decide(request("r", 30000), view(busy_gpu(0, free=1000)))
    assert "no a GPU" not in d.summary


# -- properties ------------------------------------------------------------------------------------

SPECS = [A100, L4, H100]
unit = st.floats(min_value=0.0, max_value=1.0)


@st.composite
def cluster_views(draw: st.DrawFn) -> ClusterView:
    gpus = []
    for i in range(draw(st.integers(min_value=1, max_value=6))):
        spec = draw(st.sampled_from(SPECS))
        half = spec.memory_mib // 2
        tenants = tuple(
            Tenant(
                key=f"t{i}.{k}",
                label=f"t{i}.{k}",
                reserved_mib=draw(st.one_of(st.integers(min_value=1, max_value=4000), st.integers(1, half))),
                placed_at=draw(st.floats(min_value=-300.0, max_value=0.0)),
                observed_mib=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=4000), st.integers(0, half))),
                exclusive=draw(st.booleans()) and draw(st.booleans()),
            )
            for k in range(draw(st.integers(min_value=0, max_value=3)))
        )
        used = draw(st.one_of(st.integers(min_value=0, max_value=8000), st.integers(0, spec.memory_mib)))
        gpus.append(
            GpuState(
                uuid=f"GPU-{i}",
                index=i,
                spec=spec,
                free_mib=spec.memory_mib - used,
                used_mib=used,
                window=MetricWindow.constant(draw(unit), draw(unit), draw(unit)),
                tenants=tenants,
                health=draw(st.sampled_from([GpuHealth.HEALTHY] * 4 + [GpuHealth.STALE, GpuHealth.QUARANTINED])),
                host=draw(st.sampled_from(["h0", "h1"])),
                last_placed_at=draw(st.one_of(st.none(), st.floats(min_value=-100.0, max_value=0.0))),
            )
        )
    return ClusterView(0.0, tuple(gpus))


requests_lists = st.lists(
    st.builds(
        lambda n, mib, gpus, exclusive, whole: request(f"r{n}", mib, gpus=gpus, exclusive=exclusive, whole_gpu=whole),
        st.integers(min_value=0, max_value=10**6),
        st.one_of(st.integers(min_value=1, max_value=6000), st.integers(min_value=1, max_value=45_000)),
        st.sampled_from([1, 1, 1, 2]),
        st.sampled_from([False, False, False, True]),
        st.sampled_from([False, False, False, True]),
    ),
    min_size=1,
    max_size=10,
    unique_by=lambda r: r.key,
)


def effective_free(g: GpuState, reservations: bool, now: float = 0.0, lock_s: float = 30.0) -> int:
    """Free memory the placer may hand out on g.

    With reservations, a tenant not yet seen (or seen for less than the lock time) counts at
    its reservation; a tenant seen long enough is already covered by the free reading.
    """
    if not (reservations and g.tenants):
        return g.free_mib
    held = 0
    for t in g.tenants:
        fresh = t.observed_mib is None or now - t.placed_at < lock_s
        held += t.accounted_mib if fresh else (t.observed_mib or 0)
    return min(g.free_mib, g.total_mib - held)


@settings(max_examples=250, deadline=None)
@given(cluster_views(), requests_lists, st.booleans())
def test_interference_aware_never_overcommits(v: ClusterView, reqs: list, blocking: bool) -> None:
    check_pass(v, reqs, "interference-aware", blocking)


@settings(max_examples=100, deadline=None)
@given(cluster_views(), requests_lists, st.sampled_from(CHECKED), st.booleans())
def test_memory_checking_policies_never_overcommit(v: ClusterView, reqs: list, policy: str, blocking: bool) -> None:
    check_pass(v, reqs, policy, blocking)


def check_pass(v: ClusterView, reqs: list, policy: str, blocking: bool) -> None:
    """Invariants of one pass: memory, tenant caps, health, idle-only requests, one host per task."""
    pol = make_policy(policy)
    result = Placer(pol).schedule(reqs, v, blocking=blocking)
    assert [d.request_key for d in result.decisions] == [r.key for r in reqs]
    by_key = {r.key: r for r in reqs}
    placed_mib: dict[str, int] = {}
    placed_n: dict[str, int] = {}
    exclusive_on: set[str] = set()
    for d in result.placed:
        r = by_key[d.request_key]
        assert len(d.gpu_uuids) == r.gpus == len(set(d.gpu_uuids))
        assert len({v.by_uuid[u].host for u in d.gpu_uuids}) == 1
        for u in d.gpu_uuids:
            g = v.by_uuid[u]
            assert g.health is not GpuHealth.QUARANTINED
            placed_n[u] = placed_n.get(u, 0) + 1
            if r.needs_idle_gpu:
                exclusive_on.add(u)
                assert not g.tenants
            else:
                placed_mib[u] = placed_mib.get(u, 0) + r.memory.mib
    for u, n in placed_n.items():
        g = v.by_uuid[u]
        if u in exclusive_on:
            assert n == 1  # an idle-GPU request has its GPU to itself in the pass
        if g.health is GpuHealth.STALE:
            assert n == 1 and not g.tenants
        if pol.max_tenants is not None and g.tenants:
            assert len(g.tenants) + n <= pol.max_tenants
    for u, mib in placed_mib.items():
        g = v.by_uuid[u]
        assert mib <= effective_free(g, pol.uses_reservations) - RESERVE
        if pol.uses_reservations:
            assert len(g.tenants) + placed_n[u] <= 3


@settings(max_examples=100, deadline=None)
@given(cluster_views(), requests_lists)
def test_placed_decisions_match_decide_alone_for_the_first_request(v: ClusterView, reqs: list) -> None:
    # the first request of a pass sees the untouched view: same outcome as decide()
    head = Placer(make_policy("interference-aware")).schedule(reqs, v).decisions[0]
    alone = Placer(make_policy("interference-aware")).decide(reqs[0], v)
    assert head == alone


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=3000, max_value=40000),
    st.integers(min_value=1, max_value=2),
    st.lists(st.integers(min_value=500, max_value=12000), min_size=2, max_size=6),
)
def test_interference_aware_packing_on_one_gpu(free: int, tenants: int, sizes: list[int]) -> None:
    v = view(busy_gpu(0, free=free, tenants=tenants))
    reqs = [request(f"r{i}", mib) for i, mib in enumerate(sizes)]
    result = placer("interference-aware").schedule(reqs, v)
    placed = [r.memory.mib for r, d in zip(reqs, result.decisions, strict=True) if d.placed]
    assert sum(placed) <= free - RESERVE
    assert tenants + len(placed) <= 3
    # greedy in queue order: a request is refused only if it does not fit what is left, or the cap is reached
    left, count = free - RESERVE, tenants
    for r, d in zip(reqs, result.decisions, strict=True):
        fits = r.memory.mib + HEADROOM <= left and count < 3
        assert d.placed is fits
        if fits:
            left -= r.memory.mib
            count += 1


def test_hosts_whose_gpus_share_indices_and_free_memory_are_placed_without_confusion() -> None:
    # 8 hosts x 2 GPUs, indices 0-1 on each, all busy with the same free memory: every tie in
    # the policy's key and in the GPU index (found by the multi-host bench: it raised TypeError)
    from dataclasses import replace

    from helpers import busy_gpu, request, view

    from carma_airflow.core.placer import Placer
    from carma_airflow.core.policies import make_policy

    gpus = [
        replace(busy_gpu(i, free=30000), uuid=f"GPU-{host}-{i}", host=f"h{host}") for host in range(8) for i in range(2)
    ]
    # ahead of them in the policy's order (tightest fit first): GPUs too full for the requests,
    # so the by-memory index, not the head of the order, picks among the tied ones
    full = [
        replace(busy_gpu(i, free=3000), uuid=f"GPU-f{host}-{i}", host=f"f{host}")
        for host in range(16)
        for i in range(2)
    ]
    placer = Placer(make_policy("interference-aware"))
    result = placer.schedule([request(f"r{k}", 4000) for k in range(40)], view(*full, *gpus))
    used = [d.gpu_uuids[0] for d in result.placed]
    # two newcomers on every GPU (3 tenants: the cap), none counted twice or lost from the pools
    assert sorted(used) == sorted(g.uuid for g in gpus for _ in range(2))


def test_a_larger_waiting_request_gets_its_own_reason_not_a_smaller_ones() -> None:
    # found by the 2,000-task load run: a 20 GiB task was told "no GPU with 4.0 GiB free ..."
    full = view(busy_gpu(0, free=3000), busy_gpu(1, free=3000))
    result = placer().schedule([request("small", 4096), request("big", 20480), request("small2", 4096)], full)
    small, big, small2 = (result.by_key[k] for k in ("small", "big", "small2"))
    assert small.outcome is big.outcome is Outcome.NOT_NOW
    # each names what it lacks: its estimate + 2 GiB headroom
    assert "no GPU with 22.0 GiB free" in big.summary and "no GPU with 6.0 GiB free" in small.summary
    assert small2 is small  # the same shape and memory still share one decision
