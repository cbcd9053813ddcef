"""The drain order's loose bounds (core/drain_order.py): a pass whose drain order starts from
bounds that predict no speed decides exactly as one whose every bound is worked out at once, over
several passes with time moving on, tries ending, model hand-overs and the floor; and a loose
bound is never more than the bound it stands for.  Likewise a pass whose one-GPU drain walks are
resumed across its placements (core/placement_drains.py, ``_replay``) decides as one whose walks
all start afresh after each placement."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import pytest
from helpers import busy_gpu, view
from test_deep_queue_paths import _gpus, _request, assert_same_pass

from carma_airflow.core import Backfill, Placer, SchedulingCycle
from carma_airflow.core.drain_order import Drain, settle
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.core.placement_drains import DrainPass
from carma_airflow.core.placement_pass import PlacementPass
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.core.policies.forecast import LearnedForecast
from carma_airflow.core.reservations import Reservations

KINDS = 6


def _cycle(runs: list[float], floor: float | None) -> SchedulingCycle:
    policy = CompletionTime(settings=CompletionSettings(min_gain=floor))
    for j, seconds in enumerate(runs[:-1]):  # the last kind never measured: it borrows the median
        policy.learn_duration(f"kind{j}", seconds)
    return SchedulingCycle(
        Placer(policy), Backfill(aging_s=60.0, starvation_s=150.0), reservations=Reservations(seen_after_s=30.0)
    )


def _policy(cycle: SchedulingCycle) -> CompletionTime:
    policy = cycle.placer.policy
    assert isinstance(policy, CompletionTime)
    return policy


def _loose(cycle: SchedulingCycle) -> int:
    """Entries of the drain order the placer keeps that still hold a loose bound."""
    cache = cycle.placer._cache
    drains = cache.pools.drains if cache is not None else None
    return sum(1 for e in drains or () if e[3] is not None)


def _kept(cycle: SchedulingCycle) -> tuple[object, ...]:
    """The placer's kept waits: how many were reused and refused, and each one's GPU, drain time
    and the usable GPUs its drain walk looked at."""
    kept = cycle.placer.kept
    waits = {
        str(key): (w.drained.uuid, w.drain_at, sorted(f.uuid for f in w.early.values()))
        for key, w in kept.by_key.items()
    }
    return kept.reused, kept.refused, waits


def _compare(
    seed: int,
    floor: float | None,
    quiet: bool,
    monkeypatch: pytest.MonkeyPatch,
    afresh: bool = False,
    readings: bool = False,
) -> tuple[int, int, int]:
    """Two cycles over the same tries and GPUs, one with loose bounds and one with every bound
    worked out at once, that must decide alike pass by pass; (loose entries left, waits priced,
    kept waits reused) summed over the passes.  ``quiet``: after two passes' arrivals, passes
    without reasons a few seconds apart and few tries ending (waits are kept from pass to pass).
    ``afresh``: the reference is instead one whose drain walks start afresh after each placement."""
    rng = random.Random(seed * 13 + (floor is None))
    runs = [rng.uniform(60.0, 4_000.0) for _ in range(KINDS)]
    lazy, eager = _cycle(runs, floor), _cycle(runs, floor)
    every = _policy(eager)
    if afresh:
        apply = PlacementPass.apply

        def apply_afresh(self: PlacementPass, *args: object) -> None:
            apply(self, *args)  # type: ignore[arg-type]
            if eager.placer.policy is self.pol:
                self._scans = {}  # the reference's walks: afresh after each placement

        monkeypatch.setattr(PlacementPass, "apply", apply_afresh)
    else:
        monkeypatch.setattr(every, "quick_bound", lambda f: (every.bound(f), True))  # no loose bound
    monitor = _gpus(rng, rng.randint(8, 24))
    now, k, loose, waited, reused = 1_000.0, 0, 0, 0, 0
    for step in range(14):
        for _ in range(rng.randint(0, 30) if step < 2 or not quiet else 0):
            r = _request(rng, k, now)
            r = replace(r, label=f"kind{rng.randrange(KINDS)}[{k}]")
            k += 1
            lazy.submit(r, now)
            eager.submit(r, now)
        if step in (5, 10):  # a hand-over: every GPU is predicted afresh
            for c in (lazy, eager):
                _policy(c).use_model(InterferenceModel())
        explain = not quiet and rng.random() < 0.5
        if readings:  # a monitor's new reading: every GPU a new state, its tenants the ledger's
            monitor = [replace(g) for g in monitor]
        a = lazy.run(now, monitor, waiting_decisions=explain)
        b = eager.run(now, monitor, waiting_decisions=explain)
        assert_same_pass(a, b)
        assert _kept(lazy) == _kept(eager)  # the same waits kept, resting on the same GPUs looked at
        loose += _loose(lazy)
        assert afresh or _loose(eager) == 0
        waited += sum(1 for d in a.waiting.values() if "waiting for" in d.summary)
        running = sorted(r.key for r in lazy.reservations)
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 1 if quiet else 5))):
            lazy.release(key)
            eager.release(key)
        now += rng.choice((0.0, 1.0, 5.0) if quiet else (0.0, 5.0, 31.0, 200.0, 900.0))
        reused += lazy.placer.kept.reused
    return loose, waited, reused


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("floor", [None, 0.3])
@pytest.mark.parametrize("readings", [False, True])
def test_a_pass_from_loose_bounds_decides_as_one_with_every_bound_at_once(
    seed: int, floor: float | None, readings: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose, waited, _ = _compare(seed, floor, False, monkeypatch, readings=readings)
    assert waited > 0  # waiting was priced: the drain order was walked
    assert loose > 0  # and some GPU was never bounded: its speeds never predicted


def test_waits_kept_over_a_loose_order_hold_as_over_one_bounded_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kept wait holds while no GPU it did not look at could drain first: the order's prefix
    reused = sum(_compare(seed, floor, True, monkeypatch)[2] for seed in range(8) for floor in (None, 0.3))
    assert reused > 0


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("floor", [None, 0.3])
def test_drain_walks_resumed_across_placements_decide_as_walks_afresh(
    seed: int, floor: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay, played = DrainPass._replay, []

    def counted(self: DrainPass, scan: object, *args: object) -> None:
        before = len(scan.by_uuid)  # type: ignore[attr-defined]
        replay(self, scan, *args)  # type: ignore[arg-type]
        played.append(len(scan.by_uuid) - before)  # type: ignore[attr-defined]

    monkeypatch.setattr(DrainPass, "_replay", counted)
    _, waited, _ = _compare(seed, floor, False, monkeypatch, afresh=True)
    assert waited > 0  # waiting was priced: walks were resumed
    assert played  # some walk was resumed after a placement


def test_some_resumed_walk_plays_a_gpu_placed_on_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # across the seeds above, a walk took a GPU placed on back into what it played (not only out)
    replay, again = DrainPass._replay, list[str]()

    def counted(self: DrainPass, scan: object, need: int, *args: object) -> None:
        fresh = self._placed_on[scan.replayed :]  # type: ignore[attr-defined]
        replay(self, scan, need, *args)  # type: ignore[arg-type]
        again.extend(u for u in fresh if u in scan.by_uuid)  # type: ignore[attr-defined]

    monkeypatch.setattr(DrainPass, "_replay", counted)
    for seed in range(8):
        _compare(seed, None, False, monkeypatch, afresh=True)
    assert again


def test_a_loose_bound_is_at_most_the_bound() -> None:
    gpus = [busy_gpu(i, 10_000, tenants=i + 1, placed_at=-300.0 * (i + 1)) for i in range(4)]
    facts = Placer(CompletionTime()).facts(view(*gpus))
    untimed = LearnedForecast()
    assert all(untimed.quick_left(f, 0.0) == (untimed.longest_left(f, 0.0), True) for f in facts)  # no speed
    for now in (0.0, 250.0, 500.0, 2_000.0, 50_000.0):  # before, near and long past the run times
        fc = LearnedForecast()
        for kind, seconds in (("tenant0-0", 400.0), ("tenant1-1", 800.0), ("tenant2-2", 1_200.0)):
            fc.learn_duration(kind, seconds)  # the other tenants' types borrow the median
        for f in facts:
            loose, exact = fc.quick_left(f, now)
            assert not exact  # nothing predicted yet for these tenants
            assert loose <= fc.longest_left(f, now)
            assert fc.quick_left(f, now) == (fc.longest_left(f, now), True)  # now at hand: the bound


@pytest.mark.parametrize("seed", range(5))
def test_settling_each_entry_met_walks_the_gpus_in_the_order_their_bounds_sort(seed: int) -> None:
    rng = random.Random(seed)
    bounds = {f"GPU-{i}": float(rng.choice((10, 20, 20, 35, 50))) for i in range(40)}  # ties, by place
    facts = {uuid: cast(GpuFacts, SimpleNamespace(uuid=uuid)) for uuid in bounds}
    chooser = cast(CompletionTime, SimpleNamespace(now=0.0, settled_bound=lambda f, at: bounds[f.uuid]))
    order: list[Drain] = []
    for place, (uuid, b) in enumerate(bounds.items()):  # some exact, the others loose by up to 40
        loose = rng.random() < 0.7
        order.append((b - rng.uniform(0.0, 40.0) if loose else b, place, facts[uuid], 0.0 if loose else None))
    order.sort(key=lambda e: (e[0], e[1]))
    where = {e[2].uuid: e for e in order}
    walked, k = [], 0
    while k < len(order):  # a walk that settles every entry it comes to
        if order[k][3] is not None:
            settle(order, where, k, chooser)
            continue
        walked.append(order[k][:2])
        k += 1
    assert walked == sorted((b, place) for place, b in enumerate(bounds.values()))
    assert all(e[3] is None and where[e[2].uuid] is e for e in order)
