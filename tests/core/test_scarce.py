"""Keeping scarce GPUs for the tries that need them on a cluster of several GPU sizes (core/scarce.py)."""

from __future__ import annotations

from dataclasses import replace

from helpers import A100, A100_80, H100, busy_gpu, idle_gpu, request, view

from carma_airflow.core import Placer
from carma_airflow.core.decision import Reason
from carma_airflow.core.gpu import GpuState, gpu_spec
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.scarce import capability_key, size_class
from carma_airflow.core.task import TaskRequest

V100 = gpu_spec("V100-32GB")
SMALL, BIG = 8_000, 60_000  # MiB: fits a V100; only an 80 GB GPU


def _mixed() -> tuple[GpuState, ...]:
    """2x A100-80GB (GPUs 0, 1) and 2x V100-32GB (GPUs 2, 3), all idle."""
    return (idle_gpu(0, A100_80), idle_gpu(1, A100_80), idle_gpu(2, V100), idle_gpu(3, V100))


def _where(placer: Placer, reqs: list[TaskRequest], gpus: tuple[GpuState, ...]) -> dict[str, tuple[str, ...]]:
    result = placer.schedule(reqs, view(*gpus))
    return {d.request_key: d.gpu_uuids for d in result.placed}


def test_the_size_classes_put_both_80_gb_models_together_and_the_faster_one_last() -> None:
    assert size_class(H100) == size_class(A100_80) > size_class(A100) > size_class(V100)
    assert capability_key(A100_80, 7) < capability_key(H100, 0)  # same size: the slower one first
    assert capability_key(V100, 9) < capability_key(A100_80, 0)


def test_small_tries_go_to_the_v100s_and_the_80_gb_tries_find_the_a100s() -> None:
    placer = Placer(make_policy("completion-time"))
    small = [request(f"s{i}", SMALL) for i in range(2)]
    big = [request(f"b{i}", BIG) for i in range(2)]
    got = _where(placer, [*small, *big], _mixed())
    assert {got["s0"], got["s1"]} == {("GPU-2",), ("GPU-3",)}
    assert {got["b0"], got["b1"]} == {("GPU-0",), ("GPU-1",)}


def test_an_idle_a100_is_kept_from_a_small_try_while_as_many_80_gb_tries_wait() -> None:
    # the V100s are busy but have room; two 80 GB tries wait behind two small ones
    gpus = (idle_gpu(0, A100_80), idle_gpu(1, A100_80), busy_gpu(2, 20_000, spec=V100), busy_gpu(3, 20_000, spec=V100))
    placer = Placer(make_policy("completion-time"))
    reqs = [request("s0", SMALL), request("s1", SMALL), request("b0", BIG), request("b1", BIG)]
    result = placer.schedule(reqs, view(*gpus))
    got = {d.request_key: d.gpu_uuids for d in result.placed}
    assert {got["b0"], got["b1"]} == {("GPU-0",), ("GPU-1",)}
    for key in ("s0", "s1"):  # shared a V100 or waited: never an A100
        assert got.get(key, ("GPU-2",))[0] in ("GPU-2", "GPU-3")
    kept = [v for d in result.decisions for v in d.rejected if v.reason is Reason.KEPT]
    assert kept and "kept for 2 waiting GPU request(s)" in kept[0].detail


def test_with_no_80_gb_try_waiting_a_small_try_takes_an_a100_rather_than_wait() -> None:
    gpus = (idle_gpu(0, A100_80), busy_gpu(1, 2_000, spec=V100))
    got = _where(Placer(make_policy("completion-time")), [request("s0", SMALL)], gpus)
    assert got["s0"] == ("GPU-0",)


def test_the_request_past_its_starvation_bound_is_never_kept_out() -> None:
    gpus = (idle_gpu(0, A100_80), busy_gpu(1, 2_000, spec=V100))
    starving = request("s0", SMALL)
    result = Placer(make_policy("completion-time")).schedule(
        [starving, request("b0", BIG)], view(*gpus), protected=starving
    )
    assert result.by_key["s0"].gpu_uuids == ("GPU-0",)


def test_on_one_model_the_lowest_index_as_before_and_other_policies_keep_the_index_order() -> None:
    same = tuple(idle_gpu(i, A100) for i in range(4))
    got = _where(Placer(make_policy("completion-time")), [request("s0", SMALL), request("s1", SMALL)], same)
    assert got == {"s0": ("GPU-0",), "s1": ("GPU-1",)}
    mfm = _where(Placer(make_policy("most-free-memory")), [request("s0", SMALL)], _mixed())
    assert mfm == {"s0": ("GPU-0",)}  # a baseline as it was: the lowest index
    off = make_policy("completion-time")
    assert isinstance(off, CompletionTime)
    off.settings = replace(off.settings, keep_scarce=False)
    assert _where(Placer(off), [request("s0", SMALL)], _mixed()) == {"s0": ("GPU-0",)}


def test_an_idle_gpu_is_kept_by_what_its_own_free_memory_holds_not_by_its_model_alone() -> None:
    # two idle A100-80GBs; a foreign process holds 900 MiB of GPU 1, so only GPU 0 holds the waiting
    # 2-GPU try's 81,000 MiB per GPU: GPU 0 is kept for it, GPU 1 is not (a keep that read the
    # model alone, or a memo by model, would keep both and leave the small try waiting)
    gpus = (idle_gpu(0, A100_80), idle_gpu(1, A100_80, used=900), busy_gpu(2, 20_000, spec=V100))
    placer = Placer(make_policy("completion-time"))
    facts = {f.index: f.usable_free_mib for f in placer.facts(view(*gpus))}
    assert facts[1] < 81_000 <= facts[0]
    result = placer.schedule([request("s0", SMALL), request("b0", 81_000, gpus=2, add_headroom=False)], view(*gpus))
    decided = result.by_key["s0"]
    assert decided.gpu_uuids == ("GPU-1",)
    kept = [v for v in decided.rejected if v.reason is Reason.KEPT]
    assert [v.index for v in kept] == [0]
