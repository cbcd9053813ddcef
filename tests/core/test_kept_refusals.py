"""Completion-time's floor (``min_gain``) in a deep queue: a try every candidate of which the floor
refuses waits for the soonest drain without its candidates being played forward with it
(core/placement_drains.py, ``DrainPass._refused_waits``), deciding as pricing them would, and a
change on a GPU (a tenant leaves) prices it afresh."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from helpers import busy_gpu, request, view
from test_completion_time import FixedForecast, _floored

from carma_airflow.core import Placer
from carma_airflow.core.decision import Outcome
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.placement_drains import MAX_AGE
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.priced import Choice
from carma_airflow.core.task import TaskRequest

# two tenants and a newcomer crawl (0.2 each: the GPU's summed speed falls from 1.8 to 0.6); two
# at a time go at 0.9 (one tenant and the newcomer: 1.0 -> 1.8, +0.8 clears a 0.3 floor)
SHARED = {2: 0.9, 3: 0.2}


def _counting(monkeypatch: pytest.MonkeyPatch, policy: CompletionTime) -> list[str]:
    """The keys of the requests ``policy.choose`` priced, in order."""
    priced: list[str] = []
    choose = policy.choose

    def counted(request: TaskRequest, *args: Any) -> Choice:
        priced.append(request.key)
        return choose(request, *args)

    monkeypatch.setattr(policy, "choose", counted)
    return priced


def _placed(
    placer: Placer, requests: list[TaskRequest], gpus: tuple[GpuState, ...], now: float
) -> list[tuple[str, tuple[str, ...]]]:
    """What one pass without waiting decisions placed: (request, GPUs)."""
    got = placer.place([[r] for r in requests], view(*gpus, now=now), order_key=lambda r: (r.submitted_at, r.key))
    return [(d.request_key, d.gpu_uuids) for d in got.placed]


def _place(placer: Placer, requests: list[TaskRequest], gpus: tuple[GpuState, ...], now: float) -> list[str]:
    """The keys one pass without waiting decisions placed."""
    return [key for key, _ in _placed(placer, requests, gpus, now)]


def _refusing() -> tuple[Placer, FixedForecast, tuple[GpuState, ...]]:
    """Two GPUs with two tenants each (GPU 0's drain first): the floor refuses a third on either."""
    work = {"tenant0-0": 100.0, "tenant0-1": 100.0, "tenant1-0": 300.0, "tenant1-1": 300.0}
    work |= {"label-a": 1000.0, "label-b": 2000.0}
    fc = FixedForecast(work, SHARED)
    gpus = (busy_gpu(0, 30_000, tenants=2), busy_gpu(1, 30_000, tenants=2))
    return Placer(_floored(fc, 0.3)), fc, gpus


def test_a_refused_try_waits_without_being_priced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    placer, _, gpus = _refusing()
    policy = placer.policy
    assert isinstance(policy, CompletionTime)
    priced = _counting(monkeypatch, policy)
    a = request("a", 4000)
    assert _place(placer, [a], gpus, now=0.0) == []
    assert priced == [] and placer.kept.refused == 1  # both GPUs refuse a third tenant: not priced
    # the clock moved past what a kept wait holds for (2 % of its ~1,100 s cost): the wait is not
    # kept, yet both GPUs still refuse: it waits again without its options priced
    later = 100.0 * MAX_AGE * 1100.0
    assert _place(placer, [a], gpus, now=later) == []
    assert priced == []
    assert placer.kept.refused == 2 and placer.kept.reused == 0
    # for the GPU that drains first, as pricing it decided (the wait kept for the next passes)
    (kept,) = placer.kept.by_key.values()
    assert kept.drained.uuid == "GPU-0"


def test_refused_tries_of_one_pass_count_on_distinct_drains(monkeypatch: pytest.MonkeyPatch) -> None:
    placer, _, gpus = _refusing()
    policy = placer.policy
    assert isinstance(policy, CompletionTime)
    a, b = request("a", 4000), request("b", 4000, submitted_at=1.0)
    priced = _counting(monkeypatch, policy)
    assert _place(placer, [a, b], gpus, now=0.0) == []
    assert _place(placer, [a, b], gpus, now=1000.0) == []
    assert priced == [] and placer.kept.refused == 4
    drains = sorted(k.drained.uuid for k in placer.kept.by_key.values())
    assert drains == ["GPU-0", "GPU-1"]  # the second try waits for the next GPU to drain


def test_a_tenant_leaving_prices_the_refused_try_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    placer, _, gpus = _refusing()
    policy = placer.policy
    assert isinstance(policy, CompletionTime)
    priced = _counting(monkeypatch, policy)
    a = request("a", 4000)
    assert _place(placer, [a], gpus, now=0.0) == []
    assert _place(placer, [a], gpus, now=1000.0) == []
    assert priced == [] and placer.kept.refused == 2
    # one of GPU 1's tenants left: two at a time pay (+0.8 over the floor), and sharing beats waiting
    left = (gpus[0], busy_gpu(1, 30_000, tenants=1))
    assert _place(placer, [a], left, now=1001.0) == ["a"]
    assert priced == ["a"] and placer.kept.refused == 2


def test_a_two_gpu_try_refused_everywhere_waits_unpriced(monkeypatch: pytest.MonkeyPatch) -> None:
    placer, _, gpus = _refusing()
    policy = placer.policy
    assert isinstance(policy, CompletionTime)
    priced = _counting(monkeypatch, policy)
    pair = request("a", 4000, gpus=2)
    assert _place(placer, [pair], gpus, now=0.0) == []
    assert priced == [] and placer.kept.refused == 1
    fresh, _, _ = _refusing()
    alone = fresh.decide(pair, view(*gpus))  # with its reasons: priced
    assert alone.outcome is Outcome.NOT_NOW and "waiting" in alone.summary  # priced, it waits too


def test_without_a_floor_nothing_is_held_as_refused() -> None:
    placer, _, gpus = _refusing()
    policy = placer.policy
    assert isinstance(policy, CompletionTime)
    policy.settings = replace(policy.settings, min_gain=None, learned_floor=None)
    _place(placer, [request("a", 4000)], gpus, now=0.0)
    _place(placer, [request("a", 4000)], gpus, now=1000.0)
    assert placer.kept.refused == 0


def _gpus(rng: random.Random) -> tuple[GpuState, ...]:
    out = []
    for i in range(8):
        tenants = rng.choice((1, 2, 2, 2))
        out.append(busy_gpu(i, rng.choice((6_000, 30_000)), tenants=tenants, host=f"h{i // 4}"))
    return tuple(out)


@pytest.mark.parametrize("seed", range(6))
def test_held_refusals_decide_as_pricing_every_try(seed: int) -> None:
    """Several passes over changing GPUs: a placer that holds refused tries places what one that
    prices every try (no kept waits) places, pass by pass."""
    rng = random.Random(seed)
    work = {f"tenant{i}-{k}": rng.uniform(50, 3000) for i in range(8) for k in range(2)}
    kinds = [f"k{j}" for j in range(5)]
    work |= {f"label-{kind}": rng.uniform(100, 4000) for kind in kinds}
    shared = {2: rng.choice((0.55, 0.7, 0.9)), 3: 0.2}
    held = Placer(_floored(FixedForecast(work, shared), 0.3))
    priced = Placer(_floored(FixedForecast(work, shared), 0.3))
    priced.kept = None  # type: ignore[assignment]  # every try priced
    gpus = _gpus(rng)
    for step in range(12):
        now = step * rng.uniform(0.0, 400.0)
        if rng.random() < 0.5:  # a GPU changes (a tenant leaves or one arrives)
            i = rng.randrange(len(gpus))
            swapped = busy_gpu(i, rng.choice((6_000, 30_000)), tenants=rng.choice((1, 2)), host=f"h{i // 4}")
            gpus = (*gpus[:i], swapped, *gpus[i + 1 :])
        reqs = [request(kind, rng.choice((4000, 8000)), gpus=rng.choice((1, 1, 2))) for kind in kinds]
        reqs = [TaskRequest(r.key, r.label, r.memory, gpus=r.gpus, submitted_at=float(j)) for j, r in enumerate(reqs)]
        assert _placed(held, reqs, gpus, now) == _placed(priced, reqs, gpus, now)
    assert held.kept.refused > 0
