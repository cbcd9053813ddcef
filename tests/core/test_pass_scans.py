"""What a pass keeps to decide faster stays true to what it decides.

* The scan that skips runs of GPUs without the memory (``pools.Walk``) and the by-band search for
  the first GPU that fits (``Pools.first_fitting``) decide exactly as the plain scan, reasons
  included: the same policies with ``free_key_at = None`` (no skipping) are the reference.
* The idle scan that stops where no idle GPU after it has the memory (``PlacementPass._idle_room``)
  decides exactly as the scan that walks them all, reasons included.
* The verdicts a pass keeps (``PlacementPass._verdicts``) follow a GPU a placement changed.
* The shapes a cycle's placer keeps from submission (``Placer.shape_of``) are the shapes a pass
  makes, and a try whose activity is learned gets its new shape.
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from helpers import A100, L4, busy_gpu, idle_gpu, request, view

from carma_airflow.core import (
    Backfill,
    GpuState,
    MemoryNeed,
    MetricWindow,
    Placer,
    SchedulingCycle,
    TaskRequest,
)
from carma_airflow.core import placement_pass as placement_pass_module
from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.decision import Outcome, Reason
from carma_airflow.core.placement_pass import PlacementPass
from carma_airflow.core.policies.base import Policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.pools import Scanned, full_scan
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.units import format_mib


class PlainInterferenceAware(InterferenceAware):
    free_key_at = None  # type: ignore[assignment]  # no skipping: every scan walks every GPU


class PlainCompletionTime(CompletionTime):
    free_key_at = None  # type: ignore[assignment]


def _learned(policy: CompletionTime) -> CompletionTime:
    for t in range(5):
        policy.learn_duration(f"type{t}", 300.0 + 600.0 * t)
    return policy


def _gpus(rng: random.Random, n: int) -> list[GpuState]:
    out = []
    for i in range(n):
        spec = L4 if i % 9 == 8 else A100
        used = rng.choice((0, 2_000, 9_000, 20_000, 30_000, 34_000, 36_000))
        window = MetricWindow.constant(rng.choice((0.05, 0.3, 0.6, 0.85)), 0.3, 0.2)
        out.append(GpuState(f"GPU-{i}", i % 8, spec, spec.memory_mib - used, used, window, host=f"h{i // 8}"))
    return out


def _idle_small(rng: random.Random, n: int) -> list[GpuState]:
    """Hosts of 8 in turn A100-40GB, L4, L4, the A100s in use and most L4s idle: many idle GPUs
    too small for the larger tries."""
    out = []
    for i in range(n):
        spec = A100 if (i // 8) % 3 == 0 else L4
        idle = spec is L4 and rng.random() < 0.8
        used = 0 if idle else rng.choice((9_000, 15_000, spec.memory_mib - 3_000))
        window = MetricWindow.constant(rng.choice((0.05, 0.3, 0.6)), 0.3, 0.2)
        out.append(GpuState(f"GPU-{i}", i % 8, spec, spec.memory_mib - used, used, window, host=f"h{i // 8}"))
    return out


def _request(rng: random.Random, k: int, now: float) -> TaskRequest:
    whole = rng.random() < 0.05
    return TaskRequest(
        key=f"r{k}",
        label=f"type{rng.randrange(5)}[{k}]",
        memory=MemoryNeed(rng.choice((1_500, 3_000, 6_000, 12_000, 20_000, 30_000)), "test", whole_gpu=whole),
        gpus=2 if rng.random() < 0.12 else 1,
        exclusive=rng.random() < 0.03,
        priority=rng.choice((0, 0, 1)),
        submitted_at=round(now - rng.uniform(0.0, 4000.0), 3),
        avoid_gpus=frozenset({"GPU-1", "GPU-9"}) if rng.random() < 0.08 else frozenset(),
        gpu_model="L4" if rng.random() < 0.03 else None,
    )


def _passes(
    policy: Policy, seed: int, decisions: bool, fleet: Callable[[random.Random, int], list[GpuState]] = _gpus
) -> list[object]:
    """Every decision of four passes of a cycle (its placed, never-fits and waiting ones)."""
    rng = random.Random(seed)
    gpus = fleet(rng, rng.choice((64, 120)))
    now = 10_000.0
    cycle = SchedulingCycle(Placer(policy), Backfill(starvation_s=1500.0), reservations=Reservations(seen_after_s=30.0))
    k = 0
    for _ in range(3 * len(gpus)):
        cycle.submit(_request(rng, k, now), now - rng.uniform(0.0, 3000.0))
        k += 1
    out: list[object] = []
    for _ in range(4):
        result = cycle.run(now, gpus, waiting_decisions=decisions)
        out += [p.decision for p in result.placed] + [u.decision for u in result.never_fits]
        out += [*sorted(result.waiting.items()), result.reserved_for]
        for p in result.placed[::2]:
            cycle.release(p.request.key)
        now += rng.uniform(5.0, 120.0)
        for _ in range(rng.randrange(len(gpus))):
            cycle.submit(_request(rng, k, now), now)
            k += 1
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("decisions", [True, False])
@pytest.mark.parametrize("kind", ["interference-aware", "completion-time"])
def test_the_skipping_scan_decides_as_the_plain_one(
    seed: int, decisions: bool, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    filled = []  # the waiting decisions whose skipped rejections were put back

    def counted(*args: Any) -> Scanned:
        filled.append(1)
        return full_scan(*args)

    monkeypatch.setattr(placement_pass_module, "full_scan", counted)
    if kind == "interference-aware":
        fast, plain = _passes(InterferenceAware(), seed, decisions), _passes(PlainInterferenceAware(), seed, decisions)
    else:
        fast = _passes(_learned(CompletionTime()), seed, decisions)
        plain = _passes(_learned(PlainCompletionTime()), seed, decisions)
    # the same decisions, reasons and their texts included (policy names are the same)
    assert fast == plain
    assert any(getattr(d, "placed", False) for d in fast)
    if decisions:
        assert filled  # some waiting decision had its skipped GPUs listed again


def test_a_waiting_decision_lists_every_gpu_the_scan_skipped() -> None:
    # 12 full GPUs at the head of the order on one host, then one with room on another: a 2-GPU
    # try waits, and its reasons name every full GPU, those the scan skipped included
    gpus = [busy_gpu(i, free=2_600 + 10 * i, host="a") for i in range(12)] + [busy_gpu(12, free=10_000, host="b")]
    result = Placer(InterferenceAware()).schedule([request("two", 6_000, gpus=2)], view(*gpus))
    (d,) = result.decisions
    assert d.outcome is Outcome.NOT_NOW
    assert [v.uuid for v in d.rejected] == [f"GPU-{i}" for i in range(12)]
    assert all(v.reason is Reason.MEMORY for v in d.rejected)


@pytest.mark.parametrize("decisions", [True, False])
@pytest.mark.parametrize("kind", ["interference-aware", "completion-time"])
def test_the_cut_idle_scan_decides_as_the_full_one(decisions: bool, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def policy() -> Policy:
        return InterferenceAware() if kind == "interference-aware" else _learned(CompletionTime())

    rests, rest = [], placement_pass_module._idle_rest

    def counted(*args: Any) -> Scanned:
        rests.append(1)
        return rest(*args)

    room = PlacementPass._idle_room
    for seed in range(4):
        monkeypatch.setattr(placement_pass_module, "_idle_rest", counted)
        monkeypatch.setattr(PlacementPass, "_idle_room", room)
        cut = _passes(policy(), seed, decisions, _idle_small)
        # the reference: no idle GPU's bound ever lets the scan stop early
        monkeypatch.setattr(PlacementPass, "_idle_room", lambda self: defaultdict(lambda: sys.maxsize))
        full = _passes(policy(), seed, decisions, _idle_small)
        assert cut == full  # the same decisions, reasons and their texts included
        assert any(getattr(d, "placed", False) for d in cut)
    if decisions:
        assert rests  # some waiting decision had the idle GPUs its scan stopped before listed again


def test_a_waiting_decision_lists_every_idle_gpu_the_scan_stopped_before(monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 idle L4s (24 GB) and a full A100: a 30,000 MiB try fits none; the idle scan stops once it
    # holds what a placed decision keeps (8), and the waiting decision names every idle GPU again
    rests, rest = [], placement_pass_module._idle_rest

    def counted(*args: Any) -> Scanned:
        rests.append(1)
        return rest(*args)

    monkeypatch.setattr(placement_pass_module, "_idle_rest", counted)
    gpus = [idle_gpu(i, L4) for i in range(12)] + [busy_gpu(12, free=3_000)]
    (d,) = Placer(InterferenceAware()).schedule([request("big", 30_000)], view(*gpus)).decisions
    assert d.outcome is Outcome.NOT_NOW
    assert [v.uuid for v in d.rejected] == [f"GPU-{i}" for i in range(13)]
    assert all(v.reason is Reason.MEMORY for v in d.rejected)
    assert rests == [1]  # the scan stopped early, and was resumed for the reasons


def test_a_kept_rejection_text_follows_a_gpu_a_placement_changed() -> None:
    placer = Placer(InterferenceAware())
    state = placer._pass(view(busy_gpu(0, free=30_000), busy_gpu(1, free=3_000)))
    big, small = request("big", 30_000), request("small", 8_000)
    before = state.decide(big, frozenset())
    placed = state.decide(small, frozenset())
    assert before.outcome is Outcome.NOT_NOW and placed.gpu_uuids == ("GPU-0",)
    state.apply(small, placed)
    after = state.decide(big, frozenset())
    usable = state.by_uuid["GPU-0"].usable_free_mib
    (was,) = [v for v in before.rejected if v.uuid == "GPU-0"]
    (now,) = [v for v in after.rejected if v.uuid == "GPU-0"]
    assert was.detail != now.detail and now.detail.startswith(f"{format_mib(usable)} usable")
    # a GPU's facts changed in place are not read from what was kept either
    state.by_uuid["GPU-0"].usable_free_mib -= 1_024
    (again,) = [v for v in state.decide(big, frozenset()).rejected if v.uuid == "GPU-0"]
    assert again.detail.startswith(f"{format_mib(usable - 1_024)} usable")


def test_a_cycle_keeps_the_shapes_of_its_tries_from_submission(monkeypatch: pytest.MonkeyPatch) -> None:
    cycle = SchedulingCycle(Placer(CompletionTime()), Backfill(), reservations=Reservations(seen_after_s=30.0))
    made = []
    shape = Placer.shape

    def counted(self: Placer, r: TaskRequest) -> tuple[object, ...]:
        made.append(r.key)
        return shape(self, r)

    monkeypatch.setattr(Placer, "shape", counted)
    tries = [request(f"r{k}", 30_000 if k % 2 else 6_000) for k in range(6)]
    for r in tries:
        cycle.submit(r, 0.0)
    assert sorted(made) == sorted(r.key for r in tries)
    assert all(cycle.placer.shape_of(r) == shape(cycle.placer, r) for r in tries)
    made.clear()
    cycle.run(0.0, [busy_gpu(0, free=20_000), busy_gpu(1, free=20_000)])
    assert made == []  # the pass made no shape again
    # a try whose activity is learned is another request object, with its own shape
    known = ActivityEstimate(0.7, 3, 0.05, 0.6, 0.8, 0.8, "learned")
    assert cycle.learn_activity("r1", known)
    (waiting,) = [r for r in cycle.waiting_requests() if r.key == "r1"]
    assert waiting.activity == known
    assert cycle.placer.shape_of(waiting) == shape(cycle.placer, waiting)
    assert known in cycle.placer.shape_of(waiting)


def _per_model(policy: CompletionTime) -> CompletionTime:
    """Run times per task type and GPU model: the A100 fleet's types 2-3x faster than on an L4."""
    for t in range(5):
        policy.learn_duration(f"type{t}", 300.0 + 600.0 * t, "A100-40GB")
        policy.learn_duration(f"type{t}", (300.0 + 600.0 * t) * (2.0 + 0.25 * t), "L4")
    return policy


def test_a_paced_drain_walk_resumed_after_a_claim_decides_as_the_walk_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a mixed fleet a one-GPU try's drain is the soonest drain plus its run on that GPU's model;
    # the walk that found it is kept for the next try of the same shape and runs, and resumed
    # after a claim (the played GPUs less the claimed keep their totals): it must decide exactly as
    # walking afresh for every try does
    from carma_airflow.core.placement_drains import DrainPass

    walk = DrainPass._drain_one
    resumed = []

    def counted(self: DrainPass, key: tuple[object, ...], *args: Any) -> Any:
        if len(args) > 3 and key in self._scans:
            resumed.append(1)
        return walk(self, key, *args)

    def afresh(self: DrainPass, key: tuple[object, ...], *args: Any) -> Any:
        self._scans.pop(key, None)
        return walk(self, key, *args)

    for seed in range(3):
        monkeypatch.setattr(DrainPass, "_drain_one", counted)
        kept = _passes(_per_model(CompletionTime()), seed, True)
        monkeypatch.setattr(DrainPass, "_drain_one", afresh)
        fresh = _passes(_per_model(CompletionTime()), seed, True)
        assert kept == fresh  # the same decisions, reasons and their texts included
        assert any(getattr(d, "placed", False) for d in kept)
    assert resumed  # some paced walk was resumed rather than started again
