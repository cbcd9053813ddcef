"""The headline of a waiting decision names the cause that blocks, not always memory."""

from __future__ import annotations

import re

import pytest
from helpers import busy_gpu, idle_gpu, request, view

from carma_airflow.core import GpuHealth, GpuVerdict, Outcome, Placer, Reason
from carma_airflow.core.filters.gpu_model import GpuModel
from carma_airflow.core.placer import waiting_summary
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.interference_aware import InterferenceAware

FREE_34_GIB = 34 * 1024


def headline(summary: str) -> str:
    """What the executor compares to decide whether a waiting reason is new (numbers left out)."""
    return re.sub(r"\d+(\.\d+)?", "#", summary.split(" (", 1)[0])


def test_gpus_at_their_tenant_cap_with_memory_to_spare_are_not_reported_as_short_of_memory() -> None:
    # the issue: 2 GPUs with 34 GiB free each, both at a tenant cap of 2; a 6 GiB task waits
    gpus = view(busy_gpu(0, free=FREE_34_GIB, tenants=2), busy_gpu(1, free=FREE_34_GIB, tenants=2))
    d = Placer(InterferenceAware(max_tenants=2)).decide(request("r", 6144), gpus)
    assert d.outcome is Outcome.NOT_NOW
    assert d.summary == "waiting: every GPU is at its tenant cap (2 of 2 GPUs tenant-cap)"
    assert "GiB free" not in d.summary
    # the same words for `carma why` and the GPU page: both show the decision's summary as it is
    assert d.explain().splitlines()[0] == d.summary


def test_memory_is_named_only_when_memory_is_what_every_gpu_lacks() -> None:
    d = Placer(make_policy("interference-aware")).decide(
        request("r", 6144), view(busy_gpu(0, free=3000), busy_gpu(1, free=3000))
    )
    assert d.summary == "waiting: no GPU with 8.0 GiB free (2 of 2 GPUs memory)"


def test_mixed_reasons_lead_with_the_most_common_and_count_every_gpu() -> None:
    gpus = view(
        busy_gpu(0, free=FREE_34_GIB, tenants=3),
        busy_gpu(1, free=FREE_34_GIB, tenants=3),
        busy_gpu(2, free=FREE_34_GIB, tenants=3),
        busy_gpu(3, free=3000),
    )
    d = Placer(make_policy("interference-aware")).decide(request("r", 6144), gpus)
    assert d.summary == "waiting: no GPU can take 8.0 GiB now (3 of 4 GPUs tenant-cap, 1 memory)"


def test_the_headline_of_mixed_reasons_does_not_change_with_their_counts() -> None:
    # a busy cluster shifts between "mostly full" and "mostly at the cap" every pass: the
    # headline (what decides a new store write) stays the same, the counts move
    p = Placer(make_policy("interference-aware"))
    mostly_cap = p.decide(
        request("r", 6144), view(*(busy_gpu(i, free=FREE_34_GIB, tenants=3) for i in range(3)), busy_gpu(3, free=100))
    )
    mostly_full = p.decide(
        request("r", 6144), view(busy_gpu(0, free=FREE_34_GIB, tenants=3), *(busy_gpu(i, free=100) for i in (1, 2, 3)))
    )
    assert mostly_cap.summary != mostly_full.summary
    assert headline(mostly_cap.summary) == headline(mostly_full.summary) == "waiting: no GPU can take # GiB now"
    assert "(3 of 4 GPUs memory, 1 tenant-cap)" in mostly_full.summary


def test_a_task_that_needs_an_idle_gpu() -> None:
    p = Placer(make_policy("interference-aware"))
    busy = p.decide(request("r", 1000, exclusive=True), view(busy_gpu(0, free=39000), busy_gpu(1, free=39000)))
    assert busy.summary == "waiting: no idle GPU (2 of 2 GPUs not-idle)"
    mixed = p.decide(
        request("r", 1000, exclusive=True),
        view(busy_gpu(0, free=39000), idle_gpu(1, health=GpuHealth.QUARANTINED)),
    )
    assert mixed.summary == "waiting: no usable idle GPU (1 of 2 GPUs unhealthy, 1 not-idle)"


def test_multi_gpu_requests_say_no_host() -> None:
    p = Placer(make_policy("interference-aware"))
    capped = p.decide(request("r", 6144, gpus=2), view(*(busy_gpu(i, free=FREE_34_GIB, tenants=3) for i in range(2))))
    assert capped.summary == "waiting: every GPU is at its tenant cap (2 of 2 GPUs tenant-cap)"
    full = p.decide(request("r", 6144, gpus=2), view(busy_gpu(0, free=100), busy_gpu(1, free=100)))
    assert full.summary == "waiting: no host with 2 GPUs with 8.0 GiB free (2 of 2 GPUs memory)"
    one_short = p.decide(request("r", 6144, gpus=2), view(busy_gpu(0, free=FREE_34_GIB), busy_gpu(1, free=100)))
    assert one_short.summary == "waiting: no host with 2 GPUs that can take 8.0 GiB now (1 of 2 GPUs memory)"


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_has_a_headline_of_its_own(reason: Reason) -> None:
    rejected = [GpuVerdict(f"GPU-{i}", i, "A100-40GB", reason, "detail") for i in range(3)]
    # a per-try filter's headline comes from the filter (the GPU model's names the model asked for)
    headlines = {Reason.MODEL: GpuModel().headline(request("r", 1000, gpu_model="H100"))}
    text = waiting_summary(rejected, 3, n=1, idle_only=False, need="8.0 GiB", headlines=headlines)
    assert text.endswith(f"(3 of 3 GPUs {reason.value})")
    assert "{" not in text and "no GPU can take" not in text
    assert ("8.0 GiB" in text) is (reason is Reason.MEMORY)
    assert ("H100" in text) is (reason is Reason.MODEL)


def test_one_gpu_and_no_candidates() -> None:
    one = [GpuVerdict("GPU-0", 0, "A100-40GB", Reason.LOCKED, "placed on recently")]
    assert waiting_summary(one, 1, n=1, idle_only=False, need="1.0 GiB") == (
        "waiting: every GPU was placed on moments ago (1 of 1 GPU locked)"
    )
    assert waiting_summary([], 4, n=2, idle_only=False, need="1.0 GiB") == (
        "waiting: no host with 2 GPUs that can take 1.0 GiB now (too few candidates on one host)"
    )
